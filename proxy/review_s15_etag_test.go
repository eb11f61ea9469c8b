package proxy

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/edgecache/edge/coding"
)

// s15FormSetup stores /p with its brotli form made, and returns the
// handler, the form's strong tag and its bytes.
func s15FormSetup(t *testing.T) (*Handler, string, []byte) {
	t.Helper()
	body := page(40000)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=600")
		http.ServeContent(w, r, "", t0, strings.NewReader(body))
	}, withProdCompression)
	strong := `"v1-` + h.cfg.Compression.Codec.FormTag(coding.Br) + `"`
	serve(h, "GET", "/p", "Accept-Encoding", "br")
	for i := 0; i < 4; i++ {
		w := serve(h, "GET", "/p", "Accept-Encoding", "br")
		if w.Header().Get("Etag") == strong {
			return h, strong, append([]byte(nil), w.Body.Bytes()...)
		}
	}
	t.Fatal("stored form never served")
	return nil, "", nil
}

// Found by a review, now mended (matchesOnlyWeakly reads the first line
// alone, as ServeContent does, and the tag is weakened only on a 304):
// matchesOnlyWeakly read every If-None-Match line, net/http's
// ServeContent only the first (Header.get). With the lines `"other"` and
// W/"v1-br5" net/http finds no match and answers 200 with the stored
// form's own bytes, yet serveContent has already rewritten the ETag to the
// weak spelling: a 200 (not a 304) carries the wrong tag for the form's
// bytes. The same rewrite also defeats a strong If-Range on that request
// (the range is compared with the now-weak tag): 200 whole instead of 206.
// The doc comment's "reads If-None-Match as net/http does" is untrue, and
// FuzzMatchesOnlyWeakly only ever feeds one line.
func TestS15TwoINMLinesWeakTagOn200(t *testing.T) {
	h, strong, stored := s15FormSetup(t)
	w := serve(h, "GET", "/p", "Accept-Encoding", "br", "If-None-Match", `"other"`, "If-None-Match", "W/"+strong)
	if w.Code == http.StatusOK && bytes.Equal(w.Body.Bytes(), stored) && w.Header().Get("Etag") != strong {
		t.Errorf("200 with the stored form's bytes carries ETag %q, want %q", w.Header().Get("Etag"), strong)
	}
	w = serve(h, "GET", "/p", "Accept-Encoding", "br", "If-None-Match", `"other"`, "If-None-Match", "W/"+strong,
		"Range", "bytes=100-199", "If-Range", strong)
	if w.Code != http.StatusPartialContent {
		t.Errorf("Range with If-Range %s (the form's strong tag): %d ETag %q, want 206", strong, w.Code, w.Header().Get("Etag"))
	}
}

// Found by a review, now mended (the weak tag is set as the 304 is
// written, after ServeContent compared the strong one):
// If-Match with the form's strong tag plus If-None-Match with its
// weak spelling must be 304 (If-Match passes by strong comparison, RFC 9110
// §13.2.2, then If-None-Match matches weakly). The ETag is rewritten weak
// before http.ServeContent, whose If-Match strong comparison then fails:
// 412 Precondition Failed, for a representation that does match, and the
// 412 carries the weak tag.
func TestS15IfMatchStrongPlusWeakINM(t *testing.T) {
	h, strong, _ := s15FormSetup(t)
	w := serve(h, "GET", "/p", "Accept-Encoding", "br", "If-Match", strong, "If-None-Match", "W/"+strong)
	if w.Code != http.StatusNotModified {
		t.Errorf("If-Match %s + If-None-Match W/%s: %d (ETag %q), want 304", strong, strong, w.Code, w.Header().Get("Etag"))
	}
	// Without the If-None-Match the same If-Match passes: proof that the
	// rewrite, not the If-Match, causes the 412.
	if w := serve(h, "GET", "/p", "Accept-Encoding", "br", "If-Match", strong); w.Code != http.StatusOK {
		t.Errorf("If-Match %s alone: %d, want 200", strong, w.Code)
	}
}

// HOLDS: single-line cases agree with net/http: weak spelling -> 304 weak
// (GET and HEAD, odd spacing, commas inside tags); both spellings or "*" ->
// strong; identity client -> strong tag on its 304; a following 200 and a
// strong If-Range keep the strong tag and the form's bytes.
func TestS15WeakINMSingleLineHolds(t *testing.T) {
	h, strong, stored := s15FormSetup(t)
	weak := "W/" + strong
	for _, c := range []struct {
		method, inm, wantTag string
		want                 int
	}{
		{"GET", weak, weak, 304},
		{"HEAD", weak, weak, 304},
		{"GET", " ,\t, W/\"a,b\" ,," + weak + "  ", weak, 304},
		{"GET", weak + ", " + strong, strong, 304},
		{"GET", "*", strong, 304},
		{"GET", weak + ", *", strong, 304},
		{"GET", `W/"v1-br"`, strong, 200},
	} {
		w := serve(h, c.method, "/p", "Accept-Encoding", "br", "If-None-Match", c.inm)
		if w.Code != c.want || w.Header().Get("Etag") != c.wantTag {
			t.Errorf("%s INM %q: %d %q, want %d %q", c.method, c.inm, w.Code, w.Header().Get("Etag"), c.want, c.wantTag)
		}
	}
	// identity client: its tag stays the identity one.
	w := serve(h, "GET", "/p", "Accept-Encoding", "identity", "If-None-Match", `W/"v1"`)
	if w.Code != 304 || w.Header().Get("Etag") != `"v1"` {
		t.Errorf("identity W/\"v1\": %d %q", w.Code, w.Header().Get("Etag"))
	}
	w = serve(h, "GET", "/p", "Accept-Encoding", "br", "Range", "bytes=100-199", "If-Range", strong)
	if w.Code != 206 || !bytes.Equal(w.Body.Bytes(), stored[100:200]) || w.Header().Get("Etag") != strong {
		t.Errorf("If-Range after 304: %d %q", w.Code, w.Header().Get("Etag"))
	}
}
