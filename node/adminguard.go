package node

import (
	"net/http"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/edgecache/edge/internal/clientaddr"
)

// Wrong admin tokens are bounded per client address: a token bucket of
// guessBurst wrong tokens, refilled at guessRate. The admin API answered
// wrong guesses as fast as they came (a review's
// TestS29AdminWeakTokenIsNotAcceptedSilently: 2,000 guesses in 43 ms on
// one connection, then the purge of everything), so a short token fell to
// an online search. A right token costs nothing; an address out of
// guesses is refused without its token being compared, right or wrong,
// until the bucket refills, so a search learns nothing from those answers.
const (
	guessRate      = rate.Limit(1) // wrong tokens per second, per address, in the long run
	guessBurst     = 10            // an operator's typos, and a script's retries
	guessAddresses = 10_000        // addresses remembered (about 150 B each); a forgotten one starts with a full bucket
)

// adminGuesses counts wrong admin tokens per address (clientaddr: an IPv4
// address, an IPv6 /64).
type adminGuesses struct {
	buckets  *lru.Cache[string, *rate.Limiter]
	failures *prometheus.CounterVec
}

func newAdminGuesses(reg prometheus.Registerer) *adminGuesses {
	buckets, _ := lru.New[string, *rate.Limiter](guessAddresses)
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_admin_auth_failures_total",
		Help: "Admin requests that offered a token that was not taken: wrong (a wrong token or password), or throttled (the address had used its wrong tokens, about one a second after a burst of ten, and its token was not compared).",
	}, []string{"why"})
	failures.WithLabelValues("wrong")
	failures.WithLabelValues("throttled")
	reg.MustRegister(failures)
	return &adminGuesses{buckets: buckets, failures: failures}
}

// throttled reports whether remote has no wrong guess left now (and counts
// the refusal).
func (g *adminGuesses) throttled(remote string, now time.Time) bool {
	b, ok := g.buckets.Get(clientaddr.OfRemote(remote))
	if ok && b.TokensAt(now) < 1 {
		g.failures.WithLabelValues("throttled").Inc()
		return true
	}
	return false
}

// wrong takes one of remote's wrong guesses.
func (g *adminGuesses) wrong(remote string, now time.Time) {
	g.failures.WithLabelValues("wrong").Inc()
	bucket(g.buckets, clientaddr.OfRemote(remote), guessRate, guessBurst).AllowN(now, 1)
}

// tooManyGuesses answers a request from an address out of wrong guesses.
func tooManyGuesses(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "10")
	http.Error(w, "too many wrong admin tokens from this address: try again in a few seconds", http.StatusTooManyRequests)
}
