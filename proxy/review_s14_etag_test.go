package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/edgecache/edge/coding"
)

// TestS14FormTagsConditionals: for each coding a page is offered in, on a
// node with the production stream codec:
//   - every response with a strong ETag, across the miss's stream, a hit
//     encoded live, the stored form, HEAD and a pass, carries the same
//     bytes for that tag (a strong tag never names two byte sequences);
//   - streamed answers' tags are weak, with the stored form's suffix;
//   - If-None-Match with the weak stream tag gets 304 from the stored form,
//     with that weak tag (the client holds the stream's bytes), with a
//     pre-upgrade tag ("v1-br") or the other level's ("v1-br9") 200;
//   - If-Range with the weak tag, a pre-upgrade tag or another level's
//     never gives 206; with the stored form's strong tag it gives the
//     form's own bytes.
//
// HOLDS.
func TestS14FormTagsConditionals(t *testing.T) {
	body := page(40000)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		if strings.HasPrefix(r.URL.Path, "/pass") {
			w.Header().Set("Cache-Control", "no-store")
		} else {
			w.Header().Set("Cache-Control", "max-age=600")
		}
		http.ServeContent(w, r, "", t0, strings.NewReader(body))
	}, withProdCompression)
	codec := h.cfg.Compression.Codec
	byTag := map[string][]byte{}
	note := func(what string, w interface{ Header() http.Header }, got []byte) {
		t.Helper()
		tag := w.Header().Get("Etag")
		if tag == "" || strings.HasPrefix(tag, "W/") {
			return
		}
		if prev, ok := byTag[tag]; ok && !bytes.Equal(prev, got) {
			t.Errorf("%s: strong ETag %s names two byte sequences (%d and %d bytes)", what, tag, len(prev), len(got))
		}
		byTag[tag] = append([]byte(nil), got...)
	}
	for _, enc := range []coding.Encoding{coding.Br, coding.Zstd, coding.Gzip} {
		ae := enc.String()
		path := "/p-" + ae
		form := codec.FormTag(enc)
		strong := `"v1-` + form + `"`
		weak := "W/" + strong
		w := serve(h, "GET", path, "Accept-Encoding", ae) // the miss: streamed
		if got := w.Header().Get("Etag"); got != weak {
			t.Errorf("%s miss: ETag %q, want %q", ae, got, weak)
		}
		note(ae+" miss", w, w.Body.Bytes())
		// Hits until the stored form is made (the first is live).
		var stored []byte
		for i := 0; i < 4; i++ {
			w = serve(h, "GET", path, "Accept-Encoding", ae)
			note(ae+" hit", w, w.Body.Bytes())
			if w.Header().Get("Etag") == strong {
				stored = append([]byte(nil), w.Body.Bytes()...)
			}
		}
		if stored == nil {
			t.Fatalf("%s: the stored form was never served", ae)
		}
		if w := serve(h, "HEAD", path, "Accept-Encoding", ae); w.Header().Get("Etag") != strong || w.Header().Get("Content-Length") != strconv.Itoa(len(stored)) {
			t.Errorf("%s HEAD: ETag %q Content-Length %q, want %s and %d", ae, w.Header().Get("Etag"), w.Header().Get("Content-Length"), strong, len(stored))
		}
		for _, c := range []struct {
			inm  string
			want int
		}{{weak, 304}, {strong, 304}, {`"v1-` + ae + `"`, 200}, {`"v1-` + ae + `9"`, 200}, {`W/"v1-` + ae + `"`, 200}, {`"v1"`, 200}} {
			w := serve(h, "GET", path, "Accept-Encoding", ae, "If-None-Match", c.inm)
			if w.Code != c.want {
				t.Errorf("%s If-None-Match %s: %d, want %d", ae, c.inm, w.Code, c.want)
			}
			// The 304 names what the client holds: the stream's bytes by
			// the weak tag (a strong one taken into its cache would let
			// its If-Range splice the stored form onto them), the stored
			// form by the strong one.
			if w.Code == 304 && w.Header().Get("Etag") != c.inm {
				t.Errorf("%s If-None-Match %s: 304 with ETag %s", ae, c.inm, w.Header().Get("Etag"))
			}
			if w.Code == 200 {
				note(ae+" INM", w, w.Body.Bytes())
			}
		}
		for _, c := range []struct {
			ir   string
			want int
		}{{weak, 200}, {`"v1-` + ae + `"`, 200}, {`"v1-` + ae + `9"`, 200}, {`"v1"`, 200}, {strong, 206}} {
			w := serve(h, "GET", path, "Accept-Encoding", ae, "Range", "bytes=100-199", "If-Range", c.ir)
			if w.Code != c.want {
				t.Errorf("%s If-Range %s: %d, want %d", ae, c.ir, w.Code, c.want)
				continue
			}
			if w.Code == 206 && !bytes.Equal(w.Body.Bytes(), stored[100:200]) {
				t.Errorf("%s If-Range %s: 206 bytes are not the stored form's 100-199", ae, c.ir)
			}
			if w.Code == 200 {
				note(ae+" If-Range", w, w.Body.Bytes())
			}
		}
		// A pass: streamed, weak, never the strong tag.
		for i := 0; i < 2; i++ {
			w := serve(h, "GET", "/pass-"+ae, "Accept-Encoding", ae)
			if tag := w.Header().Get("Etag"); tag != weak {
				t.Errorf("%s pass: ETag %q, want %q", ae, tag, weak)
			}
			w = serve(h, "GET", "/pass-"+ae, "Accept-Encoding", ae, "Range", "bytes=100-199", "If-Range", weak)
			if w.Code == 206 {
				t.Errorf("%s pass with If-Range %s: 206", ae, weak)
			}
		}
	}
	// Another node at another brotli level never shares the strong tag.
	other, _ := coding.NewCodec(coding.Levels{Br: 9, Zstd: 3, Gzip: 6})
	if other.FormTag(coding.Br) == codec.FormTag(coding.Br) {
		t.Error("brotli 5 and 9 share a form tag")
	}
}

// matchesOnlyWeakly on well-formed and malformed If-None-Match lines: it
// says yes only for the tag's weak spelling, never beside the strong one or
// "*", and reads a broken list as far as it parses. (A second line is not
// read, as http.ServeContent reads none: TestS15TwoINMLinesWeakTagOn200.)
func TestMatchesOnlyWeakly(t *testing.T) {
	const tag = `"v1-br5"`
	for _, c := range []struct {
		line string
		want bool
	}{
		{`W/"v1-br5"`, true},
		{` W/"v1-br5" `, true},
		{`"x", W/"v1-br5"`, true},
		{`W/"a,b", W/"v1-br5"`, true}, // a comma inside a tag
		{`,, W/"v1-br5" ,`, true},
		{`"v1-br5"`, false},
		{`W/"v1-br5", "v1-br5"`, false},
		{`*`, false},
		{`W/"v1-br5", *`, false},
		{`W/"v1-br"`, false},
		{`W/"v1-br5`, false},  // unterminated
		{`w/"v1-br5"`, false}, // W/ is case-sensitive
		{`W/ "v1-br5"`, false},
		{`junk W/"v1-br5"`, false}, // unparsable from the start
		{`W/"v1-br5" junk`, true},  // parsed as far as it goes
		{`" "W/"v1-br5"`, false},   // a space inside the first tag: no list
		{"W/\"v1\x7f\", W/\"v1-br5\"", false},
		{``, false},
	} {
		if got := matchesOnlyWeakly(c.line, tag); got != c.want {
			t.Errorf("%q: %v, want %v", c.line, got, c.want)
		}
	}
}

// FuzzMatchesOnlyWeakly: whenever matchesOnlyWeakly says the client holds
// the weak spelling, net/http's own conditional check answers 304 for the
// same field (so the weakened tag only ever goes on a 304).
func FuzzMatchesOnlyWeakly(f *testing.F) {
	for _, s := range []string{`W/"v1-br5"`, `"v1-br5"`, `*`, `W/"a", W/"v1-br5"`, `W/"v1-br5" junk`, `,,W/"v1-br5"`} {
		f.Add(s)
	}
	const tag = `"v1-br5"`
	f.Fuzz(func(t *testing.T, inm string) {
		if !matchesOnlyWeakly(inm, tag) {
			return
		}
		r, err := http.NewRequest("GET", "http://h/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header["If-None-Match"] = []string{inm}
		w := httptest.NewRecorder()
		w.Header().Set("Etag", tag)
		http.ServeContent(w, r, "", t0, strings.NewReader("body"))
		if w.Code != http.StatusNotModified {
			t.Fatalf("If-None-Match %q: matchesOnlyWeakly said weak, net/http answered %d", inm, w.Code)
		}
	})
}
