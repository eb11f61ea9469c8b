package demosite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/edgecache/edge/internal/ranking"
)

// Config configures the demo origin.
type Config struct {
	Latency time.Duration // added before every response, like a distant origin
	Jitter  time.Duration // uniform extra latency in [0, Jitter)
}

// Site is a deterministic synthetic web site with one page family per
// caching case. Every body is a pure function of the URL, so tests and load
// tools can check what they receive. It counts requests per path so tests
// can see how many reached the origin.
type Site struct {
	cfg     Config
	started time.Time // Last-Modified of the dated pages
	filler  []byte
	mu      sync.Mutex
	hits    map[string]int
	// byRemote counts requests per client address and path: a lab with
	// each cache on its own address learns which cache asked for what.
	byRemote map[string]map[string]int
	remoteN  int
	total    atomic.Int64
	sent     atomic.Int64 // body bytes written
	ranges   atomic.Int64 // Range requests answered with 206
	router   chi.Router
}

// fillerSize bounds the largest body the page families generate from the
// shared filler; larger objects repeat it.
const fillerSize = 4 << 20

// New returns the demo site.
func New(cfg Config) *Site {
	d := &Site{cfg: cfg, started: time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second), hits: make(map[string]int), byRemote: map[string]map[string]int{}}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz      \n"
	d.filler = make([]byte, fillerSize)
	for i := range d.filler {
		d.filler[i] = alphabet[rng.IntN(len(alphabet))]
	}
	r := chi.NewRouter()
	// GetHead: a HEAD is answered as its GET (without the body), as an
	// origin does; without it chi took HEAD to the 404 below (a new user's
	// `curl -I` read 404 for a page a GET found).
	r.Use(d.count, d.delay, middleware.GetHead)
	r.Get("/", d.index)
	r.Get("/p/{n}", d.page)
	r.Get("/size/{bytes}", d.size)
	r.Get("/cache/{case}/{id}", d.cacheCase)
	r.Get("/vary/{id}", d.vary)
	r.Get("/redirect/{n}", d.redirect)
	r.Get("/large/{mib}", d.large)
	r.Get("/status/{code}/{id}", d.status)
	r.Get("/_stats", d.stats)
	r.NotFound(d.notFound)
	r.MethodNotAllowed(d.notFound) // a GET of a path only POST matches is a 404, not a 405
	r.MethodFunc(http.MethodPost, "/*", d.post)
	r.MethodFunc(http.MethodPut, "/*", d.post)
	r.MethodFunc(http.MethodDelete, "/*", d.post)
	d.router = r
	return d
}

// ServeHTTP implements http.Handler.
func (d *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.router.ServeHTTP(w, r) }

// Requests returns how many requests reached path (with its query).
func (d *Site) Requests(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits[path]
}

// Total returns the number of requests served.
func (d *Site) Total() int64 { return d.total.Load() }

func (d *Site) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_stats" {
			d.total.Add(1)
			d.mu.Lock()
			if len(d.hits) < 1_000_000 { // bounded: a load test must not grow it forever
				d.hits[r.URL.RequestURI()]++
			}
			if d.remoteN < 1_000_000 {
				host, _, _ := net.SplitHostPort(r.RemoteAddr)
				m := d.byRemote[host]
				if m == nil {
					m = map[string]int{}
					d.byRemote[host] = m
				}
				if _, ok := m[r.URL.RequestURI()]; !ok {
					d.remoteN++
				}
				m[r.URL.RequestURI()]++
			}
			d.mu.Unlock()
		}
		if r.URL.Path == "/_stats" || r.Method == http.MethodHead {
			// A HEAD's body is swallowed by net/http (it still reports
			// the bytes written): nothing is sent to count.
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&countingWriter{ResponseWriter: w, n: &d.sent}, r)
	})
}

// countingWriter counts the body bytes a response writes.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (d *Site) delay(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lat := d.cfg.Latency
		if d.cfg.Jitter > 0 {
			lat += rand.N(d.cfg.Jitter)
		}
		if lat > 0 && r.URL.Path != "/_stats" {
			select {
			case <-time.After(lat):
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// PageSize is the body size of /p/{n}: a mix like a real site's — half
// small HTML/JSON, a third mid-size assets, a few images and rare big files.
func PageSize(n uint64) int {
	h := xxhash.Sum64String(strconv.FormatUint(n, 10))
	r := h % 100
	x := int(h >> 32)
	switch {
	case r < 50:
		return 1024 + x%(7*1024) // 1–8 KiB
	case r < 85:
		return 8*1024 + x%(24*1024) // 8–32 KiB
	case r < 97:
		return 32*1024 + x%(224*1024) // 32–256 KiB
	default:
		return 256*1024 + x%(1792*1024) // 256 KiB – 2 MiB
	}
}

// body returns size deterministic bytes for seed.
func (d *Site) body(seed uint64, size int) []byte {
	out := make([]byte, size)
	_, _ = d.bodyAt(seed).ReadAt(out, 0)
	return out
}

// bodyAt is body(seed, n) for any n, read where asked without making
// the rest: a Range request for one slice of a large object costs the
// slice, not the object (64 × 64 MiB made for a sliced 64 MiB object
// took a race-built origin over a minute).
func (d *Site) bodyAt(seed uint64) io.ReaderAt {
	return filledAt{filler: d.filler, off: int64(seed % uint64(fillerSize/2))}
}

// filledAt reads the filler from off, repeated without end.
type filledAt struct {
	filler []byte
	off    int64
}

func (f filledAt) ReadAt(p []byte, pos int64) (int, error) {
	if pos < 0 {
		return 0, errors.New("demosite: negative offset")
	}
	at := (f.off + pos) % int64(len(f.filler))
	for n := 0; n < len(p); at = 0 {
		n += copy(p[n:], f.filler[at:])
	}
	return len(p), nil
}

func (d *Site) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=10")
	fmt.Fprint(w, `<!doctype html><title>edge demo origin</title><h1>edge demo origin</h1><ul>
<li><a href="/p/1">/p/{n}</a> — any integer n: deterministic page, size mix by n, max-age=60, ETag
<li><a href="/size/4096">/size/{bytes}</a> — exactly that many bytes, max-age=3600
<li>/cache/{case}/{id} — case: max-age, s-maxage, no-cache, no-store, private, etag, last-modified, set-cookie, swr, sie, expires, short
<li><a href="/vary/1">/vary/{id}</a> — Vary: Accept-Language
<li><a href="/redirect/1">/redirect/{n}</a> — 301 to /p/{n}
<li><a href="/large/16">/large/{mib}</a> — a large object
<li>/status/{code}/{id} — that status, max-age=30
<li>anything else — 404 with max-age=30
</ul>`)
}

// writeBody answers with body, honouring If-None-Match against etag, and
// Range with If-Range.
func writeBody(w http.ResponseWriter, r *http.Request, etag string, body []byte) {
	if etag != "" {
		w.Header().Set("ETag", etag)
		if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	if etag != "" && r.Header.Get("Range") != "" {
		// Range and If-Range as a static file server answers them (an
		// edge cluster resumes a peer answer that broke this way).
		if _, ok := w.Header()["Content-Type"]; !ok {
			w.Header()["Content-Type"] = nil // never sniffed
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func etagMatches(inm, etag string) bool {
	for part := range strings.SplitSeq(inm, ",") {
		part = strings.TrimPrefix(strings.TrimSpace(part), "W/")
		if part == "*" || part == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

func (d *Site) page(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseUint(chi.URLParam(r, "n"), 10, 64)
	if err != nil {
		d.notFound(w, r)
		return
	}
	size := PageSize(n)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=60")
	writeBody(w, r, fmt.Sprintf(`"p-%d-%d"`, n, size), d.body(n, size))
}

func (d *Site) size(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(chi.URLParam(r, "bytes"))
	if err != nil || n < 0 || n > 64<<20 {
		d.notFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeBody(w, r, fmt.Sprintf(`"s-%d"`, n), d.body(uint64(n), n))
}

// cacheCase serves one page per caching rule.
func (d *Site) cacheCase(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	seed := xxhash.Sum64String(id)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	etag := ""
	switch chi.URLParam(r, "case") {
	case "max-age":
		h.Set("Cache-Control", "max-age=60")
	case "short":
		h.Set("Cache-Control", "max-age=1")
		etag = fmt.Sprintf(`"short-%s"`, id)
	case "s-maxage":
		h.Set("Cache-Control", "max-age=0, s-maxage=60")
	case "no-cache":
		h.Set("Cache-Control", "no-cache")
		etag = fmt.Sprintf(`"nc-%s"`, id)
	case "no-store":
		h.Set("Cache-Control", "no-store")
	case "private":
		h.Set("Cache-Control", "private, max-age=60")
	case "etag":
		h.Set("Cache-Control", "max-age=0")
		etag = fmt.Sprintf(`"e-%s"`, id)
	case "last-modified":
		// No Cache-Control: heuristic freshness from Last-Modified.
		h.Set("Last-Modified", d.started.UTC().Format(http.TimeFormat))
		if ims, err := http.ParseTime(r.Header.Get("If-Modified-Since")); err == nil && !d.started.After(ims) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	case "set-cookie":
		h.Set("Cache-Control", "max-age=60")
		h.Set("Set-Cookie", "session="+id+"; Path=/; HttpOnly")
	case "swr":
		h.Set("Cache-Control", "max-age=1, stale-while-revalidate=60")
		etag = fmt.Sprintf(`"swr-%s"`, id)
	case "sie":
		h.Set("Cache-Control", "max-age=1, stale-if-error=300")
	case "expires":
		h.Set("Expires", time.Now().Add(time.Minute).UTC().Format(http.TimeFormat))
	default:
		d.notFound(w, r)
		return
	}
	writeBody(w, r, etag, d.body(seed, 512+int(seed%2048)))
}

func (d *Site) vary(w http.ResponseWriter, r *http.Request) {
	lang := r.Header.Get("Accept-Language")
	if lang == "" {
		lang = "en"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=60")
	w.Header().Set("Vary", "Accept-Language")
	w.Header().Set("Content-Language", lang)
	writeBody(w, r, "", []byte("hello in "+lang+" for "+chi.URLParam(r, "id")+"\n"))
}

func (d *Site) redirect(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=300")
	http.Redirect(w, r, "/p/"+chi.URLParam(r, "n"), http.StatusMovedPermanently)
}

func (d *Site) large(w http.ResponseWriter, r *http.Request) {
	mib, err := strconv.Atoi(chi.URLParam(r, "mib"))
	if err != nil || mib < 1 || mib > 256 {
		d.notFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Last-Modified", d.started.UTC().Format(http.TimeFormat))
	if r.URL.Query().Get("ranges") != "no" && r.Header.Get("Range") != "" {
		// Large objects answer Range requests (as real media servers do),
		// unless ?ranges=no asks for an origin without range support.
		w.Header().Set("ETag", fmt.Sprintf(`"l-%d"`, mib))
		d.ranges.Add(1)
		http.ServeContent(w, r, "", d.started, io.NewSectionReader(d.bodyAt(uint64(mib)), 0, int64(mib)<<20))
		return
	}
	if r.URL.Query().Get("ranges") != "no" {
		w.Header().Set("Accept-Ranges", "bytes")
	}
	writeBody(w, r, fmt.Sprintf(`"l-%d"`, mib), d.body(uint64(mib), mib<<20))
}

func (d *Site) status(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(chi.URLParam(r, "code"))
	if err != nil || code < 200 || code > 599 {
		d.notFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "max-age=30")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintf(w, "status %d for %s\n", code, chi.URLParam(r, "id"))
}

func (d *Site) notFound(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=30")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, "no page at %s\n", r.URL.Path)
}

func (d *Site) post(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Location", r.URL.Path)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "%s %s accepted\n", r.Method, r.URL.Path)
}

// stats reports request counts as JSON: {"total": N, "paths": {...}} with
// the 100 most requested paths, plus every path named by ?path=.
func (d *Site) stats(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	type kv struct {
		k string
		v int
	}
	all := make([]kv, 0, len(d.hits))
	for k, v := range d.hits {
		all = append(all, kv{k, v})
	}
	d.mu.Unlock()
	ranking.ByCount(all, func(e kv) int { return e.v }, func(e kv) string { return e.k })
	if len(all) > 100 {
		all = all[:100]
	}
	paths := make(map[string]int, len(all))
	for _, e := range all {
		paths[e.k] = e.v
	}
	for _, p := range r.URL.Query()["path"] { // exact counts for named paths, popular or not
		d.mu.Lock()
		paths[p] = d.hits[p]
		d.mu.Unlock()
	}
	out := map[string]any{"total": d.total.Load(), "paths": paths, "bytes_sent": d.sent.Load(), "ranges": d.ranges.Load()}
	if r.URL.Query().Get("by_remote") != "" { // every path, per client address
		by := map[string]map[string]int{}
		d.mu.Lock()
		for host, m := range d.byRemote {
			by[host] = maps.Clone(m)
		}
		d.mu.Unlock()
		out["by_remote"] = by
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

// VerifyPage reports whether an answer for path carries the demo origin's
// content: for /p/{n}, page n's entity tag (weak or with a content-coding
// suffix, as a compressing cache may send it) and a decoded body of page
// n's size. Other paths are not checked. A load test uses it to catch a
// cache that hands one page's response to another request.
func VerifyPage(path string, h http.Header, bodyLen int64) bool {
	rest, ok := strings.CutPrefix(path, "/p/")
	if !ok {
		return true
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return true // not a page: the origin answers 404
	}
	size := PageSize(n)
	tag := strings.TrimPrefix(h.Get("Etag"), "W/")
	want := fmt.Sprintf(`"p-%d-%d`, n, size)
	if !strings.HasPrefix(tag, want) || (len(tag) > len(want) && tag[len(want)] != '"' && tag[len(want)] != '-') {
		return false
	}
	return bodyLen == int64(size)
}
