package proxy

// Helpers for the hostile review of request buffering of bodies of unknown
// length (01fb038): review_chunked_test.go.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// seenReq is what a recording origin saw of one request.
type seenReq struct {
	method, cl, te, trailerHdr, expect string
	contentLength                      int64
	body                               []byte
	trailer                            http.Header
	err                                error
}

// recordingOrigin records each request by path (its X-Id if set).
type recordingOrigin struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]seenReq
}

func newRecordingOrigin(t testing.TB) *recordingOrigin {
	o := &recordingOrigin{got: map[string]seenReq{}}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		s := seenReq{method: r.Method, cl: strings.Join(r.Header["Content-Length"], ","), te: strings.Join(r.TransferEncoding, ","),
			trailerHdr: strings.Join(r.Header["Trailer"], ","), expect: r.Header.Get("Expect"),
			contentLength: r.ContentLength, body: b, trailer: r.Trailer.Clone(), err: err}
		id := r.Header.Get("X-Id")
		if id == "" {
			id = r.URL.Path
		}
		o.mu.Lock()
		o.got[id] = s
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, echoOf(b))
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *recordingOrigin) seen(id string) (seenReq, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.got[id]
	return s, ok
}

// proxyFor is a handler in front of base with a spool in a temp dir.
func proxyFor(t testing.TB, base string, mod func(*Config)) *Handler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SpoolDir, cfg.SpoolBytes = t.TempDir(), 64<<20
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(64<<20, 8)
	f := &originFetcher{base: base, client: &http.Client{Transport: &http.Transport{}}}
	return New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
}

// rvRawExchange writes req on a new connection to addr and returns the
// final response (after any 1xx), the 1xx statuses seen, and the raw text.
func rvRawExchange(t testing.TB, addr, req string, timeout time.Duration) (*http.Response, []int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var info []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			info = append(info, resp.StatusCode)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, info, string(b)
	}
}

// held reports what request buffering holds now.
func heldNow(h *Handler) (mem, disk, buffered, used, files int64) {
	return h.uploadMem.Load(), h.uploadDisk.Load(), h.buffered.Load(), h.spool.used.Load(), h.spool.files.Load()
}

// expectNothingHeld waits (generously) for everything to come back.
func expectNothingHeld(t testing.TB, h *Handler, what string) {
	t.Helper()
	h.Wait()
	end := time.Now().Add(10 * time.Second)
	for {
		m, d, b, u, f := heldNow(h)
		if m|d|b|u|f == 0 && h.upstream.inFlight() == 0 {
			return
		}
		if time.Now().After(end) {
			t.Errorf("%s: left held: uploadMem %d uploadDisk %d buffered %d spool %d in %d files, %d slots", what, m, d, b, u, f, h.upstream.inFlight())
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
