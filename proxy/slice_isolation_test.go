package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// personalDoc is an origin document of 3 MiB with a Last-Modified (no ETag):
// anonymous requests get the generic bytes, "public"; a request with
// Authorization or a Cookie gets a copy watermarked for its user (same
// length, same Last-Modified) that says only max-age, or private.
func personalDoc(size int, personal func(r *http.Request) (who, cc string, extra http.Header)) http.HandlerFunc {
	lm := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	return func(w http.ResponseWriter, r *http.Request) {
		body := bytes.Repeat([]byte("generic."), size/8)
		cc := "public, max-age=3600"
		who, pcc, extra := personal(r)
		if who != "" {
			body = bytes.Repeat([]byte(who), size/len(who)+1)[:size]
			cc = pcc
			for k, v := range extra {
				w.Header()[k] = v
			}
		}
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("Content-Type", "application/pdf")
		http.ServeContent(w, r, "", lm, bytes.NewReader(body))
	}
}

// slicedProxy is a handler in front of origin that stores responses above
// 1 MiB in slices of 1 MiB.
func slicedProxy(t *testing.T, origin http.HandlerFunc) (*Handler, *atomic.Int64) {
	return handlerProxy(t, origin, func(c *Config) {
		c.SliceBytes = 1 << 20
		c.MaxObjectBytes = 1 << 20
	})
}

// frontAfterFirstRead serves h on a real socket and reads /doc.pdf's first
// 100 bytes anonymously (the manifest and slice 0 stored, generic bytes),
// the start of every slice isolation test.
func frontAfterFirstRead(t *testing.T, h *Handler) *httptest.Server {
	t.Helper()
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	if code, body, _ := getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99"); code != http.StatusPartialContent || !strings.HasPrefix(body, "generic.") {
		t.Fatalf("anonymous first read: %d %.20q", code, body)
	}
	h.Wait()
	return front
}

func getWith(t *testing.T, base, path string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	code, body, h, err := tryGetWith(base, path, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return code, body, h
}

// tryGetWith is getWith for goroutines other than the test's.
func tryGetWith(base, path string, hdr ...string) (int, string, http.Header, error) {
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		return 0, "", nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// TestSliceFetchedForOneUserIsNotStoredForEveryone: a sliced object's
// missing slice is fetched with the current requester's Authorization (or
// Cookie); an answer a whole response could not be stored from (RFC 9111
// §3.5: max-age without public under credentials; Set-Cookie; a Vary the
// object has not) is that user's alone, never stored under the URL's
// slice key for the next user.
func TestSliceFetchedForOneUserIsNotStoredForEveryone(t *testing.T) {
	const size = 3 << 20
	cases := []struct {
		name string
		hdr  []string
		// the origin's answer to a request with the credential
		personal func(r *http.Request) (string, string, http.Header)
	}{
		{"authorization-max-age", []string{"Authorization", "Bearer alice"}, func(r *http.Request) (string, string, http.Header) {
			if r.Header.Get("Authorization") == "" {
				return "", "", nil
			}
			return "ALICE-SECRET.", "max-age=3600", nil
		}},
		{"cookie-set-cookie", []string{"Cookie", "session=alice"}, func(r *http.Request) (string, string, http.Header) {
			if r.Header.Get("Cookie") == "" {
				return "", "", nil
			}
			return "ALICE-SECRET.", "max-age=3600", http.Header{"Set-Cookie": {"session=alice"}}
		}},
		{"vary-x-user", []string{"X-User", "alice"}, func(r *http.Request) (string, string, http.Header) {
			if r.Header.Get("X-User") == "" {
				return "", "", nil
			}
			return "ALICE-SECRET.", "max-age=3600", http.Header{"Vary": {"X-User"}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := slicedProxy(t, personalDoc(size, tc.personal))
			front := httptest.NewServer(h)
			defer front.Close()
			// 1. An anonymous reader opens the document: the first slice
			// is probed, the manifest (public) stored.
			code, body, _ := getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99")
			if code != http.StatusPartialContent || !strings.HasPrefix(body, "generic.") {
				t.Fatalf("anonymous first read: %d %q", code, body[:min(len(body), 40)])
			}
			h.Wait()
			// 2. Alice reads a later part with her credential.
			rng := "bytes=" + strconv.Itoa(1<<20) + "-" + strconv.Itoa(1<<20+99)
			code, body, ahdr := getWith(t, front.URL, "/doc.pdf", append([]string{"Range", rng}, tc.hdr...)...)
			t.Logf("alice: %d %q %q", code, body[:min(len(body), 26)], ahdr.Get("Cache-Status"))
			h.Wait()
			// 3. Bob, anonymous, reads the same part.
			code, body, hdr := getWith(t, front.URL, "/doc.pdf", "Range", rng)
			t.Logf("bob: %d %q %q", code, body[:min(len(body), 26)], hdr.Get("Cache-Status"))
			if strings.Contains(body, "ALICE") {
				t.Fatalf("bob (no credential) got alice's bytes: %d %q Cache-Status %q", code, body[:min(len(body), 40)], hdr.Get("Cache-Status"))
			}
		})
	}
}

// TestConcurrentSliceFetchDoesNotShareAPrivateAnswer: concurrent readers of
// the same missing slice share one fetch (h.slices.Do, keyed by the slice
// key alone); the fetch is made as the shared object's, without the first
// reader's credentials, so what a reader with credentials starts is the
// generic copy for everyone, and no slice request carries them.
func TestConcurrentSliceFetchDoesNotShareAPrivateAnswer(t *testing.T) {
	const size = 3 << 20
	var withCredentials atomic.Int64
	h, _ := slicedProxy(t, personalDoc(size, func(r *http.Request) (string, string, http.Header) {
		if r.Header.Get("Authorization") == "" {
			time.Sleep(200 * time.Millisecond) // a slow origin: readers meet on one fetch
			return "", "", nil
		}
		if r.Header.Get("Range") != "" {
			withCredentials.Add(1)
		}
		return "ALICE-SECRET.", "private, no-store", nil
	}))
	front := frontAfterFirstRead(t, h)
	rng := "bytes=" + strconv.Itoa(2<<20) + "-" + strconv.Itoa(2<<20+99)
	done := make(chan string, 1)
	go func() {
		_, body, _, err := tryGetWith(front.URL, "/doc.pdf", "Range", rng, "Authorization", "Bearer alice")
		if err != nil {
			body = "error: " + err.Error()
		}
		done <- body
	}()
	time.Sleep(50 * time.Millisecond) // Alice's slice fetch is under way
	code, body, hdr := getWith(t, front.URL, "/doc.pdf", "Range", rng)
	alice := <-done
	if strings.Contains(body, "ALICE") || strings.Contains(alice, "ALICE") {
		t.Fatalf("a private copy reached a sliced response: bob %d %q (Cache-Status %q), alice %q", code, body[:min(len(body), 40)], hdr.Get("Cache-Status"), alice[:min(len(alice), 40)])
	}
	if n := withCredentials.Load(); n != 0 {
		t.Errorf("%d slice requests carried the reader's credentials", n)
	}
}
