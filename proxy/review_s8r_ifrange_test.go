package proxy

import (
	cryptorand "crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// s8rLastMod is a Last-Modified well before any Date the origin sends, so
// that a client may take it for a strong validator (RFC 9110 §8.8.2.2).
const s8rLastMod = "Mon, 05 Jan 2026 00:00:00 GMT"

// TestS8RIfRangeDateNeverSplicesGzipPrefixWithIdentitySuffix: an origin
// sends text with Last-Modified and no ETag. A client that accepts gzip
// gets the body gzip-encoded live (the stored form is not made yet); its
// download breaks and it resumes with Range + If-Range: <Last-Modified>,
// the only validator it has (RFC 9110 §13.1.5). Meanwhile the stored gzip
// form came out larger than the body, so the edge now sends identity for
// Accept-Encoding: gzip. The edge must then not answer 206 with identity
// bytes: the client would append them to its gzip prefix. The edge's own
// docs (ARCHITECTURE.md, setCodingFields) promise "If-Range can never
// splice the two"; serveContent guards only the case where the *answer* is
// encoded, not the case where the prefix was.
//
// Failed before 2026-12-06; fixed: a date If-Range is not honoured where a coding is in play (serveContent, splicesCodings).
func TestS8RIfRangeDateNeverSplicesGzipPrefixWithIdentitySuffix(t *testing.T) {
	raw := make([]byte, 8000)
	_, _ = cryptorand.Read(raw) // incompressible: the stored gzip form is "larger"
	s8rIfRangeLarger(t, raw, "gzip")
}

// TestS8RIfRangeDateNeverSplicesZstdOnPlainText: the same with ordinary text
// (hex digits, as in a page of hashes) that zstd's stored level does not
// shrink: the live zstd answer is followed by identity.
//
// Failed before 2026-12-06; fixed: a date If-Range is not honoured where a coding is in play (serveContent, splicesCodings).
func TestS8RIfRangeDateNeverSplicesZstdOnPlainText(t *testing.T) {
	s8rIfRangeLarger(t, []byte(s8rText(20000)), "zstd")
}

func s8rIfRangeLarger(t *testing.T, raw []byte, enc string) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Last-Modified", s8rLastMod)
		_, _ = w.Write(raw)
	}, withCompression)

	miss := serve(h, "GET", "/blob.txt", "Accept-Encoding", enc)
	if miss.Code != 200 {
		t.Fatalf("miss: %d", miss.Code)
	}
	first := serve(h, "GET", "/blob.txt", "Accept-Encoding", enc) // hit: live encoding, asks for the stored form
	h.Wait()
	time.Sleep(50 * time.Millisecond)
	h.Wait()
	if first.Header().Get("Content-Encoding") != enc || first.Header().Get("Etag") != "" ||
		first.Header().Get("Last-Modified") != s8rLastMod {
		t.Fatalf("setup: want a gzip 200 with only Last-Modified as validator, got CE %q ETag %q LM %q",
			first.Header().Get("Content-Encoding"), first.Header().Get("Etag"), first.Header().Get("Last-Modified"))
	}
	// The client got part of first's gzip bytes and resumes.
	resume := serve(h, "GET", "/blob.txt", "Accept-Encoding", enc, "Range", "bytes=100-", "If-Range", s8rLastMod)
	ce := resume.Header().Get("Content-Encoding")
	t.Logf("resume: %d CE=%q Content-Range=%q len=%d", resume.Code, ce, resume.Header().Get("Content-Range"), resume.Body.Len())
	if resume.Code == http.StatusPartialContent && ce != enc {
		t.Errorf("If-Range %q after a "+enc+" 200 with the same Last-Modified answered 206 with Content-Encoding %q: "+
			"the client splices identity bytes onto its encoded prefix (RFC 9110 §13.1.5/§15.3.7.3; "+
			"the date is not a strong validator of a representation that changed coding under it)", s8rLastMod, ce)
	}
}

// TestS8RIfRangeDateUnderBudgetPressure: the same splice through another
// door. The client received the miss gzip-encoded as it streamed
// (Last-Modified, no ETag) and resumes while the buffer budget is taken by
// other traffic: chooseForm falls back to identity on ErrBudget (no stored
// form yet) and serveContent honours the date for the identity body.
//
// Failed before 2026-12-06; fixed: a date If-Range is not honoured where a coding is in play (serveContent, splicesCodings).
func TestS8RIfRangeDateUnderBudgetPressure(t *testing.T) {
	body := page(20000)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Last-Modified", s8rLastMod)
		_, _ = w.Write([]byte(body))
	}, withCompression)
	miss := serve(h, "GET", "/p.html", "Accept-Encoding", "gzip")
	if miss.Header().Get("Content-Encoding") != "gzip" || miss.Header().Get("Last-Modified") != s8rLastMod || miss.Header().Get("Etag") != "" {
		t.Fatalf("setup: want a gzip 200 validated by Last-Modified alone, got CE %q LM %q ETag %q",
			miss.Header().Get("Content-Encoding"), miss.Header().Get("Last-Modified"), miss.Header().Get("Etag"))
	}
	// Other traffic holds the whole buffer budget.
	free := h.cfg.MaxBufferedBytes - h.buffered.Load()
	if !h.charge(free) {
		t.Fatal("could not take the budget")
	}
	defer h.release(free)
	resume := serve(h, "GET", "/p.html", "Accept-Encoding", "gzip", "Range", "bytes=100-", "If-Range", s8rLastMod)
	ce := resume.Header().Get("Content-Encoding")
	t.Logf("resume (budget full): %d CE=%q CR=%q", resume.Code, ce, resume.Header().Get("Content-Range"))
	if resume.Code == http.StatusPartialContent && ce != "gzip" {
		t.Errorf("If-Range %q after a gzip 200 with the same Last-Modified answered 206 with Content-Encoding %q: "+
			"identity bytes for the client to splice onto its gzip prefix", s8rLastMod, ce)
	}
}

// TestS8RIfRangeDateOnAPassNeverSplices: the same splice on the pass path.
// A page the edge does not store (no-store, or larger than
// cache.max_object_bytes) is sent gzip-encoded as it streams, with the
// origin's Last-Modified and no ETag. Its resumption (Range + If-Range:
// <date>) is forwarded to the origin as it came, with Accept-Encoding:
// identity; the origin rightly answers 206 with identity bytes, which the
// edge passes on to the client whose prefix is gzip.
//
// Failed before 2026-12-06; fixed: a date If-Range is not honoured where a coding is in play (serveContent, splicesCodings).
func TestS8RIfRangeDateOnAPassNeverSplices(t *testing.T) {
	body := page(20000)
	for name, cc := range map[string]string{"no-store": "no-store", "too-large": "max-age=600"} {
		t.Run(name, func(t *testing.T) {
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("Content-Type", "text/html")
				lm, _ := http.ParseTime(s8rLastMod)
				http.ServeContent(w, r, "", lm, strings.NewReader(body)) // honours Range and If-Range by the date
			}, func(c *Config) {
				withCompression(c)
				if name == "too-large" {
					c.MaxObjectBytes = 4096
					c.SliceBytes = 0
				}
			})
			var first *httptest.ResponseRecorder
			for range 2 { // the second one is a remembered pass
				first = serve(h, "GET", "/big.html", "Accept-Encoding", "gzip")
			}
			if first.Header().Get("Content-Encoding") != "gzip" || first.Header().Get("Last-Modified") != s8rLastMod || first.Header().Get("Etag") != "" {
				t.Fatalf("setup: want gzip with Last-Modified only: CE %q LM %q ETag %q",
					first.Header().Get("Content-Encoding"), first.Header().Get("Last-Modified"), first.Header().Get("Etag"))
			}
			resume := serve(h, "GET", "/big.html", "Accept-Encoding", "gzip", "Range", "bytes=100-", "If-Range", s8rLastMod)
			ce := resume.Header().Get("Content-Encoding")
			t.Logf("resume: %d CE %q CR %q Cache-Status %q", resume.Code, ce, resume.Header().Get("Content-Range"), resume.Header().Get("Cache-Status"))
			if resume.Code == http.StatusPartialContent && ce != "gzip" {
				t.Errorf("If-Range %q after a gzip 200 with that Last-Modified: 206 in identity (%q), spliced onto the client's gzip prefix", s8rLastMod, resume.Header().Get("Content-Range"))
			}
		})
	}
}
