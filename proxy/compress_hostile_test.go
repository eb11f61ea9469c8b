package proxy

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/coding"
)

// withProdCompression is withCompression plus the stream codec production
// uses (coding.DefaultStreamLevels, as node/node.go configures).
func withProdCompression(c *Config) {
	withCompression(c)
	s, err := coding.NewStreamCodec(coding.DefaultStreamLevels)
	if err != nil {
		panic(err)
	}
	c.Compression.Stream = s
}

func decodeAs(t *testing.T, enc string, b []byte) ([]byte, error) {
	t.Helper()
	e, _ := coding.Parse(enc)
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	return codec.Decode(e, b, 64<<20)
}

// If-Range with a date (the only validator, or beside an ETag that is
// weak on the stream, which If-Range cannot use) must not splice the
// streamed miss's br bytes with the stored br form's: the resume is either
// the whole response or bytes that continue the same encoding.
func TestCompressIfRangeDateSplicesForms(t *testing.T) {
	for _, etag := range []string{"", `"x"`} {
		p := newTestProxy(t, withProdCompression)
		body := page(300000)
		lm := "Mon, 05 Jan 2026 00:00:00 GMT"
		p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Last-Modified", lm)
			if etag != "" {
				w.Header().Set("ETag", etag)
			}
			for i := 0; i < len(body); i += 20000 {
				_, _ = w.Write([]byte(body[i:min(i+20000, len(body))]))
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond)
			}
		})
		first := p.do("GET", "/dl", map[string]string{"Accept-Encoding": "br"})
		if first.Header().Get("Content-Encoding") != "br" {
			t.Fatalf("miss: %q", first.Header().Get("Content-Encoding"))
		}
		cut := first.Body.Len() / 2
		// The client lost the connection after cut bytes and resumes.
		w := p.do("GET", "/dl", map[string]string{"Accept-Encoding": "br", "Range": "bytes=" + strconv.Itoa(cut) + "-", "If-Range": lm})
		if w.Code == 200 {
			continue // fine: the whole representation
		}
		spliced := append(append([]byte{}, first.Body.Bytes()[:cut]...), w.Body.Bytes()...)
		if got, err := decodeAs(t, "br", spliced); err != nil || string(got) != body {
			t.Fatalf("ETag %q: a 206 via a date If-Range splices two br encodings: %v, %d/%d bytes", etag, err, len(got), len(body))
		}
	}
}

// an upstream body that fails mid-stream must not reach the client as
// a complete encoded stream (the deferred Close writes the trailer).
func TestCompressTruncatedPassLooksComplete(t *testing.T) {
	for _, cc := range []string{"no-store", "max-age=60"} {
		t.Run(cc, func(t *testing.T) {
			p := newTestProxy(t, withProdCompression)
			body := page(200000)
			p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				_, _ = w.Write([]byte(body[:100000]))
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
				conn, _, _ := http.NewResponseController(w).Hijack()
				conn.Close()
			})
			req := httptest.NewRequest("GET", "http://example.com/trunc", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			w := httptest.NewRecorder()
			func() {
				defer func() { recover() }() // ErrAbortHandler: what net/http would turn into a cut connection
				p.h.ServeHTTP(w, req)
			}()
			p.h.Wait()
			got, err := decodeAs(t, "gzip", w.Body.Bytes())
			if err == nil && len(got) < len(body) {
				t.Errorf("bytes written to the ResponseWriter are a complete gzip stream of %d/%d bytes (trailer written on the abort path)", len(got), len(body))
			}
		})
	}
}

// hBlockWriter blocks its first Write until released.
type hBlockWriter struct {
	*httptest.ResponseRecorder
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (b *hBlockWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.started); <-b.release })
	return b.ResponseRecorder.Write(p)
}

// a derived form evicted while it is being written must stay charged
// to the buffer budget, as the stored representation is.
func TestCompressEvictedFormNotPinned(t *testing.T) {
	for _, ae := range []string{"", "br"} {
		t.Run("ae="+ae, func(t *testing.T) {
			p := newTestProxy(t, withCompression)
			raw := make([]byte, 150000)
			_, _ = rand.Read(raw)
			body := hex.EncodeToString(raw) // compresses to about half: form > writeChunk
			p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/plain"}, body: body})
			p.do("GET", "/big", nil)
			p.do("GET", "/big", map[string]string{"Accept-Encoding": ae}) // make the form
			bw := &hBlockWriter{ResponseRecorder: httptest.NewRecorder(), started: make(chan struct{}), release: make(chan struct{})}
			req := httptest.NewRequest("GET", "http://example.com/big", nil)
			if ae != "" {
				req.Header.Set("Accept-Encoding", ae)
			}
			done := make(chan struct{})
			go func() { p.h.ServeHTTP(bw, req); close(done) }()
			<-bw.started
			p.h.store.Remove(p.h.store.KeysWithPrefix("")[0])
			buffered := p.h.Buffered()
			close(bw.release)
			<-done
			if buffered == 0 {
				t.Errorf("AE %q: a %d-byte response still being written after eviction is charged nowhere (Buffered=0)", ae, bw.Body.Len())
			}
			if b := p.h.Buffered(); b != 0 {
				t.Errorf("Buffered after: %d", b)
			}
		})
	}
}

// concurrency between form creation, eviction, purge; the store returns to 0.
func TestCompressFormsEvictionRace(t *testing.T) {
	p := newTestProxy(t, withCompression)
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"`+r.URL.Path+`"`)
		_, _ = w.Write([]byte(r.URL.Path + page(30000)))
	})
	small := NewStore(300<<10, 4)
	h := New(p.h.cfg, small, p.h.fetcher, p.h.metrics, nil)
	aes := []string{"br", "gzip", "zstd", "", "br;q=0.5, gzip", "identity"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				path := "/r" + strconv.Itoa((g*7+i)%12)
				req := httptest.NewRequest("GET", "http://example.com"+path, nil)
				ae := aes[(g+i)%len(aes)]
				if ae != "" {
					req.Header.Set("Accept-Encoding", ae)
				}
				if i%5 == 0 {
					req.Header.Set("Range", "bytes=10-99")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code == 200 {
					if got := decoded(t, w); !strings.HasPrefix(got, path+"<li>") {
						t.Errorf("%s AE %q got %.20q", path, ae, got)
					}
				}
				if i%9 == 0 {
					_, _ = h.Purge(PurgeRequest{URL: "http://example.com" + path})
				}
				if st := small.Stats(); st.Bytes > small.Budget() {
					t.Errorf("store %d over budget %d", st.Bytes, small.Budget())
				}
			}
		}()
	}
	wg.Wait()
	h.Wait()
	for _, k := range small.KeysWithPrefix("") {
		small.Remove(k)
	}
	if st := small.Stats(); st.Bytes != 0 || st.Objects != 0 {
		t.Errorf("after removing everything: %+v", st)
	}
	if b := h.Buffered(); b != 0 {
		t.Errorf("buffered %d", b)
	}
}

// a 304 with new Cache-Control and a new field updates the br form: the
// first answer after it is encoded live from the updated entry (its ETag
// weak), and the form made meanwhile answers from then on.
func TestCompress304UpdatesForms(t *testing.T) {
	p := newTestProxy(t, withCompression)
	hdr := map[string]string{"Cache-Control": "max-age=10", "Content-Type": "text/html", "ETag": `"e1"`, "X-Ver": "1"}
	p.origin.set(originResp{header: hdr, body: page(20000)})
	p.do("GET", "/r", map[string]string{"Accept-Encoding": "br"})
	p.do("GET", "/r", map[string]string{"Accept-Encoding": "br"})
	p.clk.Set(t0.Add(20 * time.Second))
	hdr2 := map[string]string{"Cache-Control": "max-age=300, public", "Content-Type": "text/html", "ETag": `"e1"`, "X-Ver": "2"}
	p.origin.set(originResp{header: hdr2, body: page(20000)})
	for i := range 2 {
		w := p.do("GET", "/r", map[string]string{"Accept-Encoding": "br"})
		etag := w.Header().Get("Etag")
		if i == 0 {
			etag = strings.TrimPrefix(etag, "W/")
		}
		if w.Header().Get("Cache-Control") != "max-age=300, public" || w.Header().Get("X-Ver") != "2" || etag != `"e1-br5"` || w.Header().Get("Content-Encoding") != "br" {
			t.Errorf("#%d after 304: CC %q X-Ver %q ETag %q CE %q", i, w.Header().Get("Cache-Control"), w.Header().Get("X-Ver"), w.Header().Get("Etag"), w.Header().Get("Content-Encoding"))
		}
	}
	if n := p.origin.calls.Load(); n != 2 {
		t.Errorf("origin calls %d", n)
	}
}

// HEAD and GET hits carry the same header (once the stored form is made:
// before, a GET is encoded live and a HEAD says what that sends).
func TestCompressHeadMatchesGet(t *testing.T) {
	p := newTestProxy(t, withCompression)
	gz, _ := p.h.cfg.Compression.Codec.Encode(coding.Gzip, []byte(page(30000)))
	for path, h := range map[string]map[string]string{
		"/plain": {"Cache-Control": "max-age=60", "Content-Type": "text/html", "ETag": `"a"`},
		"/gz":    {"Cache-Control": "max-age=60", "Content-Type": "text/html", "ETag": `"b"`, "Content-Encoding": "gzip"},
	} {
		b := page(30000)
		if path == "/gz" {
			b = string(gz)
		}
		p.origin.set(originResp{header: h, body: b})
		p.do("GET", path, nil)
		for _, ae := range []string{"br", "gzip", "", "zstd"} {
			p.do("GET", path, map[string]string{"Accept-Encoding": ae}) // the form is made after it
			g := p.do("GET", path, map[string]string{"Accept-Encoding": ae})
			hd := p.do("HEAD", path, map[string]string{"Accept-Encoding": ae})
			for _, k := range []string{"Content-Encoding", "Content-Length", "Etag", "Vary", "Cache-Control"} {
				if g.Header().Get(k) != hd.Header().Get(k) {
					t.Errorf("%s AE %q: %s GET %q HEAD %q", path, ae, k, g.Header().Get(k), hd.Header().Get(k))
				}
			}
			if cl, _ := strconv.Atoi(g.Header().Get("Content-Length")); cl != g.Body.Len() {
				t.Errorf("%s AE %q: Content-Length %d for %d bytes", path, ae, cl, g.Body.Len())
			}
		}
	}
}

// fields that describe the encoded bytes must not survive re-encoding.
func TestCompressDigestFieldsOnForms(t *testing.T) {
	p := newTestProxy(t, withCompression)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html",
		"Content-Digest": "sha-256=:AAAA:", "Repr-Digest": "sha-256=:AAAA:", "Digest": "SHA-256=AAAA"}, body: page(20000)})
	for i := range 2 {
		w := p.do("GET", "/d", map[string]string{"Accept-Encoding": "br"})
		for _, k := range []string{"Content-Digest", "Repr-Digest", "Digest"} {
			if w.Header().Get(k) != "" {
				t.Errorf("#%d br response keeps %s computed over the identity bytes", i, k)
			}
		}
	}
}

// origin-forced gzip to a client without gzip, first request (leader), Range, HEAD.
func TestCompressForcedGzipLeader(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(40000)
	gz, _ := p.h.cfg.Compression.Codec.Encode(coding.Gzip, []byte(body))
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html", "Content-Encoding": "gzip", "ETag": `"g"`}, body: string(gz)})
	w := p.do("GET", "/fg", map[string]string{"Accept-Encoding": "br"})
	if w.Header().Get("Content-Encoding") != "" || w.Body.String() != body {
		t.Fatalf("leader: CE %q len %d", w.Header().Get("Content-Encoding"), w.Body.Len())
	}
	w = p.do("GET", "/fg", map[string]string{"Range": "bytes=5-14"})
	if w.Code != 206 || w.Body.String() != body[5:15] {
		t.Errorf("range on decoded form: %d %q", w.Code, w.Body.String())
	}
	w = p.do("HEAD", "/fg", nil)
	if w.Header().Get("Content-Length") != strconv.Itoa(len(body)) || w.Header().Get("Content-Encoding") != "" {
		t.Errorf("HEAD: CL %q CE %q", w.Header().Get("Content-Length"), w.Header().Get("Content-Encoding"))
	}
	// Range on a streamed miss of a fresh URL, client accepts br.
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html", "ETag": `"r"`}, body: body})
	r := p.do("GET", "/rm", map[string]string{"Accept-Encoding": "br", "Range": "bytes=0-99"})
	full := p.do("GET", "/rm", map[string]string{"Accept-Encoding": "br"})
	if r.Code != 206 || !bytes.Equal(r.Body.Bytes(), full.Body.Bytes()[:100]) || r.Header().Get("Etag") != full.Header().Get("Etag") {
		t.Errorf("range on streamed miss: %d etag %q vs %q", r.Code, r.Header().Get("Etag"), full.Header().Get("Etag"))
	}
}

// a decoded form above MaxObjectBytes is not kept with its entry (the
// store stays within its object limit) but is charged to the buffer budget
// while it is written, and given back after.
func TestCompressOversizeDecodedForm(t *testing.T) {
	p := newTestProxy(t, func(c *Config) { withCompression(c); c.MaxObjectBytes = 1 << 20 })
	body := page(6 << 20)
	gz, _ := p.h.cfg.Compression.Codec.Encode(coding.Gzip, []byte(body))
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html", "Content-Encoding": "gzip"}, body: string(gz)})
	p.do("GET", "/o", map[string]string{"Accept-Encoding": "gzip"})
	for range 3 {
		if w := p.do("GET", "/o", nil); w.Code != 200 || w.Body.String() != body {
			t.Fatalf("identity client: %d, %d bytes", w.Code, w.Body.Len())
		}
	}
	if b := p.h.store.Stats().Bytes; b > int64(len(gz))+64<<10 {
		t.Errorf("store holds %d bytes for a %d-byte gzip entry: the 6 MiB decoded form was kept", b, len(gz))
	}
	if b := p.h.Buffered(); b != 0 {
		t.Errorf("buffer budget still charged %d bytes after the responses", b)
	}
	// With no budget left for it, the decoded form is refused, not sent uncounted.
	q := newTestProxy(t, func(c *Config) { withCompression(c); c.MaxObjectBytes = 1 << 20; c.MaxBufferedBytes = 4 << 20 })
	q.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html", "Content-Encoding": "gzip"}, body: string(gz)})
	q.do("GET", "/o", map[string]string{"Accept-Encoding": "gzip"})
	if w := q.do("GET", "/o", nil); w.Code != 503 {
		t.Errorf("a 6 MiB decoded form with a 4 MiB buffer budget: %d, want 503", w.Code)
	}
}
