package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// bodyEchoOrigin answers every request with the SHA-256 and length of the body
// it got, uncacheable, and counts the requests.
func bodyEchoOrigin(t *testing.T) (*httptest.Server, *sync.Map) {
	var seen sync.Map // path → body length the origin got
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		seen.Store(r.URL.Path, len(b))
		sum := sha256.Sum256(b)
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, hex.EncodeToString(sum[:])+" "+strconv.Itoa(len(b)))
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func echoOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]) + " " + strconv.Itoa(len(b))
}

// upload serves a POST of body at path with the given declared length
// (-1: unknown), read from rd, and returns the recorder when the handler
// is done.
func upload(h *Handler, path string, length int64, rd io.Reader) chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		r := httptest.NewRequest("POST", "http://example.com"+path, rd)
		r.ContentLength = length
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		done <- w
	}()
	return done
}

// A client that uploads slowly held one of the upstream slots for as long
// as its body took (limits.body_timeout + its size at
// limits.min_body_rate), so that a few such clients turned every miss into
// a 503. A body is now read before a slot is taken, whether its length is
// known or not: the miss gets its slot, and the upload, once whole,
// reaches the origin byte-exact. With limits.request_buffering off every
// body streams, holding its slot (the control).
func TestASlowUploadHoldsNoUpstreamSlot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		known  bool
		holds  bool
		how    string
		budget int64
		off    bool // limits.request_buffering false
	}{
		{"small, in memory", 10 << 10, true, false, bodyInMemory, 0, false},
		{"large, on disk", 300 << 10, true, false, bodyOnDisk, 0, false},
		{"unknown length, small, in memory", 10 << 10, false, false, bodyInMemory, 0, false},
		{"unknown length, large, on disk", 300 << 10, false, false, bodyOnDisk, 0, false},
		{"unknown length, several steps of its share, on disk", 3<<20 + 5, false, false, bodyOnDisk, 0, false},
		{"unknown length, over its share of the buffer budget, on disk", 10 << 10, false, false, bodyOnDisk, 4 << 10, false},
		{"unknown length, request buffering off, streamed", 10 << 10, false, true, bodyStreamed, 0, true},
		{"over its share of the buffer budget, on disk", 10 << 10, true, false, bodyOnDisk, 4 << 10, false},
		{"known length, request buffering off, streamed", 10 << 10, true, true, bodyStreamed, 0, true},
		{"large, request buffering off, streamed", 300 << 10, true, true, bodyStreamed, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := bodyEchoOrigin(t)
			h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) {
				if tc.budget > 0 {
					c.MaxBufferedBytes = tc.budget
				}
				c.RequestBuffering = !tc.off
			})
			body := patterned(tc.size, 3)
			pr, pw := io.Pipe()
			length := int64(tc.size)
			if !tc.known {
				length = -1
			}
			done := upload(h, "/up", length, pr)
			_, _ = pw.Write(body[:100]) // then the client stalls
			if tc.holds {
				waitUntil(t, "the streamed upload to take its slot", func() bool { return h.upstream.inFlight() == 1 })
			}
			code := getStatus(h, "/miss")
			if want := map[bool]int{false: 200, true: http.StatusServiceUnavailable}[tc.holds]; code != want {
				t.Errorf("a miss while the upload stalls: %d, want %d", code, want)
			}
			_, _ = pw.Write(body[100:])
			_ = pw.Close()
			w := <-done
			if w.Code != 200 || w.Body.String() != echoOf(body) {
				t.Errorf("the upload: %d %q, want the origin to have got its %d bytes whole", w.Code, w.Body.String(), tc.size)
			}
			h.Wait()
			if n := testutil.ToFloat64(h.metrics.requestBodies[tc.how]); n != 1 {
				t.Errorf(`edge_request_bodies_total{how=%q} = %v, want 1`, tc.how, n)
			}
			if held, used := h.buffered.Load(), h.spool.used.Load(); held != 0 || used != 0 || h.spool.files.Load() != 0 {
				t.Errorf("after the upload: %d buffered bytes, %d spooled in %d files; want none", held, used, h.spool.files.Load())
			}
		})
	}
}

// A body cut short before its declared length is answered 400 and never
// reaches the origin.
func TestAnUploadCutShortNeverReachesTheOrigin(t *testing.T) {
	for _, size := range []int{1000, 300 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			srv, seen := bodyEchoOrigin(t)
			h, _ := spoolProxy(t, srv, 64<<20, nil)
			w := <-upload(h, "/cut", int64(size), bytes.NewReader(patterned(size/2, 1)))
			if w.Code != http.StatusBadRequest {
				t.Errorf("an upload cut short: %d, want 400", w.Code)
			}
			if _, ok := seen.Load("/cut"); ok {
				t.Error("the origin got a request whose body was cut short")
			}
			h.Wait()
			if held, used := h.buffered.Load(), h.spool.used.Load(); held != 0 || used != 0 || h.upstream.inFlight() != 0 {
				t.Errorf("after: %d buffered, %d spooled, %d slots", held, used, h.upstream.inFlight())
			}
		})
	}
}

// Concurrent uploads of every kind each reach the origin as their own
// bytes (no upload is sent with another's body), and one the spool cannot
// take whole goes on from the client after what it holds.
func TestUploadsStayWithTheirRequests(t *testing.T) {
	srv, _ := bodyEchoOrigin(t)
	h, _ := spoolProxy(t, srv, 4<<20, func(c *Config) { c.MaxInflight = 64 })
	sizes := []int{1, 100, 64 << 10, 64<<10 + 1, 200 << 10, 900 << 10}
	var wg sync.WaitGroup
	for i := range 48 {
		wg.Go(func() {
			size := sizes[i%len(sizes)]
			body := patterned(size, i)
			w := <-upload(h, "/u/"+strconv.Itoa(i), int64(size), bytes.NewReader(body))
			if w.Code != 200 || w.Body.String() != echoOf(body) {
				t.Errorf("upload %d (%d bytes): %d %q, want its own body whole", i, size, w.Code, w.Body.String())
			}
		})
	}
	wg.Wait()
	h.Wait()
	t.Logf("bodies: memory %v, disk %v, streamed %v; spool full %v", testutil.ToFloat64(h.metrics.requestBodies[bodyInMemory]),
		testutil.ToFloat64(h.metrics.requestBodies[bodyOnDisk]), testutil.ToFloat64(h.metrics.requestBodies[bodyStreamed]), testutil.ToFloat64(h.metrics.spool.full))
	if held, used, files := h.buffered.Load(), h.spool.used.Load(), h.spool.files.Load(); held != 0 || used != 0 || files != 0 {
		t.Errorf("after: %d buffered, %d spooled in %d files", held, used, files)
	}
}

// A spill that runs out of budget part way sends what it holds, then the
// rest from the client.
func TestAnUploadTheSpoolCannotTakeWholeGoesOnFromTheClient(t *testing.T) {
	srv, _ := bodyEchoOrigin(t)
	h, _ := spoolProxy(t, srv, 4<<20, nil)
	// Other spills hold all but 100 KiB of the spool: less than the
	// upload, which is within its share.
	others := h.spool.budget - 100<<10
	h.spool.used.Add(others)
	defer h.spool.used.Add(-others)
	body := patterned(300<<10, 9)
	w := <-upload(h, "/partial", int64(len(body)), bytes.NewReader(body))
	if w.Code != 200 || w.Body.String() != echoOf(body) {
		t.Errorf("an upload the spool filled on: %d %q", w.Code, w.Body.String())
	}
	if n := testutil.ToFloat64(h.metrics.spool.full); n != 1 {
		t.Errorf("edge_spool_full_total = %v, want 1", n)
	}
	h.Wait()
	if used, files := h.spool.used.Load()-others, h.spool.files.Load(); used != 0 || files != 0 {
		t.Errorf("after: %d spooled in %d files", used, files)
	}
}

// A body of unknown length read whole goes to the origin with the length
// it turned out to have, in place of the chunked coding it came in (the
// origin sees a Content-Length, as behind nginx); one past
// limits.max_body_bytes is answered 413, and one cut short 400, neither
// reaching the origin, and nothing stays held.
func TestAnUploadOfUnknownLengthGoesWithItsLength(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // path → Content-Length, Transfer-Encoding
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = r.Header.Get("Content-Length") + "|" + strings.Join(r.TransferEncoding, ",") + "|" + strconv.Itoa(len(b))
		mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, echoOf(b))
	}))
	t.Cleanup(srv.Close)
	h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	for _, size := range []int{0, 1, 64 << 10, 64<<10 + 1, 900 << 10} {
		path := "/len/" + strconv.Itoa(size)
		body := patterned(size, size)
		w := <-upload(h, path, -1, iotest.HalfReader(bytes.NewReader(body)))
		if w.Code != 200 || w.Body.String() != echoOf(body) {
			t.Errorf("%d bytes of unknown length: %d %q", size, w.Code, w.Body.String())
		}
		mu.Lock()
		seen := got[path]
		mu.Unlock()
		if want := strconv.Itoa(size) + "||" + strconv.Itoa(size); seen != want && (size != 0 || seen != "||0") {
			t.Errorf("%d bytes of unknown length reached the origin as Content-Length|Transfer-Encoding|bytes %q, want %q", size, seen, want)
		}
	}
	w := <-upload(h, "/too-large", -1, bytes.NewReader(patterned(1<<20+1, 1)))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of unknown length past max_body_bytes: %d, want 413", w.Code)
	}
	for _, size := range []int{1000, 300 << 10} {
		path := "/cut/" + strconv.Itoa(size)
		w := <-upload(h, path, -1, io.MultiReader(bytes.NewReader(patterned(size, 2)), iotest.ErrReader(io.ErrUnexpectedEOF)))
		if w.Code != http.StatusBadRequest {
			t.Errorf("a body of unknown length cut short after %d bytes: %d, want 400", size, w.Code)
		}
	}
	mu.Lock()
	for _, p := range []string{"/too-large", "/cut/1000", "/cut/307200"} {
		if _, ok := got[p]; ok {
			t.Errorf("the origin got %s", p)
		}
	}
	mu.Unlock()
	h.Wait()
	if held, used, files, mem, disk := h.buffered.Load(), h.spool.used.Load(), h.spool.files.Load(), h.uploadMem.Load(), h.uploadDisk.Load(); held|used|files|mem|disk != 0 {
		t.Errorf("after: %d buffered, %d spooled in %d files, shares %d and %d", held, used, files, mem, disk)
	}
}

// A body of unknown length that outgrows what the spool lets it take goes
// on from the client after what was read, whole and in order.
func TestAnUploadOfUnknownLengthTheSpoolCannotTakeWholeGoesOnFromTheClient(t *testing.T) {
	srv, _ := bodyEchoOrigin(t)
	h, _ := spoolProxy(t, srv, 4<<20, nil)
	for _, size := range []int{3 << 20, 9 << 20} { // past its share of the spool, past the spool
		body := patterned(size, 5)
		w := <-upload(h, "/big/"+strconv.Itoa(size), -1, bytes.NewReader(body))
		if w.Code != 200 || w.Body.String() != echoOf(body) {
			t.Errorf("%d bytes of unknown length past the spool's share: %d %q", size, w.Code, w.Body.String())
		}
	}
	if n := testutil.ToFloat64(h.metrics.requestBodies[bodyStreamed]); n != 2 {
		t.Errorf(`edge_request_bodies_total{how="streamed"} = %v, want 2`, n)
	}
	h.Wait()
	if held, used, files, mem, disk := h.buffered.Load(), h.spool.used.Load(), h.spool.files.Load(), h.uploadMem.Load(), h.uploadDisk.Load(); held|used|files|mem|disk != 0 {
		t.Errorf("after: %d buffered, %d spooled in %d files, shares %d and %d", held, used, files, mem, disk)
	}
}

// A reader may give a body's last bytes together with io.EOF (net/http's
// does, at the declared length): such a body is whole, not cut short.
func TestAnUploadWhoseLastBytesComeWithEOFIsWhole(t *testing.T) {
	srv, _ := bodyEchoOrigin(t)
	h, _ := spoolProxy(t, srv, 64<<20, nil)
	for _, size := range []int{1000, 300 << 10} {
		for _, length := range []int64{int64(size), -1} {
			body := patterned(size, 4)
			w := <-upload(h, "/eof", length, iotest.DataErrReader(bytes.NewReader(body)))
			if w.Code != 200 || w.Body.String() != echoOf(body) {
				t.Errorf("%d bytes (declared %d) ending with io.EOF: %d %q", size, length, w.Code, w.Body.String())
			}
		}
	}
}

// lastBytesWithError gives its bytes in one read, with err beside them:
// how HTTP/3's body ends a stream that sent more than it declared
// (quic-go returns the declared bytes and the stream's error together).
type lastBytesWithError struct {
	b   []byte
	err error
}

func (r *lastBytesWithError) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, r.err
	}
	return n, nil
}

// A body whose last bytes come with an error is not whole: it is refused,
// and never reaches the origin (RFC 9114 §4.1.2: a malformed request is
// not forwarded). io.ReadFull, used for small bodies, dropped the error
// (a review found HTTP/3 POSTs that sent more than their Content-Length
// forwarded while their client saw the stream fail, and retried).
func TestABodyWhoseLastBytesComeWithAnErrorIsRefused(t *testing.T) {
	srv, seen := bodyEchoOrigin(t)
	h, _ := spoolProxy(t, srv, 64<<20, nil)
	for _, size := range []int{5, 1000, 300 << 10} {
		path := "/malformed/" + strconv.Itoa(size)
		rd := &lastBytesWithError{b: patterned(size, 5), err: errors.New("H3_MESSAGE_ERROR: more than declared")}
		w := <-upload(h, path, int64(size), rd)
		if w.Code != http.StatusBadRequest {
			t.Errorf("%d bytes, then an error: %d, want 400", size, w.Code)
		}
		if _, ok := seen.Load(path); ok {
			t.Errorf("%d bytes, then an error: the origin got the request", size)
		}
	}
	h.Wait()
	if held, used := h.buffered.Load(), h.spool.used.Load(); held != 0 || used != 0 || h.upstream.inFlight() != 0 {
		t.Errorf("after: %d buffered, %d spooled, %d slots", held, used, h.upstream.inFlight())
	}
}

func TestFullBody(t *testing.T) {
	other := errors.New("stream reset")
	for _, tc := range []struct {
		want, n int
		err     error
		out     error
	}{
		{5, 5, nil, nil},
		{5, 5, io.EOF, nil},
		{5, 5, fmt.Errorf("wrapped: %w", io.EOF), nil},
		{5, 3, io.EOF, io.ErrUnexpectedEOF},
		{5, 0, io.EOF, io.ErrUnexpectedEOF},
		{5, 5, other, other},
		{5, 2, other, other},
	} {
		if got := fullBody(tc.want, tc.n, tc.err); !errors.Is(got, tc.out) || (tc.out == nil) != (got == nil) {
			t.Errorf("fullBody(%d, %d, %v) = %v, want %v", tc.want, tc.n, tc.err, got, tc.out)
		}
	}
}
