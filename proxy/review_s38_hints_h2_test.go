package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/origin"
)

// s38HintsProxy is earlyHintsProxy over any origin handler, with the
// config mod may change, served on a real socket (HTTP/1.1, or HTTP/2 with
// TLS when tlsFront).
func s38HintsProxy(t *testing.T, up http.Handler, mod func(*Config), tlsFront bool) (*Handler, *httptest.Server) {
	t.Helper()
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	oc, err := origin.NewClient(origin.ClientConfig{URL: us.URL, ConnectTimeout: 5 * time.Second, ResponseTimeout: 30 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(64<<20, 8)
	h := New(cfg, store, FetcherFunc(oc.Fetch), NewMetrics(prometheus.NewRegistry(), store), nil)
	front := httptest.NewUnstartedServer(h)
	if tlsFront {
		front.EnableHTTP2 = true
		front.StartTLS()
	} else {
		front.Start()
	}
	t.Cleanup(front.Close)
	return h, front
}

// TestS38NoHintsOnNetHTTPsHTTP2Server: net/http's HTTP/2 server hands the
// header map of a 1xx to its frame writer and may return before the
// frame is encoded (when the stream or connection ends meanwhile), so a
// relay that then restored the map raced the writer: a concurrent map
// access, which ends a Go process (the review's
// TestS38HintRelayToAStalledLeaderHoldsEveryJoiner, -race, 3 runs of 3).
// No 103 is relayed there; it counts as dropped. Edge's own HTTP/2 server
// relays them (node's TestEarlyHintsToAStalledLeaderHoldNoJoiner, with the
// stalled leader that test had).
func TestS38NoHintsOnNetHTTPsHTTP2Server(t *testing.T) {
	o := &hintingOrigin{release: make(chan struct{})}
	close(o.release)
	h, front := s38HintsProxy(t, o, nil, true)
	var hints int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { hints++; return nil },
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", front.URL+"/p?cc=max-age=60", nil)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || hints != 0 {
		t.Fatalf("HTTP/%d %d with %d 1xx answers, want HTTP/2 200 with none", resp.ProtoMajor, resp.StatusCode, hints)
	}
	if got := testutil.ToFloat64(h.metrics.earlyHints[hintsDropped]); got != 1 {
		t.Errorf("dropped %v, want 1", got)
	}
}
