package proxy

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// s29Node is one life of a node: a handler, its store and a disk tier on
// dir, in front of an origin served by fn.
func s29Node(t *testing.T, dir string, fn http.HandlerFunc, mod func(*Config)) (*Handler, *atomic.Int64, *disk.Tier) {
	t.Helper()
	h, calls := handlerProxy(t, fn, mod)
	tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20, KeyScheme: CacheKeyVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1, DiskOnlyBytes: 1})
	return h, calls, tier
}

// s29Crash copies dir as a SIGKILL would leave it (no snapshot: the
// running tier has not closed) and returns the copy.
func s29Crash(t *testing.T, tier *disk.Tier, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		if fi.Name() == "lock" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// s29Serve is serve with an https request when tlsOn.
func s29Serve(h *Handler, target string, tlsOn bool, hdr ...string) *httptest.ResponseRecorder {
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	r := httptest.NewRequest("GET", scheme+"://example.com"+target, nil)
	if tlsOn {
		r.TLS = &tls.ConnectionState{}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	h.Wait()
	return w
}

// After a crash, every variant read back from disk goes to the requests
// that select it and to no other: Vary (Accept-Language), http against
// https, the gzip and identity forms of one page; a variant never stored
// goes to the origin.
func TestS29DiskVariantsSchemesAndFormsStayApartAfterACrash(t *testing.T) {
	life := "1"
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Vary", "Accept-Language")
		proto := r.Header.Get("X-Forwarded-Proto")
		_, _ = io.WriteString(w, "life "+life+" lang="+r.Header.Get("Accept-Language")+" proto="+proto+" "+strings.Repeat("padding ", 64))
	}
	dir := t.TempDir()
	keyScheme := func(c *Config) { c.KeyScheme = true } // cache.key_scheme: http and https apart
	h, calls, tier := s29Node(t, dir, origin, keyScheme)
	for _, tl := range []bool{false, true} {
		for _, lang := range []string{"en", "fr"} {
			if w := s29Serve(h, "/page", tl, "Accept-Language", lang); w.Code != 200 {
				t.Fatalf("fill: %d", w.Code)
			}
		}
	}
	if calls.Load() != 4 {
		t.Fatalf("fills: %d origin calls, want 4", calls.Load())
	}
	crashed := s29Crash(t, tier, dir)

	life = "2"
	h2, calls2, _ := s29Node(t, crashed, origin, keyScheme)
	for _, tl := range []bool{false, true} {
		proto := "http"
		if tl {
			proto = "https"
		}
		for _, lang := range []string{"en", "fr"} {
			want := "life 1 lang=" + lang + " proto=" + proto + " "
			w := s29Serve(h2, "/page", tl, "Accept-Language", lang, "Accept-Encoding", "identity")
			if !strings.HasPrefix(w.Body.String(), want) {
				t.Fatalf("%s %s after the crash: %.60q, want %q", proto, lang, w.Body.String(), want)
			}
			gz := s29Serve(h2, "/page", tl, "Accept-Language", lang, "Accept-Encoding", "gzip")
			body := gz.Body.String()
			if gz.Header().Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(zr)
				body = string(b)
			}
			if !strings.HasPrefix(body, want) {
				t.Fatalf("%s %s gzip after the crash: %.60q, want %q", proto, lang, body, want)
			}
		}
		if w := s29Serve(h2, "/page", tl, "Accept-Language", "de"); !strings.HasPrefix(w.Body.String(), "life 2 lang=de proto="+proto) {
			t.Fatalf("%s de (never stored): %.60q", proto, w.Body.String())
		}
	}
	if calls2.Load() != 2 {
		t.Fatalf("after the crash the origin was asked %d times, want 2 (de, over each scheme)", calls2.Load())
	}
}

// A purged page (hard or soft), and pages that may not be shared
// (private, no-store, Set-Cookie), are not served from disk after a crash
// right after the purge returned.
func TestS29DiskPurgedAndPrivateStayGoneAfterACrash(t *testing.T) {
	var life atomic.Int64
	life.Store(1)
	origin := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/private":
			w.Header().Set("Cache-Control", "private, max-age=600")
		case "/no-store":
			w.Header().Set("Cache-Control", "no-store")
		case "/cookie":
			w.Header().Set("Cache-Control", "public, max-age=600")
			w.Header().Set("Set-Cookie", "session=alice")
		default:
			w.Header().Set("Cache-Control", "public, max-age=600")
			w.Header().Set("ETag", `"e`+string(rune('0'+life.Load()))+`"`)
		}
		_, _ = io.WriteString(w, "life "+string(rune('0'+life.Load()))+" "+r.URL.Path)
	}
	dir := t.TempDir()
	h, _, tier := s29Node(t, dir, origin, nil)
	paths := []string{"/hard", "/soft", "/kept", "/private", "/no-store", "/cookie"}
	for _, p := range paths {
		s29Serve(h, p, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/hard"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/soft", Soft: true}); err != nil {
		t.Fatal(err)
	}
	crashed := s29Crash(t, tier, dir)

	life.Store(2)
	h2, calls2, _ := s29Node(t, crashed, origin, nil)
	for _, p := range paths {
		w := s29Serve(h2, p, false)
		got := w.Body.String()
		switch p {
		case "/kept":
			if got != "life 1 /kept" {
				t.Fatalf("/kept after the crash: %q", got)
			}
		default:
			if got != "life 2 "+p {
				t.Fatalf("%s after the crash: %q (Cache-Status %q)", p, got, w.Header().Get("Cache-Status"))
			}
		}
	}
	if calls2.Load() != int64(len(paths)-1) {
		t.Fatalf("origin calls after the crash: %d, want %d", calls2.Load(), len(paths)-1)
	}
}

// A review found (now mended: proxy.credentialFields, key version 4): a response that varies on Cookie (or Authorization) is stored
// per value, and its variant key, which holds the requester's raw Cookie
// (or bearer token), is written in clear to the record file and to the
// index snapshot. The project hashes the values of keyed fields precisely
// "so a credential in a custom field never reaches the disk"
// (docs/operations.md; TestKeyedValuesNeverReachTheDisk), but the most
// common credentials, selected through Vary, reach it verbatim and
// outlive the session on a disk that is not purged with it. Steps: origin
// answers `Cache-Control: public, max-age=60` with `Vary: Cookie,
// Authorization`; alice requests with `Cookie: session=alice-sess-4242`
// and `Authorization: Bearer alice-tok-777`; the write is flushed and the
// tier closed (snapshot). Expected: neither value appears in any file
// under the tier's directory (a digest, as for keyed fields).
func TestS29DiskVaryCredentialsReachTheDiskInClear(t *testing.T) {
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("Vary", "Cookie, Authorization")
		_, _ = io.WriteString(w, "page for someone")
	}
	dir := t.TempDir()
	h, _, tier := s29Node(t, dir, origin, nil)
	s29Serve(h, "/account", false, "Cookie", "session=alice-sess-4242", "Authorization", "Bearer alice-tok-777")
	s29FlushAndClose(t, tier)
	for _, secret := range []string{"alice-sess-4242", "alice-tok-777"} {
		if where := s30admFilesHolding(t, dir, secret); len(where) > 0 {
			t.Errorf("%q written in clear to %v", secret, where)
		}
	}
}

// s29FlushAndClose writes out the one response a test stored and closes
// the tier (its snapshot written).
func s29FlushAndClose(t *testing.T, tier *disk.Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if tier.Stats().Writes != 1 {
		t.Fatalf("the response was not written to disk (%+v)", tier.Stats())
	}
	if err := tier.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
