package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestS9DetachedBeforeFirstByteGetsACleanPass: a reader the trimming fill
// detached before it read anything gets its own fetch: the answer is the
// pass's (its header, its body), the front's fields survive, none of the
// fill entry's fields leak in, and the reader is no longer registered.
func TestS9DetachedBeforeFirstByteGetsACleanPass(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Origin", "pass")
		_, _ = w.Write([]byte("from the pass"))
	}, withCompression)
	f := newFill(0, fillWait{})
	f.entry = &Entry{Status: 200, Header: http.Header{"X-Entry": {"1"}, "Content-Type": {"text/html"}, "Etag": {`"fill"`}}}
	f.trim = true
	rd, ok := f.reader()
	if !ok {
		t.Fatal("no reader")
	}
	rd.lost = true
	w := httptest.NewRecorder()
	w.Header().Set("Alt-Svc", `h3=":443"`)
	w.Header().Set("Strict-Transport-Security", "max-age=1")
	r := httptest.NewRequest("GET", "http://example.com/big", nil)
	r.Header.Set("Accept-Encoding", "gzip")
	h.serveFrom(w, r, f, rd, cacheStatus{}, http.Header{"Set-Cookie": {"own=1"}})
	h.Wait()
	t.Logf("%d %v body %q origin calls %d", w.Code, w.Header(), w.Body.String(), calls.Load())
	if w.Body.String() != "from the pass" || w.Header().Get("X-Origin") != "pass" {
		t.Errorf("want the pass's answer, got %d %q", w.Code, w.Body.String())
	}
	for _, k := range []string{"X-Entry", "Etag", "Set-Cookie"} {
		if _, ok := w.Header()[k]; ok {
			t.Errorf("the fill entry's %s reached the pass answer", k)
		}
	}
	if w.Header().Get("Alt-Svc") == "" || w.Header().Get("Strict-Transport-Security") == "" {
		t.Errorf("front fields lost: %v", w.Header())
	}
	f.mu.Lock()
	n := len(f.readers)
	f.mu.Unlock()
	if n != 0 {
		t.Errorf("%d readers still registered", n)
	}
	if b := h.buffered.Load(); b != 0 {
		t.Errorf("%d bytes still charged", b)
	}
}
