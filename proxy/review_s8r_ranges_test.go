package proxy

import (
	"bytes"
	"encoding/hex"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// s8rWarm fills /p and makes its stored forms for the codings given, so
// that later requests hit stored forms (not live encodings).
func s8rWarm(t *testing.T, h *Handler, path string, aes ...string) {
	t.Helper()
	for _, ae := range aes {
		serve(h, "GET", path, "Accept-Encoding", ae)
		serve(h, "GET", path, "Accept-Encoding", ae)
		h.Wait()
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, ae := range aes {
		for {
			w := serve(h, "GET", path, "Accept-Encoding", ae)
			if et := w.Header().Get("Etag"); !strings.HasPrefix(et, "W/") && w.Header().Get("Content-Length") != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %s form was never stored", ae)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// s8rText is compressible text (hex digits: gzip halves it) that is
// still large once compressed, so that ranges of the forms have room.
func s8rText(n int) string {
	b := make([]byte, n/2+1)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return hex.EncodeToString(b)[:n]
}

func s8rPageProxy(t *testing.T, body string, etag string, mod func(*Config)) *Handler {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Last-Modified", s8rLastMod)
		_, _ = io.WriteString(w, body)
	}, func(c *Config) {
		withCompression(c)
		if mod != nil {
			mod(c)
		}
	})
	return h
}

// TestS8RRangesAddressTheSelectedRepresentation: with a stored gzip form,
// every range answer for Accept-Encoding: gzip addresses the gzip bytes
// (single, suffix, open, past the end, multi-range, overlapping and
// out-of-order), and every answer for identity addresses the identity
// bytes; Content-Length always equals the bytes sent. Held on the current
// code: checks that pass document what was tried.
func TestS8RRangesAddressTheSelectedRepresentation(t *testing.T) {
	body := s8rText(20000)
	h := s8rPageProxy(t, body, `"v1"`, nil)
	s8rWarm(t, h, "/p", "gzip")
	gz := serve(h, "GET", "/p", "Accept-Encoding", "gzip").Body.Bytes()
	id := []byte(body)
	if len(gz) >= len(id) {
		t.Fatal("gzip form not smaller")
	}
	for _, tc := range []struct {
		ae   string
		rep  []byte
		etag string
		ce   string
	}{{"gzip", gz, `"v1-gzip6"`, "gzip"}, {"identity", id, `"v1"`, ""}} {
		n := int64(len(tc.rep))
		single := func(rng string, a, b int64) {
			t.Helper()
			w := serve(h, "GET", "/p", "Accept-Encoding", tc.ae, "Range", rng)
			want := "bytes " + strconv.FormatInt(a, 10) + "-" + strconv.FormatInt(b, 10) + "/" + strconv.FormatInt(n, 10)
			if w.Code != 206 || w.Header().Get("Content-Range") != want || !bytes.Equal(w.Body.Bytes(), tc.rep[a:b+1]) ||
				w.Header().Get("Content-Encoding") != tc.ce || w.Header().Get("Etag") != tc.etag ||
				w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
				t.Errorf("AE %s Range %s: %d CR %q (want %q) CE %q ETag %q CL %q len %d",
					tc.ae, rng, w.Code, w.Header().Get("Content-Range"), want, w.Header().Get("Content-Encoding"),
					w.Header().Get("Etag"), w.Header().Get("Content-Length"), w.Body.Len())
			}
		}
		single("bytes=0-0", 0, 0)
		single("bytes=10-19", 10, 19)
		single("bytes=-5", n-5, n-1)
		single("bytes=-999999", 0, n-1)
		single("bytes=100-", 100, n-1)
		single("bytes=100-99999999", 100, n-1)
		single("bytes=10-19,15-25", 10, 25)    // overlapping: coalesced (RFC 9110 §15.3.7.2 allows)
		single("bytes=10-19,5000000-", 10, 19) // the unsatisfiable one dropped
		// Past the end: 416 with the selected representation's length, no
		// Content-Encoding on the error text.
		w := serve(h, "GET", "/p", "Accept-Encoding", tc.ae, "Range", "bytes="+strconv.FormatInt(n, 10)+"-")
		if w.Code != 416 || w.Header().Get("Content-Range") != "bytes */"+strconv.FormatInt(n, 10) || w.Header().Get("Content-Encoding") != "" {
			t.Errorf("AE %s past the end: %d CR %q CE %q", tc.ae, w.Code, w.Header().Get("Content-Range"), w.Header().Get("Content-Encoding"))
		}
		// Multi-range, out of order: parts of the selected representation.
		w = serve(h, "GET", "/p", "Accept-Encoding", tc.ae, "Range", "bytes=3000-3009,0-9")
		mt, params, _ := mime.ParseMediaType(w.Header().Get("Content-Type"))
		if w.Code != 206 || mt != "multipart/byteranges" || w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
			t.Errorf("AE %s multi-range: %d %q CL %q len %d", tc.ae, w.Code, w.Header().Get("Content-Type"), w.Header().Get("Content-Length"), w.Body.Len())
			continue
		}
		mr := multipart.NewReader(bytes.NewReader(w.Body.Bytes()), params["boundary"])
		for _, want := range [][2]int64{{0, 9}, {3000, 3009}} {
			part, err := mr.NextPart()
			if err != nil {
				t.Fatalf("AE %s: part: %v", tc.ae, err)
			}
			got, _ := io.ReadAll(part)
			cr := "bytes " + strconv.FormatInt(want[0], 10) + "-" + strconv.FormatInt(want[1], 10) + "/" + strconv.FormatInt(n, 10)
			if part.Header.Get("Content-Range") != cr || !bytes.Equal(got, tc.rep[want[0]:want[1]+1]) {
				t.Errorf("AE %s part: CR %q want %q", tc.ae, part.Header.Get("Content-Range"), cr)
			}
		}
		if _, err := mr.NextPart(); err != io.EOF {
			t.Errorf("AE %s: more parts than asked: %v", tc.ae, err)
		}
	}
}

// TestS8RTooManyRangesGiveTheWholeSelectedRepresentation: more ranges
// than limits.max_ranges (after merging) get the whole representation
// (RFC 9110 §14.2 lets a server ignore Range), in the coding asked for,
// with a correct length. Held.
func TestS8RTooManyRangesGiveTheWholeSelectedRepresentation(t *testing.T) {
	body := s8rText(20000)
	h := s8rPageProxy(t, body, `"v1"`, func(c *Config) { c.MaxRanges = 2 })
	s8rWarm(t, h, "/p", "br")
	full := serve(h, "GET", "/p", "Accept-Encoding", "br")
	w := serve(h, "GET", "/p", "Accept-Encoding", "br", "Range", "bytes=0-0,1000-1000,2000-2000")
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), full.Body.Bytes()) || w.Header().Get("Content-Encoding") != "br" {
		t.Errorf("too many ranges: %d CE %q len %d (full %d)", w.Code, w.Header().Get("Content-Encoding"), w.Body.Len(), full.Body.Len())
	}
	if cl := w.Header().Get("Content-Length"); cl != "" && cl != strconv.Itoa(w.Body.Len()) {
		t.Errorf("Content-Length %s for %d bytes", cl, w.Body.Len())
	}
	// Two Range lines: ignored, whole answer.
	r, _ := http.NewRequest("GET", "http://example.com/p", nil)
	r.Header["Range"] = []string{"bytes=0-0", "bytes=5-5"}
	r.Header.Set("Accept-Encoding", "br")
	rec := newRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), full.Body.Bytes()) {
		t.Errorf("two Range lines: %d len %d", rec.Code, rec.Body.Len())
	}
}

// TestS8RIfRangeStrongAndWeak: If-Range needs a strong match with the
// selected representation's tag. Held.
func TestS8RIfRangeStrongAndWeak(t *testing.T) {
	body := s8rText(20000)
	h := s8rPageProxy(t, body, `"v1"`, nil)
	s8rWarm(t, h, "/p", "gzip")
	gz := serve(h, "GET", "/p", "Accept-Encoding", "gzip").Body.Bytes()
	for _, tc := range []struct {
		ae, ifr string
		code    int
	}{
		{"gzip", `"v1-gzip6"`, 206},
		{"gzip", `W/"v1-gzip6"`, 200}, // weak: never
		{"gzip", `"v1"`, 200},         // identity's tag
		{"gzip", s8rLastMod, 200},     // a date on an encoded form
		{"identity", `"v1"`, 206},
		{"identity", `W/"v1"`, 200},
		{"identity", `"v1-gzip6"`, 200},
		{"identity", s8rLastMod, 206},
		{"identity", "Tue, 06 Jan 2026 00:00:00 GMT", 200},
	} {
		w := serve(h, "GET", "/p", "Accept-Encoding", tc.ae, "Range", "bytes=5-9", "If-Range", tc.ifr)
		if w.Code != tc.code {
			t.Errorf("AE %s If-Range %s: %d, want %d", tc.ae, tc.ifr, w.Code, tc.code)
		}
		if w.Code == 206 && tc.ae == "gzip" && !bytes.Equal(w.Body.Bytes(), gz[5:10]) {
			t.Errorf("AE gzip If-Range %s: wrong bytes", tc.ifr)
		}
		if w.Code == 200 && w.Header().Get("Content-Length") != "" && w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
			t.Errorf("AE %s If-Range %s: CL %s for %d bytes", tc.ae, tc.ifr, w.Header().Get("Content-Length"), w.Body.Len())
		}
	}
}

// TestS8RConditionalsAgainstForms: If-None-Match / If-Modified-Since
// against stored forms. A tag of another coding never validates; a 304
// carries the selected form's ETag (weak when the client's matched only in
// its weak spelling) and Vary. Held.
func TestS8RConditionalsAgainstForms(t *testing.T) {
	body := s8rText(20000)
	h := s8rPageProxy(t, body, `"v1"`, nil)
	s8rWarm(t, h, "/p", "gzip", "br")
	for _, tc := range []struct {
		ae, inm string
		code    int
		etag    string
	}{
		{"gzip", `"v1-gzip6"`, 304, `"v1-gzip6"`},
		// The weak spelling is what a streamed gzip answer carried: its
		// 304 keeps it weak, naming the stream's bytes the client holds,
		// not the stored form's (TestS14FormTagsConditionals).
		{"gzip", `W/"v1-gzip6"`, 304, `W/"v1-gzip6"`},
		{"gzip", `"v1"`, 200, `"v1-gzip6"`},
		{"gzip", `"v1-br5"`, 200, `"v1-gzip6"`},
		{"br", `"v1-gzip6", "v1-br5"`, 304, `"v1-br5"`},
		{"identity", `"v1-gzip6"`, 200, `"v1"`},
		{"identity", `"v1"`, 304, `"v1"`},
		{"gzip", `*`, 304, `"v1-gzip6"`},
	} {
		w := serve(h, "GET", "/p", "Accept-Encoding", tc.ae, "If-None-Match", tc.inm)
		if w.Code != tc.code || w.Header().Get("Etag") != tc.etag {
			t.Errorf("AE %s INM %s: %d ETag %q, want %d %q", tc.ae, tc.inm, w.Code, w.Header().Get("Etag"), tc.code, tc.etag)
		}
		if w.Code == 304 && !strings.Contains(strings.Join(w.Header()["Vary"], ","), "Accept-Encoding") {
			t.Errorf("AE %s INM %s: 304 without Vary: Accept-Encoding", tc.ae, tc.inm)
		}
		if w.Code == 304 && w.Body.Len() != 0 {
			t.Errorf("304 with a body")
		}
		if w.Code == 200 && tc.ae != "identity" && w.Header().Get("Content-Encoding") != tc.ae {
			t.Errorf("AE %s INM %s: CE %q", tc.ae, tc.inm, w.Header().Get("Content-Encoding"))
		}
		if w.Code == 200 {
			if cl := w.Header().Get("Content-Length"); cl != "" && cl != strconv.Itoa(w.Body.Len()) {
				t.Errorf("AE %s INM %s: CL %s for %d", tc.ae, tc.inm, cl, w.Body.Len())
			}
		}
	}
	// If-None-Match takes precedence over If-Modified-Since (RFC 9110 §13.2.2).
	w := serve(h, "GET", "/p", "Accept-Encoding", "gzip", "If-None-Match", `"v1"`, "If-Modified-Since", s8rLastMod)
	if w.Code != 200 {
		t.Errorf("INM identity tag + IMS on gzip: %d, want 200 (INM decides)", w.Code)
	}
	// HEAD with a failing If-None-Match: the same fields as the GET.
	hd := serve(h, "HEAD", "/p", "Accept-Encoding", "gzip", "If-None-Match", `"nope"`)
	gt := serve(h, "GET", "/p", "Accept-Encoding", "gzip", "If-None-Match", `"nope"`)
	if hd.Code != gt.Code || hd.Header().Get("Content-Length") != gt.Header().Get("Content-Length") || hd.Body.Len() != 0 {
		t.Errorf("HEAD vs GET with INM: %d CL %q vs %d CL %q", hd.Code, hd.Header().Get("Content-Length"), gt.Code, gt.Header().Get("Content-Length"))
	}
}

// TestS8RAcceptEncodingQValues: q-values decide; a coding with q=0 is
// never sent; identity;q=0 / *;q=0 get identity (RFC 9110 §12.5.3 lets a
// server disregard the field rather than 406). Held.
func TestS8RAcceptEncodingQValues(t *testing.T) {
	body := page(20000) // compresses in every coding
	h := s8rPageProxy(t, body, `"v1"`, nil)
	s8rWarm(t, h, "/p", "gzip", "br", "zstd")
	for _, tc := range []struct{ ae, want string }{
		{"gzip;q=0", ""},
		{"gzip;q=0, identity;q=0", ""},
		{"*;q=0", ""},
		{"identity;q=0", ""},
		{"*", "br"},
		{"*, br;q=0", "zstd"},
		{"gzip;q=0.5, br;q=0.4", "gzip"},
		{"x-gzip", "gzip"},
		{"GZIP", "gzip"},
		{"gzip; q=1.0", "gzip"},
		{"gzip;q=1.5", ""}, // malformed weight: member ignored
		{"gzip;q=0.001, identity;q=0", "gzip"},
		{"br;q=0, *", "zstd"},
		{"deflate", ""},
		{"", ""},
	} {
		w := serve(h, "GET", "/p", "Accept-Encoding", tc.ae)
		if w.Code != 200 || w.Header().Get("Content-Encoding") != tc.want {
			t.Errorf("AE %q: %d CE %q, want %q", tc.ae, w.Code, w.Header().Get("Content-Encoding"), tc.want)
		}
		if cl := w.Header().Get("Content-Length"); cl != "" && cl != strconv.Itoa(w.Body.Len()) {
			t.Errorf("AE %q: CL %s for %d", tc.ae, cl, w.Body.Len())
		}
	}
}
