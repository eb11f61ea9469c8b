package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// userOrigin answers each request with the identity of the user who sent
// it (cookie or credentials), under the headers the path names.
type userOrigin struct{}

func (userOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	req := fr.Req
	user := req.Header.Get("Cookie") + req.Header.Get("Authorization")
	h := http.Header{"Content-Type": {"text/plain"}}
	switch {
	case strings.Contains(req.URL.Path, "/private/"):
		h.Set("Cache-Control", "private, max-age=600")
	case strings.Contains(req.URL.Path, "/setcookie/"):
		h.Set("Cache-Control", "max-age=600")
		h.Set("Set-Cookie", "session="+user)
	case strings.Contains(req.URL.Path, "/vary/"):
		h.Set("Cache-Control", "max-age=600")
		h.Set("Vary", "Cookie")
	case strings.Contains(req.URL.Path, "/public/"):
		h.Set("Cache-Control", "public, max-age=600")
	default: // an authorised request, a response that does not say public
		h.Set("Cache-Control", "max-age=600")
	}
	body := "for " + user
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// The next-home path hands a response fetched for one request to others:
// the ingress climbs to the page's next home when the home is unreachable,
// and that node stores what it fetched. Two users ask for the same pages,
// in turn, through that path (the home has crashed and is not yet
// suspected); neither may ever see the other's answer or cookie, at the
// ingress or when asking the next home directly.
func TestNextHomeNeverLeaksBetweenUsers(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "N", "H", "X"}, routing.ModeHybrid, 2, 300*time.Millisecond, userOrigin{})
	a := nodes["A"]
	kinds := []string{"private", "setcookie", "vary", "auth"}
	var paths []string
	for i := 0; len(paths) < 2*len(kinds) && i < 100000; i++ {
		kind := kinds[len(paths)%len(kinds)]
		p := "/" + kind + "/" + strconv.Itoa(i)
		if r := rankingOf(a, p); r[0] == "H" && r[1] == "N" {
			paths = append(paths, p)
		}
	}
	if len(paths) < 2*len(kinds) {
		t.Fatalf("found %d pages homed at H with N next", len(paths))
	}
	nodes["H"].srv.Close() // crashed, still trusted
	users := []struct{ cookie, auth string }{{"user=alice", ""}, {"user=bob", ""}}
	ask := func(n *realNode, p string, u int) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://site.example"+p, nil)
		if strings.HasPrefix(p, "/auth/") {
			r.Header.Set("Authorization", "Bearer "+users[u].cookie)
		} else {
			r.Header.Set("Cookie", users[u].cookie)
		}
		w := httptest.NewRecorder()
		n.ph.ServeHTTP(w, r)
		n.ph.Wait()
		return w
	}
	nextHomeClimbs := func() float64 { return testutil.ToFloat64(a.c.metrics.ClimbHops.WithLabelValues("next_home")) }
	viaNextHome := map[string]bool{}
	for _, p := range paths {
		before := nextHomeClimbs()
		for round := range 2 {
			for u := range users {
				for _, n := range []*realNode{a, nodes["N"]} {
					w := ask(n, p, u)
					mine, other := users[u].cookie, users[1-u].cookie
					if w.Code != 200 || !strings.Contains(w.Body.String(), mine) || strings.Contains(w.Body.String(), other) {
						t.Fatalf("%s round %d, %s at %s: %d %q (%s): another user's answer", p, round, mine, n.id, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
					}
					for _, sc := range w.Header().Values("Set-Cookie") {
						if strings.Contains(sc, other) {
							t.Fatalf("%s: %s at %s got %s's cookie %q", p, mine, n.id, other, sc)
						}
					}
				}
			}
		}
		if nextHomeClimbs() > before {
			viaNextHome[strings.Split(p, "/")[1]] = true
		}
	}
	// Each kind of per-user answer went through the next home's climb
	// (checked before the public control below, which also climbs there).
	for _, kind := range kinds {
		if !viaNextHome[kind] {
			t.Errorf("no %s page was asked through the next home: the test did not exercise that path for it", kind)
		}
	}
	// The control: a response every user may share does go through this
	// path to the next user, so the checks above were not vacuous.
	var public string
	for i := 0; public == "" && i < 100000; i++ {
		if p := "/public/" + strconv.Itoa(i); rankingOf(a, p)[1] == "N" && rankingOf(a, p)[0] == "H" {
			public = p
		}
	}
	first := ask(nodes["X"], public, 0)
	if w := ask(a, public, 1); w.Body.String() != first.Body.String() {
		t.Fatalf("public page: bob got %q, want the shared %q: nothing is shared on this path", w.Body.String(), first.Body.String())
	}
}
