package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type errEOFBody struct{}

func (errEOFBody) Read([]byte) (int, error) {
	return 0, errors.New("cluster: peer response failed authentication")
}
func (errEOFBody) Close() error { return nil }

// what the cluster fetcher hands the proxy for a peer's 204
type peer204 struct{}

func (peer204) Fetch(ctx context.Context, fr FetchRequest) (Result, error) {
	return Result{Resp: &http.Response{StatusCode: 204, Header: http.Header{"Cache-Control": {"max-age=60"}}, Body: io.NopCloser(errEOFBody{}), ContentLength: -1}, Keep: true}, nil
}

func TestHostilePeer204ReachesClient(t *testing.T) {
	store := NewStore(1<<20, 4)
	h := New(DefaultConfig(), store, peer204{}, NewMetrics(prometheus.NewRegistry(), store), nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/beacon")
	if err != nil {
		t.Fatalf("client request for a 204 failed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("status %d, want the peer's 204", resp.StatusCode)
	}
}

// TestHostilePeer204IsStoredFromItsHeader: a peer's 204 carries no body, so
// the proxy never reads one (and never meets the body stream's
// authentication error, which this fetcher returns on any read); its status
// and header are authenticated by the header MAC before the proxy sees
// them, so storing it shares nothing unauthenticated. The second request is
// a hit with the same empty answer, and nothing panics.
func TestHostilePeer204IsStoredFromItsHeader(t *testing.T) {
	store := NewStore(1<<20, 4)
	h := New(DefaultConfig(), store, peer204{}, NewMetrics(prometheus.NewRegistry(), store), nil)
	for i, want := range []string{"stored", "hit"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/beacon", nil))
		h.Wait()
		if cs := w.Header().Get("Cache-Status"); w.Code != http.StatusNoContent || w.Body.Len() != 0 || !strings.Contains(cs, want) {
			t.Fatalf("request %d: %d, %d body bytes, %q; want 204, empty, %s", i+1, w.Code, w.Body.Len(), cs, want)
		}
	}
}

// Purge ignores cache.sort_query.
func TestHostilePurgeSortQuery(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "x")
	}, func(c *Config) { c.SortQuery = true })
	serve(h, "GET", "/p?b=1&a=2")
	n, _ := h.Purge(PurgeRequest{URL: "http://example.com/p?b=1&a=2"})
	if n == 0 {
		t.Errorf("purge of the URL as clients request it removed nothing (stored as ?a=2&b=1)")
	}
}

// inMemoryFetcher answers like the cluster's fetcher for a small peer
// answer read whole: the body is in memory, and Result.InMemory says so.
// The page is per user when the request carries a cookie (the origin's
// Cache-Control: private then), shared otherwise; it varies on Cookie.
type inMemoryFetcher struct{}

func (inMemoryFetcher) Fetch(_ context.Context, fr FetchRequest) (Result, error) {
	body, cc := "page for everyone", "max-age=60"
	if c := fr.Req.Header.Get("Cookie"); c != "" {
		body, cc = "page for "+c, "private, max-age=60"
	}
	h := http.Header{"Cache-Control": {cc}, "Content-Type": {"text/plain"}, "Vary": {"Cookie"}}
	return Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))},
		Keep: true, From: UpstreamPeer, InMemory: true}, nil
}

// TestInMemoryAnswerSentWithItsHeader: an answer already in memory is
// pumped on the leader's goroutine, so the leader never waits for its body
// and never flushes the header alone (the client gets header and body in
// one write); it is stored, and the next request is a hit with the same
// bytes.
func TestInMemoryAnswerSentWithItsHeader(t *testing.T) {
	store := NewStore(1<<20, 4)
	h := New(DefaultConfig(), store, inMemoryFetcher{}, NewMetrics(prometheus.NewRegistry(), store), nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/p", nil))
	if w.Code != 200 || w.Body.String() != "page for everyone" {
		t.Fatalf("miss: %d %q", w.Code, w.Body.String())
	}
	if w.Flushed {
		t.Error("the header was flushed before the body: the in-memory answer waited for a pump")
	}
	h.Wait()
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/p", nil))
	if cs := w.Header().Get("Cache-Status"); w.Body.String() != "page for everyone" || !strings.Contains(cs, "hit") {
		t.Fatalf("second request: %q, %q; want the stored page as a hit", w.Body.String(), cs)
	}
}

// TestInMemoryAnswerNeverShared tries to make the in-memory path leak: one
// user's private page, answered in memory, while others ask for the same
// URL at once (with their own cookies and without). Each gets its own
// page (or the shared one, without a cookie); nothing private is stored.
func TestInMemoryAnswerNeverShared(t *testing.T) {
	store := NewStore(1<<20, 4)
	h := New(DefaultConfig(), store, inMemoryFetcher{}, NewMetrics(prometheus.NewRegistry(), store), nil)
	users := []string{"", "alice", "bob", "", "carol", "alice"}
	got := make([]string, len(users))
	done := make(chan int)
	for i, u := range users {
		go func() {
			r := httptest.NewRequest("GET", "http://example.com/account", nil)
			if u != "" {
				r.Header.Set("Cookie", u)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got[i] = w.Body.String()
			done <- i
		}()
	}
	for range users {
		<-done
	}
	for i, u := range users {
		want := "page for everyone"
		if u != "" {
			want = "page for " + u
		}
		if got[i] != want {
			t.Errorf("user %q got %q, want %q", u, got[i], want)
		}
	}
	h.Wait()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/account", nil))
	if body := w.Body.String(); body != "page for everyone" {
		t.Errorf("a request without a cookie got %q", body)
	}
}
