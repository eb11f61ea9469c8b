package proxy

import (
	"bytes"
	cryptorand "crypto/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/coding"
)

// withCompression turns compression on with the defaults the config file has.
func withCompression(c *Config) {
	codec, err := coding.NewCodec(coding.DefaultLevels)
	if err != nil {
		panic(err)
	}
	types, _ := coding.NewTypes(coding.DefaultTypes)
	c.Compression = &Compression{
		Codec: codec, Types: types, MinBytes: 1024, MaxDecodedBytes: 32 << 20,
		Offer: coding.Set(0).With(coding.Identity).With(coding.Br).With(coding.Zstd).With(coding.Gzip),
	}
}

// page is a compressible HTML body of n bytes.
func page(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString("<li>item " + strconv.Itoa(i) + " of a long list of things</li>\n")
	}
	return b.String()[:n]
}

// decoded returns the body of w decoded from its Content-Encoding.
func decoded(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	enc, ok := coding.OfBody(w.Header()["Content-Encoding"])
	if !ok {
		t.Fatalf("unknown Content-Encoding %q", w.Header()["Content-Encoding"])
	}
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	out, err := codec.Decode(enc, w.Body.Bytes(), 64<<20)
	if err != nil {
		t.Fatalf("decoding %s: %v", enc, err)
	}
	return string(out)
}

func TestCompressionOneOriginFetchServesEveryCoding(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(20000)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html; charset=utf-8", "ETag": `"v1"`}, body: body})
	formed := map[string]bool{"": true}
	for i, tc := range []struct{ ae, want, etag string }{
		{"gzip, deflate, br, zstd", "zstd", `"v1-zstd3"`}, // Chromium; the miss is encoded as it streams: the cheapest coder
		{"br", "br", `"v1-br5"`},
		{"BR ,gzip", "br", `"v1-br5"`}, // another spelling: the same form
		{"zstd, gzip", "zstd", `"v1-zstd3"`},
		{"gzip", "gzip", `"v1-gzip6"`},
		{"gzip;q=1, br;q=0.1", "gzip", `"v1-gzip6"`},
		{"identity", "", `"v1"`},
		{"", "", `"v1"`},
		{"br;q=0, zstd;q=0, gzip;q=0", "", `"v1"`},
	} {
		hdr := map[string]string{}
		if tc.ae != "" {
			hdr["Accept-Encoding"] = tc.ae
		}
		w := p.do("GET", "/page", hdr)
		if w.Code != 200 || w.Header().Get("Content-Encoding") != tc.want {
			t.Fatalf("AE %q: %d, Content-Encoding %q, want %q", tc.ae, w.Code, w.Header().Get("Content-Encoding"), tc.want)
		}
		if got := decoded(t, w); got != body {
			t.Fatalf("AE %q: body differs after decoding", tc.ae)
		}
		// The first response in each coding is the streamed miss or a hit
		// encoded live while its stored form is made; then the form.
		live := !formed[tc.want]
		if i > 0 { // the miss makes no form; the first hit asks for one
			formed[tc.want] = true
		}
		if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(w.Body.Len()) && !live {
			t.Errorf("AE %q: Content-Length %s for %d bytes", tc.ae, cl, w.Body.Len())
		}
		if !containsToken(strings.Join(w.Header()["Vary"], ","), "Accept-Encoding") {
			t.Errorf("AE %q: Vary %q lacks Accept-Encoding", tc.ae, w.Header()["Vary"])
		}
		if got := strings.TrimPrefix(w.Header().Get("Etag"), "W/"); got != tc.etag { // weak on the streamed miss
			t.Errorf("AE %q: ETag %s, want %s", tc.ae, got, tc.etag)
		}
		if tc.want != "" && w.Body.Len() > len(body)/3 {
			t.Errorf("AE %q: %s body is %d bytes of %d", tc.ae, tc.want, w.Body.Len(), len(body))
		}
	}
	if n := p.origin.calls.Load(); n != 1 {
		t.Errorf("the origin saw %d requests, want 1 for every coding", n)
	}
	if ae := p.origin.last.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("the origin was asked with Accept-Encoding %q, want identity", ae)
	}
}

func TestCompressionValidatorsAndRangesApplyToEachForm(t *testing.T) {
	p := newTestProxy(t, withCompression)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/css", "ETag": `W/"s"`, "Last-Modified": "Mon, 05 Jan 2026 00:00:00 GMT"}, body: page(8000)})
	if miss := p.do("GET", "/a.css", map[string]string{"Accept-Encoding": "br"}); miss.Header().Get("Etag") != `W/"s-br5"` {
		t.Fatalf("a streamed br form is weak: %q", miss.Header().Get("Etag"))
	}
	full := p.do("GET", "/a.css", map[string]string{"Accept-Encoding": "br"})
	if full.Header().Get("Etag") != `W/"s-br5"` {
		t.Fatalf("weak ETag of the br form: %q", full.Header().Get("Etag"))
	}
	if w := p.do("GET", "/a.css", map[string]string{"Accept-Encoding": "br", "If-None-Match": `W/"s-br5"`}); w.Code != 304 {
		t.Errorf("If-None-Match with the br form's tag: %d, want 304", w.Code)
	}
	// The identity tag does not validate the br form, and vice versa.
	if w := p.do("GET", "/a.css", map[string]string{"Accept-Encoding": "br", "If-None-Match": `W/"s"`}); w.Code != 200 {
		t.Errorf("If-None-Match with the identity tag on the br form: %d, want 200", w.Code)
	}
	if w := p.do("GET", "/a.css", map[string]string{"If-None-Match": `W/"s-br5"`}); w.Code != 200 {
		t.Errorf("If-None-Match with the br tag on identity: %d, want 200", w.Code)
	}
	w := p.do("GET", "/a.css", map[string]string{"Accept-Encoding": "br", "Range": "bytes=10-19"})
	if w.Code != 206 || w.Body.String() != full.Body.String()[10:20] || w.Header().Get("Content-Encoding") != "br" {
		t.Errorf("Range on the br form: %d %q, want bytes 10–19 of the encoded body", w.Code, w.Header().Get("Content-Range"))
	}
	if n := p.origin.calls.Load(); n != 1 {
		t.Errorf("origin requests: %d, want 1", n)
	}
}

func TestCompressionLeavesAloneWhatItMustNot(t *testing.T) {
	for name, hdr := range map[string]map[string]string{
		"image":        {"Content-Type": "image/png"},
		"no-transform": {"Content-Type": "text/html", "Cache-Control": "max-age=60, no-transform"},
		"small":        {"Content-Type": "text/html", "Content-Length": "100"},
		"binary":       {"Content-Type": "application/octet-stream"},
		"two codings":  {"Content-Type": "text/html", "Content-Encoding": "gzip, br"},
		"unknown":      {"Content-Type": "text/html", "Content-Encoding": "compress"},
	} {
		t.Run(name, func(t *testing.T) {
			p := newTestProxy(t, withCompression)
			if hdr["Cache-Control"] == "" {
				hdr["Cache-Control"] = "max-age=60"
			}
			body := page(5000)
			if hdr["Content-Length"] != "" {
				body = page(100)
			}
			p.origin.set(originResp{header: hdr, body: body})
			for range 2 { // the miss, then the hit
				w := p.do("GET", "/x", map[string]string{"Accept-Encoding": "br, gzip"})
				if w.Header().Get("Content-Encoding") != hdr["Content-Encoding"] || w.Body.String() != body {
					t.Fatalf("got Content-Encoding %q, want it as the origin sent it", w.Header().Get("Content-Encoding"))
				}
			}
		})
	}
}

func TestCompressionDecodesWhatTheClientCannotAccept(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(30000)
	gz, _ := p.h.cfg.Compression.Codec.Encode(coding.Gzip, []byte(body))
	// An origin that compresses whatever it is asked (a precompressed file).
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "application/javascript", "Content-Encoding": "gzip", "ETag": `"js"`}, body: string(gz)})
	w := p.do("GET", "/app.js", map[string]string{"Accept-Encoding": "gzip, br"})
	if w.Header().Get("Content-Encoding") != "gzip" || !bytes.Equal(w.Body.Bytes(), gz) {
		t.Fatalf("a client that accepts gzip gets the stored gzip body as is; got %q", w.Header().Get("Content-Encoding"))
	}
	for _, ae := range []string{"br", "identity", ""} {
		w = p.do("GET", "/app.js", map[string]string{"Accept-Encoding": ae})
		if w.Header().Get("Content-Encoding") != "" || w.Body.String() != body || w.Header().Get("Etag") != `"js-identity"` {
			t.Fatalf("AE %q: Content-Encoding %q ETag %q; want the decoded body", ae, w.Header().Get("Content-Encoding"), w.Header().Get("Etag"))
		}
	}
	if n := p.origin.calls.Load(); n != 1 {
		t.Errorf("origin requests: %d, want 1", n)
	}
}

func TestCompressionRefusesDecompressionBombs(t *testing.T) {
	p := newTestProxy(t, func(c *Config) { withCompression(c); c.Compression.MaxDecodedBytes = 1 << 20 })
	zeros := make([]byte, 16<<20)
	bomb, _ := p.h.cfg.Compression.Codec.Encode(coding.Gzip, zeros)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/plain", "Content-Encoding": "gzip"}, body: string(bomb)})
	if w := p.do("GET", "/bomb", map[string]string{"Accept-Encoding": "gzip"}); w.Code != 200 || w.Body.Len() != len(bomb) {
		t.Fatalf("a gzip client gets the gzip body: %d, %d bytes", w.Code, w.Body.Len())
	}
	if w := p.do("GET", "/bomb", nil); w.Code != http.StatusBadGateway {
		t.Fatalf("decoding 16 MiB past a 1 MiB limit: %d, want 502", w.Code)
	}
	// Uncached, streamed: the connection is cut instead (headers are out).
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "no-store", "Content-Type": "text/plain", "Content-Encoding": "gzip"}, body: string(bomb)})
	srv := httptest.NewServer(p.h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/bomb-stream") // Go's client sends no Accept-Encoding it would not decode itself
	if err == nil {
		n, rerr := resp.Body.Read(make([]byte, 32<<20))
		resp.Body.Close()
		if rerr == nil && n > 1<<20 {
			t.Errorf("a streamed bomb delivered %d bytes", n)
		}
	}
	if got := testutil.ToFloat64(p.h.metrics.compression.bombs); got < 1 {
		t.Errorf("edge_compression_bombs_total = %v", got)
	}
}

func TestCompressionFormsAreChargedAndPurgedWithTheEntry(t *testing.T) {
	p := newTestProxy(t, withCompression)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: page(50000)})
	p.do("GET", "/f", nil)
	before := p.h.store.Stats().Bytes
	for _, ae := range []string{"br", "zstd", "gzip", "br"} {
		p.do("GET", "/f", map[string]string{"Accept-Encoding": ae})
	}
	after := p.h.store.Stats().Bytes
	if after <= before {
		t.Fatalf("store bytes %d → %d: derived forms are not charged", before, after)
	}
	if p.h.store.Remove(p.h.store.KeysWithPrefix("")[0]) != 1 {
		t.Fatal("remove")
	}
	if b := p.h.store.Stats().Bytes; b != 0 {
		t.Errorf("store bytes after removing the only entry: %d, want 0", b)
	}
	// Eviction: a store too small for an entry and its forms evicts
	// others, never exceeds the budget.
	small := NewStore(200<<10, 4)
	q := New(p.h.cfg, small, p.h.fetcher, p.h.metrics, nil)
	for i := range 20 {
		for _, ae := range []string{"br", "gzip", "zstd"} {
			w := httptest.NewRecorder()
			q.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/p"+strconv.Itoa(i), nil))
			w = httptest.NewRecorder()
			r := httptest.NewRequest("GET", "http://example.com/p"+strconv.Itoa(i), nil)
			r.Header.Set("Accept-Encoding", ae)
			q.ServeHTTP(w, r)
			q.Wait()
			if st := small.Stats(); st.Bytes > small.Budget() {
				t.Fatalf("store at %d bytes over its %d budget", st.Bytes, small.Budget())
			}
		}
	}
}

func TestCompressionStreamsMissesAndPasses(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(200000)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: body})
	w := p.do("GET", "/miss", map[string]string{"Accept-Encoding": "zstd"})
	if w.Header().Get("Content-Encoding") != "zstd" || decoded(t, w) != body {
		t.Fatalf("a streamed miss: Content-Encoding %q", w.Header().Get("Content-Encoding"))
	}
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "no-store", "Content-Type": "application/json", "ETag": `"d"`}, body: body})
	w = p.do("GET", "/dynamic", map[string]string{"Accept-Encoding": "gzip"})
	if w.Header().Get("Content-Encoding") != "gzip" || decoded(t, w) != body || w.Header().Get("Etag") != `W/"d-gzip6"` {
		t.Fatalf("a pass: Content-Encoding %q ETag %q", w.Header().Get("Content-Encoding"), w.Header().Get("Etag"))
	}
	w = p.do("HEAD", "/dynamic", map[string]string{"Accept-Encoding": "gzip"})
	if w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("Content-Length") != "" || w.Body.Len() != 0 {
		t.Errorf("HEAD of a pass: %q %q", w.Header().Get("Content-Encoding"), w.Header().Get("Content-Length"))
	}
}

// TestCompressionNeverLeaksAcrossUsers tries to make a derived form carry
// one user's response to another: per-user fields of the response that
// filled the entry, variants selected by Cookie, and responses to requests
// with credentials.
func TestCompressionNeverLeaksAcrossUsers(t *testing.T) {
	p := newTestProxy(t, func(c *Config) { withCompression(c); c.Policy.StoreSetCookie = true })
	var mu sync.Mutex
	calls := 0
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		user := r.Header.Get("Cookie")
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/cookie":
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Set-Cookie", "session="+user)
			_, _ = w.Write([]byte(page(4000)))
		case "/vary":
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "Cookie")
			_, _ = w.Write([]byte("<p>hello " + user + "</p>" + page(4000)))
		case "/auth":
			w.Header().Set("Cache-Control", "max-age=60") // no public: a shared cache must not store it
			_, _ = w.Write([]byte("<p>account of " + r.Header.Get("Authorization") + "</p>" + page(4000)))
		}
	})
	for _, ae := range []string{"br", "gzip", "zstd", ""} {
		w := p.do("GET", "/cookie", map[string]string{"Accept-Encoding": ae, "Cookie": "alice"})
		if sc := w.Header().Get("Set-Cookie"); sc != "" && sc != "session=alice" {
			t.Fatalf("alice got %q", sc)
		}
		w = p.do("GET", "/cookie", map[string]string{"Accept-Encoding": ae, "Cookie": "bob"})
		if sc := w.Header().Get("Set-Cookie"); sc != "" {
			t.Fatalf("AE %q: bob got Set-Cookie %q from a stored or derived form", ae, sc)
		}
	}
	for _, ae := range []string{"br", "gzip", "zstd", ""} {
		for _, user := range []string{"alice", "bob", "carol"} {
			w := p.do("GET", "/vary", map[string]string{"Accept-Encoding": ae, "Cookie": user})
			if got := decoded(t, w); !strings.HasPrefix(got, "<p>hello "+user+"</p>") {
				t.Fatalf("AE %q: %s got %.30q", ae, user, got)
			}
		}
		for _, user := range []string{"alice", "bob"} {
			w := p.do("GET", "/auth", map[string]string{"Accept-Encoding": ae, "Authorization": "Bearer " + user})
			if got := decoded(t, w); !strings.HasPrefix(got, "<p>account of Bearer "+user+"</p>") {
				t.Fatalf("AE %q: %s got %.40q", ae, user, got)
			}
		}
	}
}

// TestCompressionCrowdCompressesOnce sends a crowd of requests for one
// page while its fill is under way: the leader encodes its stream, the
// collapsed requests are encoded live at the stream level while the live
// encoders last and get identity past them (the CPU is busy: no client
// queues behind compression), and the stored form is made once, in the
// background, for the requests after them.
func TestCompressionCrowdCompressesOnce(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(100000)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: body})
	p.origin.delay = 200 * time.Millisecond
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest("GET", "http://example.com/crowd", nil)
			req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
			w := httptest.NewRecorder()
			p.h.ServeHTTP(w, req)
			if ce := w.Header().Get("Content-Encoding"); (ce != "br" && ce != "zstd" && ce != "") || decoded(t, w) != body {
				t.Errorf("a request of the crowd got %q", ce)
			}
		}()
	}
	wg.Wait()
	p.h.Wait()
	if n := p.origin.calls.Load(); n != 1 {
		t.Errorf("origin requests: %d", n)
	}
	if live := testutil.ToFloat64(p.h.metrics.compression.in[opStream][coding.Br]); live > float64(20*len(body)) {
		t.Errorf("live encodings took %.0f bytes for a %d-byte page: more than one per request", live, len(body))
	}
	// Requests that read along the fill are encoded live; one that came
	// after the body was whole asked for the form. One more request makes
	// sure it is asked for; the next gets it.
	p.do("GET", "/crowd", map[string]string{"Accept-Encoding": "br"})
	if in := testutil.ToFloat64(p.h.metrics.compression.in[opEncode][coding.Br]); in != float64(len(body)) {
		t.Errorf("stored forms encoded %.0f bytes for a %d-byte page: want one form", in, len(body))
	}
	w := p.do("GET", "/crowd", map[string]string{"Accept-Encoding": "br"})
	if w.Header().Get("Content-Encoding") != "br" || w.Header().Get("Content-Length") == "" {
		t.Errorf("after the crowd: Content-Encoding %q, Content-Length %q; want the stored br form", w.Header().Get("Content-Encoding"), w.Header().Get("Content-Length"))
	}
}

// TestCompressionNeverServesALargerForm: a stored body that does not
// compress (random bytes labelled text) is served as identity to clients
// that accept a coding, with Vary: Accept-Encoding kept, and the useless
// form is neither stored nor charged. (The miss that fetched it, and the
// first hit in each coding while the form is made, were encoded as they
// were written, before the size could be judged: the coders store
// incompressible blocks raw, a few bytes larger.)
func TestCompressionNeverServesALargerForm(t *testing.T) {
	p := newTestProxy(t, withCompression)
	rnd := make([]byte, 20000)
	_, _ = cryptorand.Read(rnd)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/plain"}, body: string(rnd)})
	p.do("GET", "/random", nil) // the miss, stored as identity
	for _, ae := range []string{"zstd", "br", "gzip", "zstd", "br, gzip"} {
		p.do("GET", "/random", map[string]string{"Accept-Encoding": ae}) // encoded live; the form is judged after it
		w := p.do("GET", "/random", map[string]string{"Accept-Encoding": ae})
		if w.Code != 200 || w.Header().Get("Content-Encoding") != "" || w.Body.Len() != len(rnd) {
			t.Fatalf("AE %q: %d, Content-Encoding %q, %d bytes; want identity, %d bytes", ae, w.Code, w.Header().Get("Content-Encoding"), w.Body.Len(), len(rnd))
		}
		if !strings.Contains(strings.Join(w.Header().Values("Vary"), ","), "Accept-Encoding") {
			t.Fatalf("AE %q: Vary %q lost Accept-Encoding", ae, w.Header().Values("Vary"))
		}
	}
	if st := p.h.store.Stats(); st.Bytes > int64(len(rnd))+8<<10 {
		t.Fatalf("the store holds %d bytes for a %d-byte body: a larger form was kept", st.Bytes, len(rnd))
	}
}

// TestCompressionUnderCPUPressureServesIdentity: with every live encoder
// busy, a hit whose stored form is not made yet goes in identity at once
// (no client queues behind compression), Vary kept; the form is still made
// in the background, and answers the next request. With every form worker
// busy too, the form is deferred to a later hit, which then makes it.
func TestCompressionUnderCPUPressureServesIdentity(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(50000)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: body})
	p.do("GET", "/busy", nil) // the miss, in identity
	for range cap(p.h.liveSlots) {
		p.h.liveSlots <- struct{}{} // every live encoder busy
	}
	for range cap(p.h.formSlots) {
		p.h.formSlots <- struct{}{} // every form worker busy
	}
	br := map[string]string{"Accept-Encoding": "br"}
	w := p.do("GET", "/busy", br)
	if w.Header().Get("Content-Encoding") != "" || w.Body.String() != body || !containsToken(strings.Join(w.Header()["Vary"], ","), "Accept-Encoding") {
		t.Fatalf("under pressure: Content-Encoding %q, %d bytes, Vary %q; want identity with Vary", w.Header().Get("Content-Encoding"), w.Body.Len(), w.Header()["Vary"])
	}
	if n := testutil.ToFloat64(p.h.metrics.compression.identityNow); n != 1 {
		t.Errorf("edge_compression_identity_while_forming_total %v, want 1", n)
	}
	if n := testutil.ToFloat64(p.h.metrics.compression.formsDeferred); n != 1 {
		t.Errorf("edge_compression_forms_deferred_total %v, want 1", n)
	}
	for range cap(p.h.formSlots) {
		<-p.h.formSlots // the workers are free again
	}
	p.do("GET", "/busy", br) // still identity (no live encoder), but it starts the form
	w = p.do("GET", "/busy", br)
	if w.Header().Get("Content-Encoding") != "br" || w.Header().Get("Content-Length") == "" || decoded(t, w) != body {
		t.Fatalf("after the form was made: Content-Encoding %q, Content-Length %q", w.Header().Get("Content-Encoding"), w.Header().Get("Content-Length"))
	}
	for range cap(p.h.liveSlots) {
		<-p.h.liveSlots
	}
	if b := p.h.Buffered(); b != 0 {
		t.Errorf("Buffered() = %d after the requests, want 0", b)
	}
}
