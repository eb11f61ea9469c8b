package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// authOnlyDoc: an origin that answers only credentialed requests (401
// otherwise), and says public, max-age=3600 (RFC 9111 §3.5: a shared cache
// may store it and serve it to anyone); the same bytes for everyone.
func authOnlyDoc(size int) http.HandlerFunc {
	body := bytes.Repeat([]byte("generic."), size/8)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && r.Header.Get("Cookie") == "" {
			http.Error(w, "login", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "application/pdf")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}
}

// TestFullReadOfACredentialsOnlyObjectIsNotCut: a cookie user's Range read
// stores the manifest and slice 0 (the probe); the same user's full GET
// starts from the stored slice 0, sends the 200 header, and needs slice 1,
// which the origin refuses without her cookie. Asked again with it, the
// answer says public: it is a piece of the shared object, and the read is
// whole (it was cut, on every read, while slices went only without
// credentials).
func TestFullReadOfACredentialsOnlyObjectIsNotCut(t *testing.T) {
	const size = 3 << 20
	h, calls := slicedProxy(t, authOnlyDoc(size))
	front := httptest.NewServer(h)
	defer front.Close()
	if code, _, _ := getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99", "Cookie", "s=alice"); code != 206 {
		t.Fatalf("range read: %d", code)
	}
	h.Wait()
	for i := range 3 {
		before := calls.Load()
		code, body, hdr, err := tryGetWith(front.URL, "/doc.pdf", "Cookie", "s=alice")
		t.Logf("full read %d: code %d, %d bytes, err %v, Cache-Status %q, origin requests %d", i, code, len(body), err, hdr.Get("Cache-Status"), calls.Load()-before)
		if err != nil || code != 200 || len(body) != size {
			t.Errorf("full read %d by the credentialed user of a public object: code %d, %d of %d bytes, err %v", i, code, len(body), size, err)
		}
	}
}

// TestAbandonedStreamThenFullReadWithAuthorization: the same with
// Authorization: alice's first full read is abandoned after the header
// (slices 1–2 never stored); her next full read is whole.
func TestAbandonedStreamThenFullReadWithAuthorization(t *testing.T) {
	const size = 3 << 20
	h, _ := slicedProxy(t, authOnlyDoc(size))
	front := httptest.NewServer(h)
	defer front.Close()
	req, _ := http.NewRequest("GET", front.URL+"/doc.pdf", nil)
	req.Header.Set("Authorization", "Bearer alice")
	tr := &http.Transport{DisableCompression: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 100)
	resp.Body.Close()
	tr.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	h.Wait()
	code, body, hdr, err := tryGetWith(front.URL, "/doc.pdf", "Authorization", "Bearer alice")
	t.Logf("second read: %d, %d bytes, err %v, Cache-Status %q", code, len(body), err, hdr.Get("Cache-Status"))
	if err != nil || code != 200 || len(body) != size || !strings.HasPrefix(body, "generic.") {
		t.Fatalf("alice's second full read: code %d, %d of %d bytes, err %v", code, len(body), size, err)
	}
}

// TestStreamFallbackNeverSendsAnUnsharedSlice: fromStream's fallback (the
// leading stream joined a Range fetch of its slice whose answer may not be
// shared) fetches its own slice; an answer that may not be shared either
// is never sent under the manifest's public header (the response is cut).
func TestStreamFallbackNeverSendsAnUnsharedSlice(t *testing.T) {
	const size = 3 << 20
	paused, resume := make(chan struct{}), make(chan struct{})
	generic := make([]byte, size)
	for i := range generic {
		generic[i] = byte('a' + i%26)
	}
	var once sync.Once
	h, _ := slicedProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Range") != "" {
			time.Sleep(800 * time.Millisecond)
			if u := r.Header.Get("X-User"); u != "" {
				w.Header().Set("Cache-Control", "private, max-age=60")
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(bytes.Repeat([]byte(strings.ToUpper(u)+"-"), size/len(u)+1)[:size]))
				return
			}
			w.Header().Set("Cache-Control", "public, max-age=3600")
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(generic))
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		half := (1 << 20) + (1 << 19)
		w.Write(generic[:half])
		w.(http.Flusher).Flush()
		once.Do(func() { close(paused) })
		<-resume
		w.Write(generic[half:])
	})
	front := httptest.NewServer(h)
	defer front.Close()
	type ans struct {
		code int
		body string
		hdr  http.Header
		err  error
	}
	whole := make(chan ans, 1)
	go func() {
		c, b, hd, err := tryGetWith(front.URL, "/big.bin", "X-User", "alice")
		whole <- ans{c, b, hd, err}
	}()
	<-paused
	rng := "bytes=" + strconv.Itoa(2<<20) + "-" + strconv.Itoa(2<<20+9)
	bob := make(chan ans, 1)
	go func() {
		c, b, hd, err := tryGetWith(front.URL, "/big.bin", "Range", rng, "X-User", "bob")
		bob <- ans{c, b, hd, err}
	}()
	time.Sleep(200 * time.Millisecond)
	close(resume)
	a := <-whole
	b := <-bob
	t.Logf("bob: %d %q cc %q", b.code, b.body, b.hdr.Get("Cache-Control"))
	t.Logf("alice: %d len %d err %v cc %q status %q", a.code, len(a.body), a.err, a.hdr.Get("Cache-Control"), a.hdr.Get("Cache-Status"))
	if len(a.body) > 2<<20+20 && strings.Contains(a.body[2<<20:2<<20+20], "ALICE") && !strings.Contains(a.hdr.Get("Cache-Control"), "private") {
		t.Fatalf("alice's private slice (%q) went out under Cache-Control %q", a.body[2<<20:2<<20+20], a.hdr.Get("Cache-Control"))
	}
}
