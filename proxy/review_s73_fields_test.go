package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/origin"
)

// s73Proxy serves a Handler in front of an origin running o, behind a
// front that adds fields to every answer before the proxy writes it (as
// node's TLS front adds Alt-Svc and Strict-Transport-Security).
func s73Proxy(t *testing.T, o http.HandlerFunc, front http.Header) *httptest.Server {
	t.Helper()
	h := handlerOverOriginClient(t, o)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range front {
			w.Header()[k] = v
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func s73Get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestS73OriginsConnectionOptionsDoNotStripTheFrontsFields: the origin's
// Connection field names options of the origin's connection to the edge
// (RFC 9110 §7.6.1): the edge removes those fields from the origin's
// message, not its own. An answer the edge does not store (no-store, so
// streamed) lost the front's Strict-Transport-Security and Alt-Svc when
// the origin named them: any origin (or anything on its path) could turn
// off the operator's HSTS refresh and HTTP/3 advertisement for its pages.
func TestS73OriginsConnectionOptionsDoNotStripTheFrontsFields(t *testing.T) {
	front := http.Header{
		"Strict-Transport-Security": {"max-age=31536000"},
		"Alt-Svc":                   {`h3=":443"; ma=86400`},
	}
	srv := s73Proxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", r.URL.Query().Get("cc"))
		w.Header().Set("Connection", "Strict-Transport-Security, Alt-Svc")
		_, _ = io.WriteString(w, "page")
	}, front)
	for _, cc := range []string{"no-store", "max-age=60"} {
		resp, body := s73Get(t, srv.URL+"/p?cc="+cc)
		if resp.StatusCode != 200 || body != "page" {
			t.Fatalf("cc=%s: %d %q", cc, resp.StatusCode, body)
		}
		for k, v := range front {
			if got := resp.Header.Get(k); got != v[0] {
				t.Errorf("cc=%s (Cache-Status %q): the front's %s is %q, want %q: the origin's Connection option removed the edge's own field",
					cc, resp.Header.Get("Cache-Status"), k, got, v[0])
			}
		}
	}
}

// TestS73PerUserFieldNamedInConnectionIsNotForwarded: a field the
// origin names in its Connection field is hop-by-hop (RFC 9110 §7.6.1: a
// proxy MUST remove the fields named before forwarding). The streamed
// (no-store) answer drops it; a stored answer gave it to the client that
// led the fill, through the per-user fields (private="…",
// Authentication-Info) taken from the origin's header before the
// hop-by-hop ones were removed.
func TestS73PerUserFieldNamedInConnectionIsNotForwarded(t *testing.T) {
	srv := s73Proxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", r.URL.Query().Get("cc"))
		w.Header().Set("Connection", "X-Account, Authentication-Info")
		w.Header().Set("X-Account", "alice")
		w.Header().Set("Authentication-Info", `nextnonce="hop"`)
		_, _ = io.WriteString(w, "page")
	}, nil)
	for i, cc := range []string{"no-store", `max-age=60, private="X-Account"`} {
		resp, body := s73Get(t, srv.URL+"/p"+strconv.Itoa(i)+"?cc="+url.QueryEscape(cc))
		if resp.StatusCode != 200 || body != "page" {
			t.Fatalf("cc=%s: %d %q", cc, resp.StatusCode, body)
		}
		t.Logf("cc=%s: Cache-Status %q", cc, resp.Header.Get("Cache-Status"))
		for _, k := range []string{"X-Account", "Authentication-Info"} {
			if v := resp.Header.Values(k); len(v) > 0 {
				t.Errorf("cc=%s (Cache-Status %q): %s %q forwarded, though the origin named it in Connection (RFC 9110 §7.6.1)",
					cc, resp.Header.Get("Cache-Status"), k, v)
			}
		}
	}
}

// TestS73OriginsHSTSFromAnHTTPSFillIsNotServedOverPlainHTTP: with
// cache.key_scheme off (the default) http and https share entries. An
// origin that sends Strict-Transport-Security to its https requests only
// (by X-Forwarded-Proto, as Rails' force_ssl does) has that field stored
// by an https client's fill and served to plain-http clients' hits. RFC
// 6797 §7.2: an HSTS host MUST NOT include the field in answers conveyed
// over non-secure transport (the edge is that host to its clients).
func TestS73OriginsHSTSFromAnHTTPSFillIsNotServedOverPlainHTTP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if r.Header.Get("X-Forwarded-Proto") == "https" {
			w.Header().Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		}
		_, _ = io.WriteString(w, "page")
	}))
	t.Cleanup(up.Close)
	oc, err := origin.NewClient(origin.ClientConfig{URL: up.URL, ConnectTimeout: 5 * time.Second, ResponseTimeout: 30 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(16<<20, 8)
	h := New(DefaultConfig(), store, FetcherFunc(oc.Fetch), NewMetrics(prometheus.NewRegistry(), store), nil)
	tlsFront := httptest.NewTLSServer(h)
	t.Cleanup(tlsFront.Close)
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)

	resp, err := tlsFront.Client().Get(tlsFront.URL + "/p")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("https fill: Cache-Status %q, HSTS %q", resp.Header.Get("Cache-Status"), resp.Header.Get("Strict-Transport-Security"))
	h.Wait()
	// The same authority over plain HTTP (the key's host is the Host).
	req, _ := http.NewRequest(http.MethodGet, plain.URL+"/p", nil)
	req.Host = tlsFront.Listener.Addr().String()
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if v := resp.Header.Get("Strict-Transport-Security"); v != "" {
		t.Errorf("plain-http answer (Cache-Status %q) carries Strict-Transport-Security %q, stored from an https client's fill (RFC 6797 §7.2)",
			resp.Header.Get("Cache-Status"), v)
	}
}
