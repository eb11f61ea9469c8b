package h2server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

type rvFetcher struct{ base string }

func (f rvFetcher) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	out := fr.Req.Clone(ctx)
	u := *fr.Req.URL
	u.Scheme, u.Host = "http", strings.TrimPrefix(f.base, "http://")
	out.URL, out.RequestURI = &u, ""
	resp, err := http.DefaultTransport.RoundTrip(out)
	return proxy.Result{Resp: resp, Keep: true}, err
}

// An HTTP/2 client sends the whole declared body and waits for the answer
// before it ends its stream (END_STREAM comes later). The origin had its
// body at once and answered; now the edge waits for END_STREAM (readEOF)
// until body_timeout + size/min_body_rate, or for ever with body_timeout 0.
func TestReviewH2UploadWholeButStreamOpen(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	}))
	defer origin.Close()
	cfg := proxy.DefaultConfig()
	cfg.BodyTimeout = 3 * time.Second
	store := proxy.NewStore(1<<20, 1)
	h := proxy.New(cfg, store, rvFetcher{origin.URL}, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	addr := rvServer(t, &Server{Handler: h})
	c := rvDial(t, addr)
	c.headers(1, false, rvPost("/up", "content-length", "5")...)
	c.data(1, false, []byte("hello"))
	start := time.Now()
	resps, ok := c.collect(10*time.Second, nil, func(m map[uint32]*rvResp) bool { r := m[1]; return r != nil && r.status != "" })
	if !ok {
		t.Fatal("no answer")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("answered %s after the whole body arrived (status %s, body %q): the edge waited for END_STREAM", d.Round(time.Millisecond), resps[1].status, resps[1].body)
	}
}
