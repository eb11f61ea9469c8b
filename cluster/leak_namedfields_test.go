package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// namedOrigin answers every request with one page for anyone, and the
// requester's own account and cookie in fields its Cache-Control names
// (no-cache="Set-Cookie, X-Account": the rest may be shared).
type namedOrigin struct{ fetches *atomic.Int64 }

func (o namedOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.fetches.Add(1)
	user := fr.Req.Header.Get("Cookie")
	h := http.Header{
		"Content-Type":  {"text/plain"},
		"Cache-Control": {`public, max-age=600, no-cache="Set-Cookie, X-Account"`},
		"X-Account":     {user},
		"Set-Cookie":    {"session=" + user},
	}
	body := "shared page"
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestNamedFieldsNeverCrossTheCluster: alice's request for a page homed
// at H fills H (and the ingress) with a copy whose named fields are hers;
// the page is then shared through the home, the ingress and a third node,
// and nobody else ever gets her account or cookie.
func TestNamedFieldsNeverCrossTheCluster(t *testing.T) {
	var fetches atomic.Int64
	nodes := startRealNodes(t, []string{"A", "H", "X"}, routing.ModeHybrid, 2, 300*time.Millisecond, namedOrigin{&fetches})
	a := nodes["A"]
	var page string
	for i := 0; page == "" && i < 100000; i++ {
		if p := "/named/" + strconv.Itoa(i); rankingOf(a, p)[0] == "H" {
			page = p
		}
	}
	ask := func(n *realNode, user string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://site.example"+page, nil)
		if user != "" {
			r.Header.Set("Cookie", user)
		}
		w := httptest.NewRecorder()
		n.ph.ServeHTTP(w, r)
		n.ph.Wait()
		return w
	}
	first := ask(a, "user=alice")
	if first.Header().Get("X-Account") != "user=alice" || first.Header().Get("Set-Cookie") != "session=user=alice" {
		t.Fatalf("alice did not get her own fields: %v", first.Header())
	}
	for _, step := range []struct {
		at   string
		user string
	}{{"A", "user=bob"}, {"H", "user=bob"}, {"X", "user=carol"}, {"X", ""}, {"A", ""}} {
		w := ask(nodes[step.at], step.user)
		if w.Code != 200 || w.Body.String() != "shared page" {
			t.Fatalf("%s at %s: %d %q", step.user, step.at, w.Code, w.Body.String())
		}
		for _, f := range []string{"X-Account", "Set-Cookie"} {
			for _, v := range w.Header().Values(f) {
				if strings.Contains(v, "alice") || v != "" {
					t.Errorf("%q at %s got %s: %q (Cache-Status %q)", step.user, step.at, f, v, w.Header().Get("Cache-Status"))
				}
			}
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("the origin was asked %d times, want 1: the page was not shared through the cluster", n)
	}
}
