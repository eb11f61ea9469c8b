package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/origin"
)

// s56WrapperProxy is earlyHintsProxy's handler with a site whose rules
// set browser_ttl, so every GET goes through browserTTLHook.
func s56WrapperProxy(t *testing.T, up http.Handler) (*Handler, *httptest.Server) {
	t.Helper()
	o := httptest.NewServer(up)
	t.Cleanup(o.Close)
	oc, err := origin.NewClient(origin.ClientConfig{URL: o.URL, ConnectTimeout: 5 * time.Second, ResponseTimeout: 30 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(16<<20, 8)
	h := New(DefaultConfig(), store, FetcherFunc(oc.Fetch), NewMetrics(prometheus.NewRegistry(), store), nil)
	site := ruleSite(t, `[{name: pages, browser_ttl: 10m}]`)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeInbound(w, r, Inbound{Site: site})
	}))
	t.Cleanup(front.Close)
	return h, front
}

// TestS56EarlyHintsPassTheBrowserTTLWriterUntouched: the origin's 103 is
// relayed through the writer (no Cache-Control of the answer on it), and
// the final answer is rewritten once; -race watches the relay goroutine's
// WriteHeader on the wrapper.
func TestS56EarlyHintsPassTheBrowserTTLWriterUntouched(t *testing.T) {
	o := &hintingOrigin{release: make(chan struct{})}
	close(o.release)
	h, front := s56WrapperProxy(t, o)
	code, hdr, body, hints := hintedGet(t, front.URL, "GET", "/p?cc=public,max-age=3600")
	if code != 200 || body != "page /p" {
		t.Fatalf("miss: %d %q", code, body)
	}
	if len(hints) != 1 || hints[0].Get("Link") == "" || hints[0].Get("Cache-Control") != "" {
		t.Errorf("hints through the writer: %v", hints)
	}
	if cc := hdr.Get("Cache-Control"); cc != "public, max-age=600" {
		t.Errorf("final answer: Cache-Control %q, want public, max-age=600", cc)
	}
	if s := h.Stats().BrowserTTL; s[browserTTLRewritten] != 1 || s[browserTTLKept] != 0 {
		t.Errorf("browser_ttl counts %v, want one rewritten (the 103 is no answer)", s)
	}
}

// TestS56StreamedMissIsFlushedThroughTheBrowserTTLWriter: a miss whose
// body the origin is still making reaches the client as it comes
// (ResponseController.Flush finds the connection through Unwrap).
func TestS56StreamedMissIsFlushedThroughTheBrowserTTLWriter(t *testing.T) {
	release := make(chan struct{})
	var once bool
	t.Cleanup(func() {
		if !once {
			close(release)
		}
	})
	_, front := s56WrapperProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "first\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		_, _ = io.WriteString(w, "rest\n")
	}))
	resp, err := http.Get(front.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=600" {
		t.Errorf("Cache-Control %q", cc)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "first") {
			t.Errorf("first line %q", l)
		}
	case <-time.After(15 * time.Second):
		t.Error("the first chunk did not reach the client while the origin held the rest: no flush through the writer")
	}
	once = true
	close(release)
}
