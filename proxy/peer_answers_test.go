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
