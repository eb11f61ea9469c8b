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

// s29NamedOrigin answers every request with one page for anyone, and the
// requester's own account and cookie in fields the list in hdr names
// (Cache-Control, a targeted field, or private="…").
type s29NamedOrigin struct {
	fetches *atomic.Int64
	hdr     map[string]string
}

func (o s29NamedOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.fetches.Add(1)
	user := fr.Req.Header.Get("Cookie")
	h := http.Header{"Content-Type": {"text/plain"}, "X-Account": {user}, "Set-Cookie": {"session=" + user}}
	for k, v := range o.hdr {
		h.Set(k, v)
	}
	body := "shared page"
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestS29NamedTargetedListsNeverCrossTheCluster: the list in
// Cache-Control, or given only in a targeted field (CDN-Cache-Control, Edge-Cache-Control, which peers
// are given and clients are not, Surrogate-Control), or in private="…",
// keeps alice's account and cookie to her through the home, the ingress
// and a third node. Claim of 982f8ef: held.
func TestS29NamedTargetedListsNeverCrossTheCluster(t *testing.T) {
	for name, hdr := range map[string]map[string]string{
		"CDN-Cache-Control":  {"Cache-Control": "max-age=600", "CDN-Cache-Control": `max-age=600, no-cache="Set-Cookie, X-Account"`},
		"Edge-Cache-Control": {"Cache-Control": "max-age=600", "Edge-Cache-Control": `max-age=600, no-cache="Set-Cookie, X-Account"`},
		"Surrogate-Control":  {"Surrogate-Control": `max-age=600, no-cache="Set-Cookie, X-Account"`},
		"private":            {"Cache-Control": `public, max-age=600, private="set-cookie,x-account"`},
		"Cache-Control":      {"Cache-Control": `public, max-age=600, no-cache="Set-Cookie, X-Account"`},
	} {
		t.Run(name, func(t *testing.T) {
			var fetches atomic.Int64
			nodes := startRealNodes(t, []string{"A", "H", "X"}, routing.ModeHybrid, 2, 300*time.Millisecond, s29NamedOrigin{&fetches, hdr})
			a := nodes["A"]
			var page string
			for i := 0; page == "" && i < 100000; i++ {
				if p := "/named29/" + strconv.Itoa(i); rankingOf(a, p)[0] == "H" {
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
			if first.Header().Get("X-Account") != "user=alice" {
				t.Fatalf("alice did not get her own account: %v", first.Header())
			}
			for _, step := range []struct{ at, user string }{{"A", "user=bob"}, {"H", "user=bob"}, {"X", "user=carol"}, {"X", ""}, {"A", ""}, {"H", ""}} {
				w := ask(nodes[step.at], step.user)
				if w.Code != 200 || w.Body.String() != "shared page" {
					t.Fatalf("%s at %s: %d %q", step.user, step.at, w.Code, w.Body.String())
				}
				for k, vs := range w.Header() {
					for _, v := range vs {
						if strings.Contains(v, "alice") {
							t.Errorf("%q at %s got %s: %q (Cache-Status %q)", step.user, step.at, k, v, w.Header().Get("Cache-Status"))
						}
					}
				}
			}
			if n := fetches.Load(); n != 1 {
				t.Errorf("the origin was asked %d times, want 1: the page was not shared through the cluster", n)
			}
		})
	}
}
