package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowWholeDoc serves a 3 MiB object (strong ETag): a whole GET pauses
// halfway through slice 1 (pause is closed when the pause starts, and the
// stream goes on when resume is closed); Range requests answer at once,
// or after rangeDelay.
func slowWholeDoc(size int, paused chan struct{}, resume chan struct{}, rangeDelay time.Duration, ranges *atomic.Int64) http.HandlerFunc {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Range") != "" {
			ranges.Add(1)
			time.Sleep(rangeDelay)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		half := (1 << 20) + (1 << 19)
		w.Write(body[:half])
		w.(http.Flusher).Flush()
		once.Do(func() { close(paused) })
		<-resume
		w.Write(body[half:])
	}
}

// TestStreamAndRangeReadersShareASlice: a whole GET streams slice 1 from
// the leading stream (fromStream, h.slices.Do(skey)) while a Range reader
// needs slice 1 (fetchSlice under the same h.slices key). The two closures
// return different types (*Entry vs fetchedSlice): whoever joins the other
// must still get its bytes.
func TestStreamAndRangeReadersShareASlice(t *testing.T) {
	const size = 3 << 20
	paused, resume := make(chan struct{}), make(chan struct{})
	var ranges atomic.Int64
	h, _ := slicedProxy(t, slowWholeDoc(size, paused, resume, 0, &ranges))
	front := httptest.NewServer(h)
	defer front.Close()
	whole := make(chan error, 1)
	go func() {
		code, body, _, err := tryGetWith(front.URL, "/big.bin")
		if err == nil && (code != 200 || len(body) != size) {
			err = &httpErr{code, len(body)}
		}
		whole <- err
	}()
	<-paused // the leader is inside fromStream for slice 1
	time.Sleep(100 * time.Millisecond)
	got := make(chan string, 1)
	go func() {
		rng := "bytes=" + strconv.Itoa(1<<20+10) + "-" + strconv.Itoa(1<<20+19)
		code, body, _, err := tryGetWith(front.URL, "/big.bin", "Range", rng)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- strconv.Itoa(code) + " " + body
	}()
	time.Sleep(300 * time.Millisecond) // the Range reader joins slice 1's flight
	close(resume)
	rangeAns := <-got
	if err := <-whole; err != nil {
		t.Errorf("whole reader: %v", err)
	}
	want := "206 "
	for i := 1<<20 + 10; i <= 1<<20+19; i++ {
		want += string(rune('a' + i%26))
	}
	if rangeAns != want {
		t.Fatalf("range reader joining the leading stream's slice got %q, want %q", rangeAns, want)
	}
}

type httpErr struct{ code, n int }

func (e *httpErr) Error() string {
	return "status " + strconv.Itoa(e.code) + " len " + strconv.Itoa(e.n)
}

// TestStreamJoinsARangeFetchOfItsSlice: the reverse: a Range reader's slow
// fetch of slice 1 is under way when the leading stream reaches slice 1
// (fromStream joins a fetchSlice flight).
func TestStreamJoinsARangeFetchOfItsSlice(t *testing.T) {
	const size = 3 << 20
	paused, resume := make(chan struct{}), make(chan struct{})
	var ranges atomic.Int64
	h, _ := slicedProxy(t, slowWholeDoc(size, paused, resume, 800*time.Millisecond, &ranges))
	front := httptest.NewServer(h)
	defer front.Close()
	whole := make(chan error, 1)
	go func() {
		code, body, _, err := tryGetWith(front.URL, "/big.bin")
		if err == nil && (code != 200 || len(body) != size) {
			err = &httpErr{code, len(body)}
		}
		whole <- err
	}()
	<-paused
	// Range reader for slice 2 (the stream is still in slice 1): its fetch
	// takes 800 ms; the stream resumes meanwhile and reaches slice 2.
	rng := "bytes=" + strconv.Itoa(2<<20) + "-" + strconv.Itoa(2<<20+9)
	got := make(chan string, 1)
	go func() {
		code, body, _, err := tryGetWith(front.URL, "/big.bin", "Range", rng)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- strconv.Itoa(code) + " " + body
	}()
	time.Sleep(200 * time.Millisecond)
	close(resume)
	if err := <-whole; err != nil {
		t.Errorf("whole reader (its stream joined a Range fetch of the same slice): %v", err)
	}
	if a := <-got; !strings.HasPrefix(a, "206 ") {
		t.Errorf("range reader: %q", a)
	}
}

// TestAnonymousReaderIsNotFailedByACredentialedOne: an origin that refuses
// Alice's expired token. Her read of a sliced object's missing slice asks
// for the slice without it (it is a piece of the shared object), and Bob,
// anonymous, reading the same slice meanwhile, gets the generic bytes, not
// her failure; no slice request carries her token.
func TestAnonymousReaderIsNotFailedByACredentialedOne(t *testing.T) {
	const size = 3 << 20
	var aliceAt sync.Once
	atOrigin := make(chan struct{})
	h, _ := slicedProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			aliceAt.Do(func() { close(atOrigin) })
			time.Sleep(400 * time.Millisecond)
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		personalDoc(size, func(*http.Request) (string, string, http.Header) { return "", "", nil })(w, r)
	})
	front := frontAfterFirstRead(t, h)
	rng := "bytes=" + strconv.Itoa(2<<20) + "-" + strconv.Itoa(2<<20+99)
	done := make(chan int, 1)
	go func() {
		code, _, _, _ := tryGetWith(front.URL, "/doc.pdf", "Range", rng, "Authorization", "Bearer expired")
		done <- code
	}()
	select {
	case <-atOrigin:
		t.Error("a slice request carried the reader's credentials")
	case <-time.After(50 * time.Millisecond):
	}
	code, body, hdr := getWith(t, front.URL, "/doc.pdf", "Range", rng)
	t.Logf("alice: %d", <-done)
	if code != http.StatusPartialContent || !strings.HasPrefix(body, "generic.") {
		t.Fatalf("bob (anonymous) joined alice's refused fetch and got %d %q Cache-Status %q; want 206 generic bytes", code, body[:min(len(body), 40)], hdr.Get("Cache-Status"))
	}
}

// TestSliceBytesMatchTheManifestsHeader: Alice's personal slice
// (the origin said private) is served to Alice under the manifest's header,
// which says public, max-age=3600: any shared cache downstream (a peer
// relaying, a CDN in front) may store her bytes for everyone.
func TestSliceBytesMatchTheManifestsHeader(t *testing.T) {
	const size = 3 << 20
	h, _ := slicedProxy(t, personalDoc(size, func(r *http.Request) (string, string, http.Header) {
		if r.Header.Get("Authorization") == "" {
			return "", "", nil
		}
		return "ALICE-SECRET.", "private, max-age=60", nil
	}))
	front := frontAfterFirstRead(t, h)
	rng := "bytes=" + strconv.Itoa(1<<20) + "-" + strconv.Itoa(1<<20+99)
	code, body, hdr := getWith(t, front.URL, "/doc.pdf", "Range", rng, "Authorization", "Bearer alice")
	t.Logf("alice: %d %q Cache-Control %q Cache-Status %q", code, body[:min(len(body), 26)], hdr.Get("Cache-Control"), hdr.Get("Cache-Status"))
	if strings.Contains(body, "ALICE") && !strings.Contains(hdr.Get("Cache-Control"), "private") && !strings.Contains(hdr.Get("Cache-Control"), "no-store") {
		t.Fatalf("alice's private bytes went out with Cache-Control %q (the manifest's): a shared cache downstream stores them for everyone", hdr.Get("Cache-Control"))
	}
}

// TestAnonymousReadersShareOneSliceFetch: concurrent anonymous readers of one
// missing slice cost the origin one Range request.
func TestAnonymousReadersShareOneSliceFetch(t *testing.T) {
	const size = 3 << 20
	var ranges atomic.Int64
	h, _ := slicedProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" && r.Header.Get("Range") != "bytes=0-1048575" {
			ranges.Add(1)
			time.Sleep(300 * time.Millisecond)
		}
		personalDoc(size, func(*http.Request) (string, string, http.Header) { return "", "", nil })(w, r)
	})
	front := httptest.NewServer(h)
	defer front.Close()
	getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99")
	h.Wait()
	rng := "bytes=" + strconv.Itoa(2<<20) + "-" + strconv.Itoa(2<<20+99)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, _, err := tryGetWith(front.URL, "/doc.pdf", "Range", rng, "Cookie", "")
			if err != nil || code != 206 || !strings.HasPrefix(body, "generic.") {
				t.Errorf("reader: %d %v", code, err)
			}
		}()
	}
	wg.Wait()
	if n := ranges.Load(); n != 1 {
		t.Fatalf("8 concurrent anonymous readers of slice 2 cost %d Range requests, want 1", n)
	}
}

// TestAPersonalETagDoesNotEvictTheObject: the origin gives a
// credentialed user a copy with an ETag of its own. Her slice fetch is
// refused as another version (errChanged, no leak), but dropSliced then
// removes the manifest and every stored slice: any user with a cookie
// empties the cache of the object for everyone, at will.
func TestAPersonalETagDoesNotEvictTheObject(t *testing.T) {
	const size = 3 << 20
	generic := bytes.Repeat([]byte("generic."), size/8)
	h, calls := slicedProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/pdf")
		if r.Header.Get("Cookie") != "" {
			w.Header().Set("ETag", `"alice-v1"`)
		} else {
			w.Header().Set("ETag", `"v1"`)
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(generic))
	})
	front := httptest.NewServer(h)
	defer front.Close()
	getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99")
	h.Wait()
	getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99") // a hit
	rng := "bytes=" + strconv.Itoa(2<<20) + "-" + strconv.Itoa(2<<20+99)
	code, _, ahdr := getWith(t, front.URL, "/doc.pdf", "Range", rng, "Cookie", "session=alice")
	t.Logf("alice: %d %q", code, ahdr.Get("Cache-Status"))
	h.Wait()
	mid := calls.Load()
	code, _, hdr := getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99")
	if code != http.StatusPartialContent || calls.Load() != mid {
		t.Fatalf("bob's read of slice 0 (stored before alice came): %d, origin requests %d→%d, Cache-Status %q: alice's personal ETag evicted the object for everyone", code, mid, calls.Load(), hdr.Get("Cache-Status"))
	}
}

// TestCookieHeuristicSliceIsNotShared: a slice fetched with a cookie
// whose answer is fresh only heuristically (Last-Modified, no
// Cache-Control) is not stored for others.
func TestCookieHeuristicSliceIsNotShared(t *testing.T) {
	const size = 3 << 20
	h, _ := slicedProxy(t, personalDoc(size, func(r *http.Request) (string, string, http.Header) {
		if r.Header.Get("Cookie") == "" {
			return "", "", nil
		}
		return "ALICE-SECRET.", "", nil
	}))
	front := httptest.NewServer(h)
	defer front.Close()
	getWith(t, front.URL, "/doc.pdf", "Range", "bytes=0-99")
	h.Wait()
	rng := "bytes=" + strconv.Itoa(1<<20) + "-" + strconv.Itoa(1<<20+99)
	getWith(t, front.URL, "/doc.pdf", "Range", rng, "Cookie", "session=alice")
	h.Wait()
	code, body, hdr := getWith(t, front.URL, "/doc.pdf", "Range", rng)
	if strings.Contains(body, "ALICE") {
		t.Fatalf("bob got alice's heuristic slice: %d %q", code, hdr.Get("Cache-Status"))
	}
}
