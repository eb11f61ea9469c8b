package proxy

import (
	"bytes"
	cryptorand "crypto/rand"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/edgecache/edge/coding"
)

// s13Decode decodes a recorded body by its Content-Encoding (nil, err when
// it does not decode).
func s13Decode(t *testing.T, hdr http.Header, body []byte) ([]byte, error) {
	t.Helper()
	enc, ok := coding.OfBody(hdr["Content-Encoding"])
	if !ok {
		t.Fatalf("unknown Content-Encoding %q", hdr["Content-Encoding"])
	}
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	return codec.Decode(enc, body, 64<<20)
}

// TestS13CodingSlicedObjectWithTwoContentEncodingLinesIsSentEncodedToIdentityClients
//
// A defect this review found, now mended (sliceable reads every line with
// coding.OfBody). What it was: sliceable (proxy/slice.go) excluded encoded bodies by reading
// resp.Header.Get("Content-Encoding"), the FIRST field line only. An origin
// (or a proxy before it that appends a line) that sends
// "Content-Encoding: identity" and "Content-Encoding: gzip" on two lines
// has a gzip body (coding.OfBody, which the rest of the edge uses, says
// so), but the object is sliced, and serveSliced never negotiates: every
// client, one whose Accept-Encoding is "identity" or "gzip;q=0" included,
// gets the gzip bytes. The same object below cache.max_object_bytes is
// stored whole and decoded for those clients, as docs/operations.md
// promises ("others get it decoded").
func TestS13CodingSlicedObjectWithTwoContentEncodingLinesIsSentEncodedToIdentityClients(t *testing.T) {
	raw := make([]byte, 6000)
	_, _ = cryptorand.Read(raw) // incompressible: the gzip body stays > max_object_bytes
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	gz, _ := codec.Encode(coding.Gzip, raw)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("ETag", `"g1"`)
		w.Header()["Content-Encoding"] = []string{"identity", "gzip"}
		if r.Header.Get("Range") != "" {
			http.ServeContent(w, r, "", t0, bytes.NewReader(gz))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(gz)))
		_, _ = w.Write(gz)
	}, func(c *Config) {
		withCompression(c)
		c.SliceBytes = 2048
		c.MaxObjectBytes = 4096
	})
	for i, ae := range []string{"identity", "gzip;q=0", "identity", "br"} {
		w := serve(h, "GET", "/two-lines", "Accept-Encoding", ae)
		ce := strings.Join(w.Header()["Content-Encoding"], ", ")
		got, err := s13Decode(t, w.Header(), w.Body.Bytes())
		if w.Code != 200 {
			t.Fatalf("#%d AE %q: status %d", i, ae, w.Code)
		}
		if strings.Contains(strings.ToLower(ce), "gzip") || err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("#%d AE %q: answered with Content-Encoding %q (Cache-Status %q), %d bytes; decodes to the origin's body: %v. "+
				"The client refused gzip, and the edge can decode it (it does for the same object stored whole)",
				i, ae, ce, w.Header().Get("Cache-Status"), w.Body.Len(), err == nil && bytes.Equal(got, raw))
		}
	}
}

// TestS13CodingNon200EncodedBodyIsSentToClientsThatRefuseItsCoding
//
// A defect this review found, now mended (codable decodes the body of any
// status with one for a client that does not take its coding). What it
// was: codable (proxy/compress.go) gave up on every status but 200,
// so a stored 404 (or 410, 301 …, cacheable by default) whose origin
// gzipped it anyway (nginx's gzip applies to error pages) is handed as
// stored, Content-Encoding: gzip and no Vary: Accept-Encoding, to clients
// that sent "identity", "gzip;q=0" or no Accept-Encoding at all. The edge
// forwards Accept-Encoding: identity precisely so that it can serve every
// client, and docs/operations.md says a body the origin encoded is "given
// as is to clients that accept its coding; others get it decoded" (its
// "What is compressed" item does say "206s and other statuses pass as they
// are": the two promises disagree, and the client gets a coding it refused).
func TestS13CodingNon200EncodedBodyIsSentToClientsThatRefuseItsCoding(t *testing.T) {
	body := page(4000)
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	gz, _ := codec.Encode(coding.Gzip, []byte(body))
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip") // compressed whatever was asked
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(gz)
	}, withCompression)
	serve(h, "GET", "/missing", "Accept-Encoding", "gzip") // stored
	for _, ae := range []string{"identity", "gzip;q=0, br", ""} {
		var w = serve(h, "GET", "/missing")
		if ae != "" {
			w = serve(h, "GET", "/missing", "Accept-Encoding", ae)
		}
		if w.Code != 404 {
			t.Fatalf("status %d", w.Code)
		}
		if ce := w.Header().Get("Content-Encoding"); ce != "" {
			t.Errorf("AE %q: the stored 404 was sent with Content-Encoding %q (Cache-Status %q, Vary %q) to a client that does not take it",
				ae, ce, w.Header().Get("Cache-Status"), w.Header()["Vary"])
		}
	}
}

// s13Refused is s13Refuses with the aliases RFC 9110 names (x-gzip) and
// parameters parsed one by one.
func s13Refused(ae, enc string) bool {
	if enc == "" || enc == "identity" {
		return false
	}
	star, q := -1.0, -1.0
	for _, m := range strings.Split(ae, ",") {
		parts := strings.Split(m, ";")
		tok := strings.ToLower(strings.TrimSpace(parts[0]))
		if tok == "x-gzip" {
			tok = "gzip"
		}
		v := 1.0
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				v, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
			}
		}
		switch tok {
		case "*":
			star = max(star, v)
		case enc:
			q = max(q, v)
		}
	}
	if q < 0 {
		q = star
	}
	return q <= 0
}

// TestS13CodingNeverSendsARefusedCoding: for an identity page and for
// bodies the origin encoded in gzip, br and zstd, every hostile
// Accept-Encoding (q=0 members, *;q=0, identity;q=0, odd spelling and
// spacing, aliases) on a miss, a hit encoded live, a hit from the stored
// form, a HEAD, a Range and a pass of the same response gets a coding it
// did not refuse, and bytes that decode to the origin's body with a
// Content-Length that matches them. HOLDS.
func TestS13CodingNeverSendsARefusedCoding(t *testing.T) {
	body := page(12000)
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	bodies := map[string][]byte{"": []byte(body)}
	for _, e := range []coding.Encoding{coding.Gzip, coding.Br, coding.Zstd} {
		b, _ := codec.Encode(e, []byte(body))
		bodies[e.String()] = b
	}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		// /c/<coding>/<n>[/pass]
		parts := strings.Split(r.URL.Path, "/")
		enc := parts[2]
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"o-`+enc+`"`)
		if len(parts) > 4 && parts[4] == "pass" {
			w.Header().Set("Cache-Control", "no-store")
		} else {
			w.Header().Set("Cache-Control", "max-age=600")
		}
		if enc != "identity" {
			w.Header().Set("Content-Encoding", enc)
		}
		b := bodies[strings.TrimPrefix(enc, "identity")]
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	}, withProdCompression)
	aes := []string{
		"identity", "gzip;q=0", "br;q=0, zstd;q=0, gzip;q=0", "*;q=0", "*;q=0, identity", "identity;q=0",
		"br;q=0, *", "zstd;q=0, gzip;q=0, br;q=0.001", "GZIP;Q=0, br", "x-gzip;q=0, zstd;q=0", "gzip;q=0.000, deflate",
		"br;q=0;foo=bar, gzip", " br ; q=0 , gzip ; q=0 , zstd;q=0", "*", "deflate", "zstd;q=0, *;q=0.5", "",
	}
	check := func(what, ae string, w interface {
		Header() http.Header
	}, code int, got []byte, want []byte, head bool) {
		t.Helper()
		ce := strings.ToLower(strings.Join(w.Header()["Content-Encoding"], ","))
		if s13Refused(ae, ce) {
			t.Errorf("%s AE %q: Content-Encoding %q, which it refused", what, ae, ce)
		}
		if head || code != 200 {
			return
		}
		dec, err := s13Decode(t, w.Header(), got)
		if err != nil || !bytes.Equal(dec, want) {
			t.Errorf("%s AE %q: %d bytes in %q do not decode to the origin's body (%v)", what, ae, len(got), ce, err)
		}
		if cl := w.Header().Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(got)) {
			t.Errorf("%s AE %q: Content-Length %s for %d bytes", what, ae, cl, len(got))
		}
	}
	for _, enc := range []string{"identity", "gzip", "br", "zstd"} {
		for i, ae := range aes {
			path := "/c/" + enc + "/" + strconv.Itoa(i)
			hdr := []string{}
			if ae != "" {
				hdr = []string{"Accept-Encoding", ae}
			}
			for _, what := range []string{"miss", "hit-live", "hit-form", "hit-form-again"} {
				w := serve(h, "GET", path, hdr...)
				check(enc+" "+what, ae, w, w.Code, w.Body.Bytes(), []byte(body), false)
			}
			w := serve(h, "HEAD", path, hdr...)
			check(enc+" HEAD", ae, w, w.Code, nil, nil, true)
			full := serve(h, "GET", path, hdr...)
			w = serve(h, "GET", path, append(hdr, "Range", "bytes=7-99")...)
			if w.Code != 206 || !bytes.Equal(w.Body.Bytes(), full.Body.Bytes()[7:100]) ||
				w.Header().Get("Content-Encoding") != full.Header().Get("Content-Encoding") || w.Header().Get("Etag") != full.Header().Get("Etag") {
				t.Errorf("%s AE %q: Range %d %q/%q, not bytes 7-99 of the 200 (%q %q)", enc, ae, w.Code,
					w.Header().Get("Content-Encoding"), w.Header().Get("Etag"), full.Header().Get("Content-Encoding"), full.Header().Get("Etag"))
			}
			check(enc+" range", ae, w, w.Code, nil, nil, true)
			w = serve(h, "GET", path+"/pass", hdr...)
			check(enc+" pass", ae, w, w.Code, w.Body.Bytes(), []byte(body), false)
			w = serve(h, "HEAD", path+"/pass", hdr...)
			check(enc+" pass HEAD", ae, w, w.Code, nil, nil, true)
		}
	}
}

// TestS13CodingStrongETagNamesOneByteSequence: with the production stream
// levels (so a live encoding's bytes differ from the stored form's), every
// answer with a strong ETag — the miss's stream, hits encoded live, stored
// forms, identity under a full live-encoder pool, passes (no-store) of the
// same page, decoded forms of a gzip body stored and passed — carries one
// byte sequence per strong tag. HOLDS.
func TestS13CodingStrongETagNamesOneByteSequence(t *testing.T) {
	body := page(30000)
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	gz, _ := codec.Encode(coding.Gzip, []byte(body))
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=600")
		if strings.HasPrefix(r.URL.Path, "/pass") {
			w.Header().Set("Cache-Control", "no-store")
		}
		b := []byte(body)
		if strings.HasSuffix(r.URL.Path, "gz") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("ETag", `"g1"`) // another resource: another tag
			b = gz
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		for i := 0; i < len(b); i += 7000 { // pauses: a stream's bytes depend on them
			_, _ = w.Write(b[i:min(i+7000, len(b))])
			w.(http.Flusher).Flush()
		}
	}, withProdCompression)
	seen := map[string][]byte{}
	where := map[string]string{}
	record := func(what string, w interface{ Header() http.Header }, code int, b []byte) {
		tag := w.Header().Get("Etag")
		if code != 200 || tag == "" || strings.HasPrefix(tag, "W/") {
			return
		}
		if prev, ok := seen[tag]; ok && !bytes.Equal(prev, b) {
			t.Errorf("strong ETag %s names %d bytes (%s) and %d other bytes (%s)", tag, len(prev), where[tag], len(b), what)
			return
		}
		seen[tag], where[tag] = append([]byte(nil), b...), what
	}
	for _, path := range []string{"/page", "/pass", "/pagegz", "/passgz"} {
		for _, ae := range []string{"br", "gzip", "zstd", "gzip, deflate, br, zstd", "identity", ""} {
			for i := range 3 {
				hdr := []string{}
				if ae != "" {
					hdr = []string{"Accept-Encoding", ae}
				}
				w := serve(h, "GET", path, hdr...)
				record(path+" AE "+ae+" #"+strconv.Itoa(i), w, w.Code, w.Body.Bytes())
			}
		}
	}
	// Every live encoder busy: hits of a fresh page go in identity.
	serve(h, "GET", "/page2")
	for range cap(h.liveSlots) {
		h.liveSlots <- struct{}{}
	}
	w := serve(h, "GET", "/page2", "Accept-Encoding", "br")
	record("/page2 busy", w, w.Code, w.Body.Bytes())
	for range cap(h.liveSlots) {
		<-h.liveSlots
	}
	w = serve(h, "GET", "/page2", "Accept-Encoding", "br")
	record("/page2 form", w, w.Code, w.Body.Bytes())
	if len(seen) < 5 {
		t.Fatalf("only %d strong tags seen: the test did not exercise the forms", len(seen))
	}
}

// TestS13CodingStoredFormTagDoesNotNameTheLevel — a defect this review
// found, now mended: the stored form's strong ETag was the origin's tag
// plus the coding ("v1" -> "v1-br"), not the bytes, so two nodes whose
// compression levels differ (brotli 5 and 4 here: compression.brotli_level
// changed and rolled out node by node) answered one strong tag with
// different bytes, and a client resuming at the other node with If-Range
// got a 206 of that node's bytes, spliced into a body that does not
// decode. The suffix now names the level (coding.Codec.FormTag: "v1-br5",
// "v1-br4"), so the other node's If-Range does not match and it answers
// the whole form.
func TestS13CodingStoredFormTagDoesNotNameTheLevel(t *testing.T) {
	body := page(60000)
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write([]byte(body))
	}
	a, _ := handlerProxy(t, origin, withCompression)
	b, _ := handlerProxy(t, origin, func(c *Config) {
		withCompression(c)
		codec, err := coding.NewCodec(coding.Levels{Br: 4, Zstd: 3, Gzip: 6})
		if err != nil {
			t.Fatal(err)
		}
		c.Compression.Codec = codec
	})
	br := []string{"Accept-Encoding", "br"}
	var fromA, fromB *bytes.Buffer
	var tagA, tagB string
	for range 3 {
		wa, wb := serve(a, "GET", "/p", br...), serve(b, "GET", "/p", br...)
		fromA, fromB, tagA, tagB = wa.Body, wb.Body, wa.Header().Get("Etag"), wb.Header().Get("Etag")
	}
	if tagA != `"v1-br5"` || tagB != `"v1-br4"` {
		t.Fatalf("stored forms' tags: %q and %q, want the level in each", tagA, tagB)
	}
	if bytes.Equal(fromA.Bytes(), fromB.Bytes()) {
		t.Skip("the two levels gave the same bytes: nothing to splice")
	}
	cut := fromA.Len() / 2
	w := serve(b, "GET", "/p", "Accept-Encoding", "br", "Range", "bytes="+strconv.Itoa(cut)+"-", "If-Range", tagA)
	spliced := append(append([]byte(nil), fromA.Bytes()[:cut]...), w.Body.Bytes()...)
	if w.Code != 200 {
		t.Errorf("node B answered If-Range %s (node A's tag) with %d, want its whole form", tagA, w.Code)
	}
	if w.Code == 206 {
		got, err := s13Decode(t, http.Header{"Content-Encoding": {"br"}}, spliced)
		if err != nil || string(got) != body {
			t.Fatalf("node B honoured If-Range %s with a 206 of its own bytes (%d of them); node A's first %d bytes plus them do not decode to the page (%v): one strong tag, two byte sequences", tagA, w.Body.Len(), cut, err)
		}
	}
}
