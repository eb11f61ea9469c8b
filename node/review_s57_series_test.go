package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestS57RequestInFlightOnARemovedSiteBringsBackItsSeries: a reload that
// removes a site deletes its series (edge_origin_retries_total, edge_rule_*:
// docs/operations.md "Reloads keep what they can", "a removed site's
// series ... go with it"), but a request of that site still in flight on
// the old table counts into them afterwards by label values
// (WithLabelValues), which makes them again: the removed site is back on
// /metrics for the life of the process. Here the site's first origin
// answers the request in flight 502 after the reload, the pool retries on
// the second, and the rule counts the request.
func TestS57RequestInFlightOnARemovedSiteBringsBackItsSeries(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var gated atomic.Bool
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/p" && gated.CompareAndSwap(false, true) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "ok")
	})
	o1, o2 := httptest.NewServer(handler), httptest.NewServer(handler)
	var released atomic.Bool
	open := func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}
	t.Cleanup(func() { open(); o1.Close(); o2.Close() })
	keep := newS7Origin(t, "K")
	rule := "    rules:\n      - name: pages\n        match: {path: '/*'}\n        ttl: 1m\n"
	v1 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{keep.URL}, "") + s7Site("gone", []string{"gone.test"}, []string{o1.URL, o2.URL}, rule)
	v2 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{keep.URL}, "")
	n := startS7Node(t, v1)

	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+n.pub+"/p", nil)
		req.Host = "gone.test"
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached an origin")
	}
	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload removing site gone: %d %s", code, body)
	}
	_, metrics := getBody(t, "http://"+n.adm+"/metrics")
	if s := s57SeriesOf(metrics, `site="gone"`); len(s) > 0 {
		t.Fatalf("right after the reload /metrics already has series of the removed site: %s", strings.Join(s, "; "))
	}
	open()
	select {
	case code := <-done:
		t.Logf("the request in flight across the reload: %d", code)
	case <-time.After(30 * time.Second):
		t.Fatal("the request in flight never ended")
	}
	n.Proxy().Wait()
	_, metrics = getBody(t, "http://"+n.adm+"/metrics")
	if s := s57SeriesOf(metrics, `site="gone"`); len(s) > 0 {
		t.Errorf("site gone was removed by a reload; once its request in flight ended, /metrics has %d series for it again: %s",
			len(s), strings.Join(s, "; "))
	}
}

// s57SeriesOf returns the edge_ sample lines of a /metrics text holding
// label.
func s57SeriesOf(metrics, label string) []string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "edge_") && strings.Contains(l, label) {
			out = append(out, l)
		}
	}
	return out
}
