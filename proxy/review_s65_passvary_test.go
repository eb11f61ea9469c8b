package proxy

// Review s65. A page the edge passes (here: larger than
// cache.max_object_bytes, cacheable downstream) is answered in gzip or br
// with Vary: Origin, Accept-Encoding, because the edge chose the coding
// from the request's Accept-Encoding. The same request made conditional,
// or with a Range, is forwarded and the origin's 304 / 206 is relayed as
// it came: Vary: Origin alone. RFC 9110 §15.4.5 (304) and §15.3.7 (206):
// Vary MUST be sent if it would have been sent in a 200 to the same
// request. A downstream cache that freshens its stored answer from the 304
// (RFC 9111 §4.3.4, §3.2: the 304's fields replace the stored ones) loses
// Accept-Encoding from that answer's Vary; with Last-Modified as the only
// validator the answer it updates may be its gzip one, which it then
// serves to clients that do not take gzip.

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestS65PassedConditionalAnswersKeepVaryAcceptEncoding(t *testing.T) {
	plain := []byte(page(20000))
	lm := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	p := newTestProxy(t, func(c *Config) {
		withProdCompression(c)
		c.MaxObjectBytes = 4096 // the page is passed, not stored
		c.SliceBytes = 0
	})
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Origin")
		http.ServeContent(w, r, "", lm, bytes.NewReader(plain)) // Last-Modified only
	})
	gz := map[string]string{"Accept-Encoding": "gzip"}
	w := p.do("GET", "/big", gz)
	if w.Code != 200 || w.Header().Get("Content-Encoding") != "gzip" || !containsToken(strings.Join(w.Header()["Vary"], ","), "Accept-Encoding") {
		t.Fatalf("the 200: %d CE %q Vary %q", w.Code, w.Header().Get("Content-Encoding"), w.Header()["Vary"])
	}
	for _, extra := range []map[string]string{
		{"If-Modified-Since": lm.Format(http.TimeFormat)},
		{"Range": "bytes=0-99"},
	} {
		r := map[string]string{"Accept-Encoding": "gzip"}
		for k, v := range extra {
			r[k] = v
		}
		c := p.do("GET", "/big", r)
		if c.Code != 304 && c.Code != 206 {
			continue // a whole answer: nothing to check here
		}
		if !containsToken(strings.Join(c.Header()["Vary"], ","), "Accept-Encoding") {
			t.Errorf("%v: %d with Vary %q; the 200 to the same request had %q (RFC 9110 §15.4.5/§15.3.7: Vary MUST be sent)",
				extra, c.Code, c.Header()["Vary"], w.Header()["Vary"])
		}
	}
}
