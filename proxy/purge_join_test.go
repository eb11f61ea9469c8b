package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A request that arrives after a purge, while a fill started before it is
// still running, joins that fill and is served the purged content.
func TestJoinAfterPurge(t *testing.T) {
	var version atomic.Int32
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", "4")
		w.(http.Flusher).Flush()
		time.Sleep(400 * time.Millisecond)
		_, _ = io.WriteString(w, []string{"old!", "new!"}[v])
	}, nil)
	go serve(h, "GET", "/doc")
	time.Sleep(100 * time.Millisecond)
	version.Store(1)
	h.Purge(PurgeRequest{URL: "http://example.com/doc"})
	w := serve(h, "GET", "/doc") // after the purge
	t.Logf("request after purge: %q %s", w.Body.String(), w.Header().Get("Cache-Status"))
	if w.Body.String() == "old!" {
		t.Errorf("a request made after the purge got the purged content")
	}
}
