package node

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/config"
)

// s30admAsk sends one admin request and returns its status and body.
func s30admAsk(t *testing.T, c *http.Client, method, u, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func s30admBasic(pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("op:"+pass))
}

const s30admToken = "admin-token-0123456789"

func s30admNode(t *testing.T) (adm string) {
	adm = freeAddr(t)
	startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+adm+"', token: '"+s30admToken+"'}\norigin: {url: 'http://127.0.0.1:1'}\n")
	return adm
}

// A review found (now mended): the status page compares the token up to twice per request
// (guardHot, then the route explorer's check for ?url=), and each wrong
// compare is charged: one request to /status?url=/x carrying a wrong
// Basic password (a browser's remembered credentials after admin.token
// was rotated, which it re-sends on every page) costs two of the ten
// wrong tokens the bound promises, and edge_admin_auth_failures_total
// {why="wrong"} counts two. Steps: 5 × GET /status?refresh=0&url=/x with
// a wrong Basic password, then POST /purge with the right Bearer token.
// Expected: the 5 wrong requests leave 5 guesses, the right token is
// taken (200); got 429 after 5 requests (10 charged).
func TestS30AdminStatusRouteChargesOneRequestOnce(t *testing.T) {
	adm := s30admNode(t)
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range 5 {
		code, _ := s30admAsk(t, c, "GET", "http://"+adm+"/status?refresh=0&url=/x", s30admBasic(fmt.Sprint("old-token-", i)))
		if code != http.StatusOK {
			t.Fatalf("status page %d: %d", i, code)
		}
	}
	code, body := s30admAsk(t, c, "POST", "http://"+adm+"/purge?tag=t", "Bearer "+s30admToken)
	if code != http.StatusOK {
		t.Errorf("the right token after 5 requests with one wrong password each: %d %q, want 200 (5 of the 10 wrong tokens used)", code, strings.TrimSpace(body))
	}
	_, m := s30admAsk(t, c, "GET", "http://"+adm+"/metrics", "")
	if !strings.Contains(m, `edge_admin_auth_failures_total{why="wrong"} 5`) {
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "edge_admin_auth_failures_total") {
				t.Logf("%s", l)
			}
		}
		t.Errorf("5 requests with a wrong password are not counted as 5 wrong tokens")
	}
}

// Claim held: Basic on /status?login=1 and Bearer on /purge draw from one
// bucket: 10 wrong passwords then the right Bearer token on /purge is 429,
// and the right password on /status?login=1 is 401 (not compared).
func TestS30AdminBasicAndBearerShareTheBound(t *testing.T) {
	adm := s30admNode(t)
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range guessBurst {
		if code, _ := s30admAsk(t, c, "GET", "http://"+adm+"/status?login=1&refresh=0", s30admBasic(fmt.Sprint("guess-", i))); code != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i, code)
		}
	}
	if code, _ := s30admAsk(t, c, "POST", "http://"+adm+"/purge?tag=t", "Bearer "+s30admToken); code != http.StatusTooManyRequests {
		t.Errorf("right Bearer after 10 wrong Basic passwords: %d, want 429", code)
	}
	code, body := s30admAsk(t, c, "GET", "http://"+adm+"/status?login=1&refresh=0", s30admBasic(s30admToken))
	if code == http.StatusOK || strings.Contains(body, "hottest_pages") {
		t.Errorf("right password while throttled: %d, taken", code)
	}
}

// Claim held: while an address is throttled the right token is answered
// exactly as a wrong one (same status, same body, same headers that
// matter), on /purge, /status.json and /status, so the bound says nothing
// about a guess; and the right token is taken again once the bucket has
// refilled (not earlier than ~1 s).
func TestS30AdminThrottledAnswerSaysNothingAboutTheGuess(t *testing.T) {
	adm := s30admNode(t)
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range guessBurst {
		s30admAsk(t, c, "POST", "http://"+adm+"/purge?tag=t", fmt.Sprint("Bearer guess-", i))
	}
	t0 := time.Now()
	for _, ep := range []struct{ method, path string }{{"POST", "/purge?tag=t"}, {"GET", "/status.json"}, {"GET", "/status?refresh=0"}, {"GET", "/status/route.json?url=/x"}} {
		rc, rb := s30admAsk(t, c, ep.method, "http://"+adm+ep.path, "Bearer "+s30admToken)
		wc, wb := s30admAsk(t, c, ep.method, "http://"+adm+ep.path, "Bearer wrong-wrong-wrong-wrong")
		if ep.path == "/status.json" || strings.HasPrefix(ep.path, "/status?") {
			// Counters on the page move between the two asks; compare what
			// the token decides.
			rb = fmt.Sprint(strings.Contains(rb, "hidden without") || strings.Contains(rb, "hottest_pages_hidden") || strings.Contains(rb, "sign in"))
			wb = fmt.Sprint(strings.Contains(wb, "hidden without") || strings.Contains(wb, "hottest_pages_hidden") || strings.Contains(wb, "sign in"))
		}
		if rc != wc || rb != wb {
			t.Errorf("%s %s while throttled: right token %d %q, wrong %d %q", ep.method, ep.path, rc, rb, wc, wb)
		}
	}
	if time.Since(t0) < 900*time.Millisecond {
		// The wrong asks above keep the bucket empty; after a quiet second
		// the right token is taken.
		time.Sleep(1100 * time.Millisecond)
		if code, _ := s30admAsk(t, c, "POST", "http://"+adm+"/purge?tag=t", "Bearer "+s30admToken); code != http.StatusOK {
			t.Errorf("right token after a quiet second: %d, want 200", code)
		}
	}
}

// Claim held: the bound keys an address however it is spelt (port,
// IPv4-mapped IPv6, bare), and an IPv6 /64 as one; the state is bounded
// (10,000 addresses, the oldest forgotten).
func TestS30AdminGuessesKeySpellingsAndBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := &Node{cfg: &config.Config{}, guesses: newAdminGuesses(reg)}
	n.cfg.Admin.Token = s30admToken
	h := n.requireToken(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	ask := func(remote, token string) int {
		r := httptest.NewRequest("POST", "/purge", nil)
		r.RemoteAddr = remote
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	spell := []string{"192.0.2.7:1", "[::ffff:192.0.2.7]:2", "[::ffff:c000:207]:3", "192.0.2.7", "[::ffff:192.0.2.7%eth0]:4"}
	for i := range guessBurst {
		ask(spell[i%len(spell)], fmt.Sprint("g", i))
	}
	for _, s := range spell {
		if code := ask(s, s30admToken); code != http.StatusTooManyRequests {
			t.Errorf("%s after 10 wrong tokens from other spellings of the address: %d, want 429", s, code)
		}
	}
	for i := range guessBurst {
		ask(fmt.Sprintf("[2001:db8:1:2::%x]:1", i+1), "w")
	}
	if code := ask("[2001:db8:1:2:ffff::1]:9", s30admToken); code != http.StatusTooManyRequests {
		t.Errorf("another address of the same /64: %d, want 429", code)
	}
	if code := ask("[2001:db8:1:3::1]:9", s30admToken); code != http.StatusNoContent {
		t.Errorf("another /64: %d, want 204", code)
	}
	now := time.Now()
	for i := range 3 * guessAddresses {
		n.guesses.wrong(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255), now)
	}
	if l := n.guesses.buckets.Len(); l > guessAddresses {
		t.Errorf("%d addresses remembered, want at most %d", l, guessAddresses)
	}
	if v := testutil.CollectAndCount(n.guesses.failures); v != 2 {
		t.Errorf("edge_admin_auth_failures_total has %d series, want 2", v)
	}
}

// Claim held: over admin.tls with HTTP/2, many streams on one connection
// are bounded as connections are: 20 wrong tokens at once, at most 10
// compared.
func TestS30AdminHTTP2StreamsShareTheBound(t *testing.T) {
	n, _ := adminTLSNode(t, "")
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// One request first so that the streams share its connection.
	resp, err := c.Get("https://" + n.AdminAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("admin.tls answered over %s, want HTTP/2", resp.Proto)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	counts := map[int]int{}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := s30admAsk(t, c, "POST", "https://"+n.AdminAddr()+"/purge?tag=t", fmt.Sprint("Bearer g", i))
			mu.Lock()
			counts[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[http.StatusUnauthorized] > guessBurst+1 || counts[http.StatusOK] > 0 {
		t.Errorf("20 wrong tokens on HTTP/2 streams: %v", counts)
	}
	if code, _ := s30admAsk(t, c, "POST", "https://"+n.AdminAddr()+"/purge?tag=t", "Bearer tok"); code != http.StatusTooManyRequests {
		t.Errorf("right token after: %d, want 429", code)
	}
}
