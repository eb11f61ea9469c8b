package proxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
)

func hostileHandler(t *testing.T, keep bool, vary bool) (*proxy.Handler, *atomic.Int32) {
	var n atomic.Int32
	of := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		n.Add(1)
		rec := httptest.NewRecorder()
		rec.Header().Set("Cache-Control", "max-age=600")
		if vary {
			rec.Header().Set("Vary", "X-Forwarded-Proto")
		}
		_, _ = io.WriteString(rec, "for "+req.Header.Get("X-Forwarded-Proto"))
		return rec.Result(), nil
	})
	store := proxy.NewStore(1<<20, 4)
	pc := proxy.DefaultConfig()
	pc.KeyScheme = keep
	return proxy.New(pc, store, of, proxy.NewMetrics(prometheus.NewRegistry(), store), nil), &n
}

func get(h http.Handler, https bool, hdr map[string]string) string {
	r := httptest.NewRequest("GET", "http://h/a/b", nil)
	if https {
		r.TLS = &tls.ConnectionState{}
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Body.String()
}

func TestTLSVaryProto(t *testing.T) {
	h, _ := hostileHandler(t, false, true)
	a := get(h, true, nil)
	h.Wait()
	b := get(h, false, map[string]string{"X-Forwarded-Proto": "https"})
	h.Wait()
	if a != "for https" || b != "for http" {
		t.Errorf("https got %q, http with forged XFP got %q", a, b)
	}
}

func TestTLSPurgePrefixHTTPS(t *testing.T) {
	for _, keep := range []bool{false, true} {
		h, _ := hostileHandler(t, keep, false)
		get(h, true, nil)
		h.Wait()
		for _, p := range []string{"https://h/a/"} {
			n, err := h.Purge(proxy.PurgeRequest{Prefix: p})
			if err != nil || n != 1 {
				t.Errorf("key_scheme=%v: purge prefix %q of a page fetched over https removed %d (err %v)", keep, p, n, err)
			}
		}
		n, _ := h.Purge(proxy.PurgeRequest{URL: "https://h/a/b"})
		_ = n
	}
	_ = strings.HasPrefix
}
