package proxy

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestS8RHeadFirstNeverStoresAnEmptyBody: a HEAD miss (plain and with
// Accept-Encoding) is followed by GETs in every coding: each GET gets the
// whole body, the HEAD's Content-Length (when sent) equals the length of
// the GET answer in the same coding, and the origin saw GETs only. Held.
func TestS8RHeadFirstNeverStoresAnEmptyBody(t *testing.T) {
	body := page(20000)
	var methods atomic.Value
	methods.Store("")
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		methods.Store(methods.Load().(string) + r.Method + " ")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		_, _ = io.WriteString(w, body)
	}, withCompression)
	for _, ae := range []string{"", "gzip", "br"} {
		path := "/h" + ae
		hd := serve(h, "HEAD", path, "Accept-Encoding", ae)
		if hd.Code != 200 || hd.Body.Len() != 0 {
			t.Fatalf("HEAD %q: %d with %d body bytes", ae, hd.Code, hd.Body.Len())
		}
		for _, gae := range []string{"", "gzip", "br"} {
			g := serve(h, "GET", path, "Accept-Encoding", gae)
			if g.Code != 200 || (gae == "" && g.Body.String() != body) || (gae != "" && decoded(t, g) != body) {
				t.Fatalf("GET %q after HEAD %q: %d, %d bytes", gae, ae, g.Code, g.Body.Len())
			}
			if cl := g.Header().Get("Content-Length"); cl != "" && cl != strconv.Itoa(g.Body.Len()) {
				t.Errorf("GET %q after HEAD %q: CL %s for %d", gae, ae, cl, g.Body.Len())
			}
		}
		h.Wait()
		time.Sleep(20 * time.Millisecond)
		// Once forms are stored: HEAD and GET agree on every field that
		// describes the body.
		for _, gae := range []string{"", "gzip", "br"} {
			g := serve(h, "GET", path, "Accept-Encoding", gae)
			hh := serve(h, "HEAD", path, "Accept-Encoding", gae)
			for _, f := range []string{"Content-Length", "Content-Encoding", "Etag", "Vary"} {
				if g.Header().Get(f) != hh.Header().Get(f) {
					t.Errorf("path %s AE %q: GET %s %q, HEAD %q", path, gae, f, g.Header().Get(f), hh.Header().Get(f))
				}
			}
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("origin saw %d requests (%s), want 3", n, methods.Load())
	}
	if m := methods.Load().(string); m != "GET GET GET " {
		t.Errorf("origin methods: %q", m)
	}
}

// TestS8ROrigin206NeverAnswersAFullGet: an origin that answers 206 to a
// request without Range: the 206 is not stored, and a later plain GET is
// never answered with it from the store. Held if the second GET reaches
// the origin.
func TestS8ROrigin206NeverAnswersAFullGet(t *testing.T) {
	var n atomic.Int64
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		if n.Add(1) == 1 {
			w.Header().Set("Content-Range", "bytes 0-9/20000")
			w.WriteHeader(206)
			_, _ = io.WriteString(w, page(10))
			return
		}
		_, _ = io.WriteString(w, page(20000))
	}, withCompression)
	first := serve(h, "GET", "/x", "Accept-Encoding", "gzip")
	second := serve(h, "GET", "/x", "Accept-Encoding", "gzip")
	t.Logf("first %d CE %q, second %d CE %q", first.Code, first.Header().Get("Content-Encoding"), second.Code, second.Header().Get("Content-Encoding"))
	if first.Code == 206 && first.Header().Get("Content-Encoding") != "" {
		t.Errorf("the origin's identity 206 was labelled %q", first.Header().Get("Content-Encoding"))
	}
	if second.Code != 200 || calls.Load() != 2 {
		t.Errorf("a 206 was served to a full GET from the store: %d (origin calls %d)", second.Code, calls.Load())
	}
}
