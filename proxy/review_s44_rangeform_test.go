package proxy

// Review s44. PINS A PROPERTY (expected to hold): ranges and
// conditionals on a stored br form apply to the form's bytes under the
// form's own validator: a single range is a slice of the br body with
// Content-Encoding br and the form's strong tag; If-Range with the
// identity tag (another representation) gets the whole br form; HEAD
// carries the form's length; an error (416) carries no Content-Encoding.

import (
	"strconv"
	"testing"
)

func TestS44RangesOnAStoredForm(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(50000)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html", "ETag": `"r1"`}, body: body})
	p.do("GET", "/r", nil)
	br := map[string]string{"Accept-Encoding": "br"}
	p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "Range": "bytes=0-0"}) // makes the form
	whole := p.do("GET", "/r", br)
	if whole.Header().Get("Content-Encoding") != "br" || whole.Header().Get("Etag") != `"r1-br5"` {
		t.Fatalf("form: %q %q", whole.Header().Get("Content-Encoding"), whole.Header().Get("Etag"))
	}
	form := whole.Body.Bytes()
	w := p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "Range": "bytes=10-19"})
	if w.Code != 206 || w.Body.String() != string(form[10:20]) || w.Header().Get("Content-Encoding") != "br" ||
		w.Header().Get("Content-Range") != "bytes 10-19/"+strconv.Itoa(len(form)) || w.Header().Get("Etag") != `"r1-br5"` {
		t.Errorf("range of the form: %d %q %q %q", w.Code, w.Header().Get("Content-Range"), w.Header().Get("Content-Encoding"), w.Header().Get("Etag"))
	}
	w = p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "Range": "bytes=10-19", "If-Range": `"r1"`})
	if w.Code != 200 || w.Body.String() != string(form) {
		t.Errorf("If-Range with the identity tag on the br form: %d, %d bytes", w.Code, w.Body.Len())
	}
	w = p.do("HEAD", "/r", br)
	if w.Header().Get("Content-Length") != strconv.Itoa(len(form)) || w.Header().Get("Content-Encoding") != "br" {
		t.Errorf("HEAD: CL %q CE %q, form is %d", w.Header().Get("Content-Length"), w.Header().Get("Content-Encoding"), len(form))
	}
	w = p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "Range": "bytes=999999-"})
	if w.Code != 416 || w.Header().Get("Content-Encoding") != "" {
		t.Errorf("416: %d, Content-Encoding %q", w.Code, w.Header().Get("Content-Encoding"))
	}
	w = p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "If-None-Match": `"r1-br5"`})
	if w.Code != 304 || w.Body.Len() != 0 {
		t.Errorf("INM of the form's tag: %d", w.Code)
	}
	w = p.do("GET", "/r", map[string]string{"Accept-Encoding": "gzip", "If-None-Match": `"r1-br5"`})
	if w.Code != 200 || w.Header().Get("Content-Encoding") != "gzip" && w.Header().Get("Content-Encoding") != "" {
		t.Errorf("INM of the br tag from a gzip client: %d %q", w.Code, w.Header().Get("Content-Encoding"))
	}
	w = p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "If-Match": `"r1"`})
	t.Logf("If-Match with the identity tag, br client: %d, CE %q, CL %q, body %d", w.Code, w.Header().Get("Content-Encoding"), w.Header().Get("Content-Length"), w.Body.Len())
	w = p.do("GET", "/r", map[string]string{"Accept-Encoding": "br", "Range": "bytes=0-4,10-14"})
	t.Logf("two ranges of the br form: %d, CE %q, CT %q", w.Code, w.Header().Get("Content-Encoding"), w.Header().Get("Content-Type"))
}
