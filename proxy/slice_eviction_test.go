package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// blockingOrigin: a public, rangeable 3 MiB object; requests the origin's
// WAF or rate limiter refuses (User-Agent "evilbot": 403) and, for
// authOnly, requests without a valid session (401).
func blockingOrigin(size int, authOnly bool) http.HandlerFunc {
	body := bytes.Repeat([]byte("generic."), size/8)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") == "evilbot" {
			http.Error(w, "blocked", http.StatusForbidden)
			return
		}
		if authOnly && r.Header.Get("Cookie") != "s=alice" {
			http.Error(w, "login", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}
}

// TestARefusedSliceAfterTheHeaderKeepsTheObject: a client whose own
// forwarded fields make the origin refuse it (a WAF on its User-Agent, a
// rate limit on its X-Forwarded-For) reads a stored sliced object whole:
// slice 0 is stored, the header goes out, slice 1 is fetched with its
// fields and refused. Its response is cut (right), and the object, manifest
// and every stored slice, was removed for everyone: one request per
// re-fill emptied the cache of any sliced object. Now the object stays.
func TestARefusedSliceAfterTheHeaderKeepsTheObject(t *testing.T) {
	const size = 3 << 20
	h, calls := slicedProxy(t, blockingOrigin(size, false))
	front := httptest.NewServer(h)
	defer front.Close()
	if code, _, _ := getWith(t, front.URL, "/v.mp4", "Range", "bytes=0-99"); code != 206 {
		t.Fatalf("first read %d", code)
	}
	h.Wait()
	before := calls.Load()
	if code, _, hdr := getWith(t, front.URL, "/v.mp4", "Range", "bytes=0-99"); code != 206 || calls.Load() != before {
		t.Fatalf("second read not a hit: %d %q", code, hdr.Get("Cache-Status"))
	}
	for i := range 1 {
		code, body, _, err := tryGetWith(front.URL, "/v.mp4", "User-Agent", "evilbot")
		t.Logf("attacker %d: %d, %d bytes, err %v", i, code, len(body), err)
	}
	h.Wait()
	mid := calls.Load()
	code, body, hdr := getWith(t, front.URL, "/v.mp4", "Range", "bytes=0-99")
	if code != 206 || !strings.HasPrefix(body, "generic.") {
		t.Fatalf("victim: %d", code)
	}
	if calls.Load() != mid {
		t.Fatalf("a victim's read of slice 0 (stored, fresh) went to the origin after an attacker's refused slice (Cache-Status %q): the object was evicted for everyone", hdr.Get("Cache-Status"))
	}
}

// TestBadCredentialsDoNotEvictACredentialsOnlyObject: the same through the
// credentialed retry: an object the origin serves only to a valid session
// (401 otherwise, public to a valid one). Alice's Range read stores the
// manifest and slice 0; Mallory with an expired cookie reads it whole: the
// header goes out from slice 0, slice 1 is refused anonymously and then
// with her cookie: errSliceRefused after the header removed the object.
// Now Mallory is cut and the object stays.
func TestBadCredentialsDoNotEvictACredentialsOnlyObject(t *testing.T) {
	const size = 3 << 20
	h, calls := slicedProxy(t, blockingOrigin(size, true))
	front := httptest.NewServer(h)
	defer front.Close()
	if code, _, _ := getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99", "Cookie", "s=alice"); code != 206 {
		t.Fatalf("alice's read %d", code)
	}
	h.Wait()
	code, body, _, err := tryGetWith(front.URL, "/doc.pdf", "Cookie", "s=expired")
	t.Logf("mallory: %d, %d bytes, err %v", code, len(body), err)
	h.Wait()
	mid := calls.Load()
	rng := "bytes=0-99"
	code, _, hdr := getWith(t, front.URL, "/doc.pdf", "Range", rng, "Cookie", "s=alice")
	if code != 206 || calls.Load() != mid {
		t.Fatalf("alice's read of stored slice 0 after mallory's expired cookie: %d, origin requests +%d, Cache-Status %q: the object was evicted by a request with bad credentials", code, calls.Load()-mid, hdr.Get("Cache-Status"))
	}
}

// TestRefusedReadersDoNotMakeTheObjectAPass: after the eviction, the same
// client's next request is a plain miss the origin refuses (403, no
// freshness): a reason about the URL, so the URL is passed by for
// cache.pass_ttl for every client without a cookie. Two requests turned a
// fresh, stored sliced object into a pass for everyone.
func TestRefusedReadersDoNotMakeTheObjectAPass(t *testing.T) {
	const size = 3 << 20
	h, calls := slicedProxy(t, blockingOrigin(size, false))
	front := httptest.NewServer(h)
	defer front.Close()
	getWith(t, front.URL, "/v.mp4", "Range", "bytes=0-99")
	h.Wait()
	for range 2 {
		tryGetWith(front.URL, "/v.mp4", "User-Agent", "evilbot")
		h.Wait()
	}
	for i := range 3 {
		before := calls.Load()
		code, _, hdr := getWith(t, front.URL, "/v.mp4", "Range", "bytes=0-99")
		if calls.Load() != before {
			t.Errorf("victim %d: %d, Cache-Status %q: went to the origin for a slice stored fresh before two requests of another client", i, code, hdr.Get("Cache-Status"))
		}
	}
}
