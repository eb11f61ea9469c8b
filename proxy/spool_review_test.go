package proxy

import (
	"bytes"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/edgecache/edge/coding"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// randChunkReader serves body in random-sized reads, with random short pauses.
type randChunkReader struct {
	body  []byte
	rng   *rand.Rand
	pause bool
}

func (r *randChunkReader) Read(p []byte) (int, error) {
	if len(r.body) == 0 {
		return 0, io.EOF
	}
	if r.pause && r.rng.IntN(50) == 0 {
		time.Sleep(time.Duration(r.rng.IntN(300)) * time.Microsecond)
	}
	k := min(len(p), len(r.body), 1+r.rng.IntN(40<<10))
	n := copy(p, r.body[:k])
	r.body = r.body[n:]
	return n, nil
}

// Many readers of a spilling fill (a trimming fill and a stream's window),
// each at its own random pace, some leaving early: every byte each one
// gets is the body's byte at that offset, a reader that stays gets it
// all, and nothing of the spool or the buffer budget is left behind.
func TestReviewSpoolStressFillReaders(t *testing.T) {
	iters := 24
	if raceDetector {
		iters = 12 // make test's race run: the seeds alternate trimming and spool sizes all the same
	}
	for iter := range iters {
		seed := uint64(iter)
		rng := rand.New(rand.NewPCG(seed, 7))
		p := newTestProxy(t, func(c *Config) { c.SpoolDir, c.SpoolBytes = t.TempDir(), int64(1+rng.IntN(8))<<20 })
		h := p.h
		size := 256<<10 + rng.IntN(3<<20)
		body := patterned(size, iter)
		f := newFill(0, fillWait{})
		f.entry = &Entry{Status: 200, Header: http.Header{}}
		f.spool = h.spool
		if iter%2 == 0 {
			f.trim, f.why, f.window = true, whyTooLarge, spoolWindow
		}
		nr := 1 + rng.IntN(6)
		rds := make([]*fillReader, nr)
		for i := range rds {
			rds[i], _ = f.reader()
		}
		pumpDone := make(chan struct{})
		go func() {
			defer close(pumpDone)
			f.pump(&randChunkReader{body: body, rng: rand.New(rand.NewPCG(seed, 9)), pause: true}, -1, 512<<10, h)
		}()
		var wg sync.WaitGroup
		for i, rd := range rds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer rd.Close()
				r := rand.New(rand.NewPCG(seed, uint64(100+i)))
				leaveAt := -1
				if r.IntN(3) == 0 {
					leaveAt = r.IntN(size)
				}
				slow := r.IntN(2) == 0
				var got []byte
				var prev, prevCopy []byte
				for {
					b, err := rd.next(context.Background(), nil)
					if prev != nil && !bytes.Equal(prev, prevCopy) && !rd.usesBuf(prev) {
						t.Errorf("iter %d reader %d: a memory slice handed out earlier was rewritten", iter, i)
					}
					got = append(got, b...)
					if len(b) > 0 {
						prev, prevCopy = b, append([]byte(nil), b...)
					}
					if !bytes.Equal(got, body[:min(len(got), size)]) || len(got) > size {
						t.Errorf("iter %d reader %d: wrong bytes at or before %d", iter, i, len(got))
						return
					}
					if errors.Is(err, io.EOF) {
						if len(got) != size {
							t.Errorf("iter %d reader %d: EOF after %d of %d bytes", iter, i, len(got), size)
						}
						return
					}
					if err != nil {
						if !errors.Is(err, errReaderTooSlow) {
							t.Errorf("iter %d reader %d: %v", iter, i, err)
						}
						return
					}
					if leaveAt >= 0 && len(got) >= leaveAt {
						return
					}
					if slow {
						time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
					}
				}
			}()
		}
		wg.Wait()
		select {
		case <-pumpDone:
		case <-time.After(30 * time.Second):
			t.Fatalf("iter %d: the pump did not end after every reader left", iter)
		}
		t.Logf("iter %d: size %d readers %d window %d: opened %v full %v", iter, size, nr, f.window, testutil.ToFloat64(h.metrics.spool.opened), testutil.ToFloat64(h.metrics.spool.full))
		if h.spool.used.Load() != 0 || h.spool.files.Load() != 0 {
			t.Errorf("iter %d: spill left: %d bytes %d files", iter, h.spool.used.Load(), h.spool.files.Load())
		}
		if h.Buffered() != 0 {
			t.Errorf("iter %d: %d bytes still charged to the buffer budget", iter, h.Buffered())
		}
	}
}

// usesBuf reports whether b lies in the reader's spill buffer (reused by design).
func (r *fillReader) usesBuf(b []byte) bool {
	if r.buf == nil || len(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&r.buf[0]))
	return p >= lo && p < lo+uintptr(len(r.buf))
}

// reviewOrigin answers /<mode>/<seed>/<size>: mode c = chunked no-store,
// l = Content-Length no-store, p = public too large (chunked), g = gzip
// from the origin (no-store, chunked), q = public with a length.
func reviewOrigin(t *testing.T, tls2 bool) *httptest.Server {
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/")
		if len(parts) != 4 {
			http.Error(w, "bad", 400)
			return
		}
		seed, _ := strconv.Atoi(parts[2])
		size, _ := strconv.Atoi(parts[3])
		body := patterned(size, seed)
		w.Header().Set("Content-Type", "text/html")
		switch parts[1] {
		case "c", "g":
			w.Header().Set("Cache-Control", "no-store")
		case "l":
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Content-Length", strconv.Itoa(size))
		case "p":
			w.Header().Set("Cache-Control", "public, max-age=60")
		case "q":
			w.Header().Set("Cache-Control", "public, max-age=60")
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		if parts[1] == "g" {
			enc, err := codec.Encode(coding.Gzip, body)
			if err != nil {
				panic(err)
			}
			body = enc
			w.Header().Set("Content-Encoding", "gzip")
		}
		if r.Method == http.MethodHead {
			return
		}
		for len(body) > 0 {
			k := min(len(body), 16<<10)
			if _, err := w.Write(body[:k]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			body = body[k:]
		}
	})
	srv := httptest.NewUnstartedServer(h)
	if tls2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// smallBufConn shrinks a connection's socket buffers so that a slow
// client is really behind (loopback buffers hold megabytes).
func smallBufConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
		_ = tc.SetReadBuffer(8 << 10)
	}
}

// Many clients, over HTTP/1.1 and HTTP/2, at random paces, some leaving
// early, with random Accept-Encodings, reading chunked and sized
// uncacheable answers, origin-gzipped ones and too-large cacheable ones
// (coalesced): each body that ends cleanly is byte-exact.
func TestReviewSpoolStressHTTP(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			origin := reviewOrigin(t, false)
			cfg := DefaultConfig()
			cfg.MaxInflight = 64
			cfg.MaxObjectBytes = 256 << 10
			cfg.SpoolDir, cfg.SpoolBytes = t.TempDir(), spoolBytesForReview
			cfg.CoalesceTimeout = 10 * time.Second
			withCompression(&cfg)
			store := NewStore(64<<20, 8)
			f := &originFetcher{base: origin.URL, client: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
			h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
			edge := httptest.NewUnstartedServer(h)
			if !h2 {
				edge.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { smallBufConn(c); return ctx }
			}
			edge.Config.ErrorLog = log.New(io.Discard, "", 0)
			if h2 {
				edge.EnableHTTP2 = true
				edge.StartTLS()
			} else {
				edge.Start()
			}
			defer edge.Close()
			tr := edge.Client().Transport.(*http.Transport).Clone()
			tr.DisableCompression = true
			tr.ForceAttemptHTTP2 = h2
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil && !h2 {
					smallBufConn(c)
				}
				return c, err
			}
			client := &http.Client{Transport: tr}
			codec, _ := coding.NewCodec(coding.DefaultLevels)
			encs := []string{"", "gzip", "br", "zstd", "identity"}
			modes := []string{"c", "l", "p", "g", "q"}
			var wg sync.WaitGroup
			var bad, whole, cut atomic.Int64
			requests := 40
			if raceDetector {
				requests = 24 // every mode and coding still drawn several times
			}
			for i := range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					rng := rand.New(rand.NewPCG(uint64(i), 3))
					var where string
					defer func() {
						if d := time.Since(start); d > 5*time.Second {
							t.Logf("request %d %s took %v (%s)", i, where, d, where)
						}
					}()
					mode := modes[rng.IntN(len(modes))]
					seed := i
					if mode == "p" {
						seed = 1000 // coalesced: the same URL for all of them
					}
					size := 200<<10 + rng.IntN(1<<20)
					if mode == "p" {
						size = 900 << 10
					}
					path := "/" + mode + "/" + strconv.Itoa(seed) + "/" + strconv.Itoa(size)
					where = path
					req, _ := http.NewRequest("GET", edge.URL+path, nil)
					if e := encs[rng.IntN(len(encs))]; e != "" {
						req.Header.Set("Accept-Encoding", e)
					}
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					req = req.WithContext(ctx)
					resp, err := client.Do(req)
					if err != nil {
						t.Errorf("%s: %v", path, err)
						return
					}
					defer resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(resp.Header.Get("Cache-Status"), "buffer-full") {
						cut.Add(1) // the buffer budget is full of encoders (and spooled streams: TestReviewIdleEventStreamsEatTheBufferBudget)
						return
					}
					if resp.StatusCode != 200 {
						msg, _ := io.ReadAll(resp.Body)
						t.Errorf("%s: status %d %q %q (buffered %d of %d)", path, resp.StatusCode, resp.Header.Get("Cache-Status"), msg, h.Buffered(), cfg.MaxBufferedBytes)
						return
					}
					leave := -1
					if rng.IntN(4) == 0 {
						leave = rng.IntN(size)
					}
					slow := rng.IntN(2) == 0
					var got []byte
					buf := make([]byte, 1+rng.IntN(16<<10))
					for {
						n, err := resp.Body.Read(buf)
						got = append(got, buf[:n]...)
						if err == io.EOF {
							break
						}
						if err != nil {
							cut.Add(1)
							return
						}
						if leave >= 0 && len(got) >= leave {
							cancel()
							cut.Add(1)
							return
						}
						if slow {
							time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
						}
					}
					enc, _ := coding.OfBody(resp.Header["Content-Encoding"])
					dec, err := codec.Decode(enc, got, 64<<20)
					if err != nil {
						bad.Add(1)
						t.Errorf("%s (%s): a body that ended cleanly does not decode: %v", path, enc, err)
						return
					}
					if !bytes.Equal(dec, patterned(size, seed)) {
						bad.Add(1)
						t.Errorf("%s (%s, %s): %d bytes, not its own %d", path, enc, resp.Proto, len(dec), size)
						return
					}
					whole.Add(1)
				}()
			}
			t0 := time.Now()
			var peak atomic.Int64
			stopPeak := make(chan struct{})
			go func() {
				for {
					select {
					case <-stopPeak:
						return
					case <-time.After(time.Millisecond):
						if b := h.Buffered(); b > peak.Load() {
							peak.Store(b)
						}
					}
				}
			}()
			wg.Wait()
			close(stopPeak)
			t.Logf("peak buffered %d", peak.Load())
			t.Logf("clients done in %v", time.Since(t0))
			client.CloseIdleConnections()
			h.Wait()
			t.Logf("handler idle in %v", time.Since(t0))
			t.Logf("whole %d, cut %d, bad %d; spills opened %v, full %v", whole.Load(), cut.Load(), bad.Load(),
				testutil.ToFloat64(h.metrics.spool.opened), testutil.ToFloat64(h.metrics.spool.full))
			if h.spool != nil {
				waitUntil(t, "spool empty", func() bool { return h.spool.used.Load() == 0 && h.spool.files.Load() == 0 })
			}
			waitUntil(t, "slots back", func() bool { return h.upstream.inFlight() == 0 })
			waitUntil(t, "buffer budget back", func() bool { return h.Buffered() == 0 })
		})
	}
}

var spoolBytesForReview int64 = 6 << 20

func init() {
	if v := os.Getenv("REVIEW_SPOOL_BYTES"); v != "" {
		n, _ := strconv.ParseInt(v, 10, 64)
		spoolBytesForReview = n
	}
}

// Long-lived, tiny, uncacheable streams (server-sent events, long polls:
// chunked, no-store) now each run through a spooling fill whose 32 KiB
// block is force-charged to limits.max_buffered_bytes for the stream's
// whole life, though nothing is slow and nothing spills. Enough of them
// push the buffer budget past its limit, and from then on no response
// with a length is stored (whyBufferFull) and origin-encoded streams
// that must be decoded get 503. With spilling off the same streams
// charge nothing.
func TestReviewIdleEventStreamsEatTheBufferBudget(t *testing.T) {
	for _, spool := range []int64{0, 256 << 20} {
		t.Run(map[bool]string{true: "spool-on", false: "spool-off"}[spool > 0], func(t *testing.T) {
			release := make(chan struct{})
			page := bytes.Repeat([]byte("x"), 100<<10)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/events" {
					w.Header().Set("Cache-Control", "no-store")
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = w.Write([]byte("data: hello\n\n"))
					w.(http.Flusher).Flush()
					select {
					case <-release:
					case <-r.Context().Done():
					}
					return
				}
				w.Header().Set("Cache-Control", "public, max-age=600")
				w.Header().Set("Content-Length", strconv.Itoa(len(page)))
				_, _ = w.Write(page)
			}))
			defer srv.Close()
			h, _ := spoolProxy(t, srv, spool, func(c *Config) {
				c.MaxInflight = 100
				c.MaxBufferedBytes = 1 << 20
			})
			const streams = 40 // 40 × 32 KiB = 1.25 MiB > 1 MiB
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { _ = recover() }()
					r := httptest.NewRequest("GET", "http://example.com/events", nil).WithContext(ctx)
					h.ServeHTTP(httptest.NewRecorder(), r)
				}()
			}
			waitUntil(t, "every event stream is open", func() bool {
				return h.upstream.inFlight() == streams || (h.spool != nil && h.Buffered() >= streams*blockSize)
			})
			time.Sleep(100 * time.Millisecond)
			t.Logf("buffered with %d idle event streams open: %d of %d", streams, h.Buffered(), h.cfg.MaxBufferedBytes)
			w1 := httptest.NewRecorder()
			h.ServeHTTP(w1, httptest.NewRequest("GET", "http://example.com/page", nil))
			w2 := httptest.NewRecorder()
			h.ServeHTTP(w2, httptest.NewRequest("GET", "http://example.com/page", nil))
			cancel()
			close(release)
			wg.Wait()
			h.Wait()
			if b := h.Buffered(); b != 0 {
				t.Errorf("%d bytes still charged after every stream ended", b)
			}
			if st := w2.Header().Get("Cache-Status"); !strings.Contains(st, "hit") {
				t.Errorf("a cacheable 100 KiB page was not stored while %d idle event streams were open: first %q, second %q (buffered %d of %d)",
					streams, w1.Header().Get("Cache-Status"), st, h.Buffered(), h.cfg.MaxBufferedBytes)
			}
		})
	}
}

// An origin that breaks its body (sized or chunked) after 1 MiB while the
// client is stalled and the body is in the spill: the client must not get
// a clean end (a truncated body presented as whole).
func TestReviewSpilledBrokenBodyIsNotWhole(t *testing.T) {
	for _, sized := range []bool{true, false} {
		t.Run(map[bool]string{true: "sized", false: "chunked"}[sized], func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "no-store")
				if sized {
					w.Header().Set("Content-Length", strconv.Itoa(4<<20))
				}
				body := patterned(1<<20, 1)
				for len(body) > 0 {
					k := min(len(body), 32<<10)
					_, _ = w.Write(body[:k])
					w.(http.Flusher).Flush()
					body = body[k:]
				}
				panic(http.ErrAbortHandler) // the connection drops mid-body
			}))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			defer srv.Close()
			h, _ := spoolProxy(t, srv, 64<<20, nil)
			gate := make(chan struct{})
			edge := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(&gatedWriter{ResponseWriter: w, gate: gate}, r)
			}))
			edge.Config.ErrorLog = log.New(io.Discard, "", 0)
			edge.Start()
			defer edge.Close()
			type result struct {
				n   int
				err error
			}
			res := make(chan result, 1)
			go func() {
				resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Get(edge.URL + "/x")
				if err != nil {
					res <- result{0, err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				res <- result{len(b), err}
			}()
			waitUntil(t, "the body spilled and the origin broke", func() bool {
				return h.spool.files.Load() == 1 && h.upstream.inFlight() == 0
			})
			close(gate)
			r := <-res
			if r.err == nil {
				t.Errorf("the client got a clean end after %d bytes of a body the origin broke", r.n)
			}
		})
	}
}

// gatedWriter holds every body write until gate closes.
type gatedWriter struct {
	http.ResponseWriter
	gate chan struct{}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.gate
	return g.ResponseWriter.Write(p)
}

func (g *gatedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// The spool's promise is that a client that reads nothing of an answer
// the edge does not store no longer holds an upstream slot. stream()
// exempts bodies with a Content-Length up to spoolWindow (64 KiB) on the
// ground that they fit "the socket buffers", but a client that stops
// reading shrinks those buffers to a few KiB: the handler's write blocks
// and the slot stays taken until limits.write_timeout. Most uncacheable
// pages (HTML with a session, API answers) are that small, so the
// starvation the spool was written against still works with them.
func TestReviewStalledClientOfASmallUncacheablePageHoldsTheSlot(t *testing.T) {
	for _, size := range []int{32 << 10, 64 << 10, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "private, no-store")
				if r.URL.Path == "/small" {
					w.Header().Set("Content-Length", "10")
					_, _ = w.Write([]byte("0123456789"))
					return
				}
				w.Header().Set("Content-Length", strconv.Itoa(size))
				_, _ = w.Write(patterned(size, 1))
			}))
			defer srv.Close()
			h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) { c.WriteTimeout = 20 * time.Second })
			edge := httptest.NewUnstartedServer(h)
			ln, err := (&net.ListenConfig{Control: smallBufs}).Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			edge.Listener.Close()
			edge.Listener = ln
			edge.Config.ErrorLog = log.New(io.Discard, "", 0)
			edge.Start()
			defer edge.Close()
			// A client that sends its request and reads nothing (its
			// receive buffer set before it connects, as a phone's is small).
			c, err := (&net.Dialer{Control: smallBufs}).Dial("tcp", edge.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = c.Write([]byte("GET /page HTTP/1.1\r\nHost: example.com\r\n\r\n"))
			time.Sleep(500 * time.Millisecond) // the origin has answered long since
			t.Logf("slots taken while the client stalls: %d", h.upstream.inFlight())
			if code := getStatus(h, "/small"); code != 200 {
				t.Errorf("a %d-byte uncacheable page read by nobody: a miss meanwhile got %d, want 200 (the stalled client holds the only upstream slot)", size, code)
			}
		})
	}
}

// smallBufs sets 4 KiB socket buffers before connect or listen.
func smallBufs(network, address string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = errors.Join(syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096),
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096))
	})
	return errors.Join(err, serr)
}

// A review's: a trimming fill's first spill writes its whole 256 KiB
// window plus the block being filled at once; with limits.spool_bytes at
// or below about 1.1 MiB a quarter could not take that, so too-large
// answers never spilled (the stream's 64 KiB window did), and the metrics
// said a file was opened and filled. A share now holds at least that
// first write and a chunk: a 300 KiB answer too large to store spills
// whole under a 1 MiB spool, and its slot comes back.
func TestReviewSmallSpoolNeverSpillsATrimmingFill(t *testing.T) {
	srv := spoolOrigin(t, "public, max-age=60")
	h, _ := spoolProxy(t, srv, 1<<20, func(c *Config) { c.MaxObjectBytes = 256 << 10 })
	const size = 300 << 10
	c, done := serveStalled(h, "/3/"+strconv.Itoa(size), nil)
	waitUntil(t, "the answer spilled and its slot came back", func() bool { return h.upstream.inFlight() == 0 && h.spool.files.Load() == 1 })
	if full := testutil.ToFloat64(h.metrics.spool.full); full != 0 {
		t.Errorf("the spill filled (%v) under a 1 MiB spool", full)
	}
	close(c.gate)
	<-done
	if !bytes.Equal(c.Body.Bytes(), patterned(size, 3)) {
		t.Errorf("the client got %d bytes, not its %d", c.Body.Len(), size)
	}
}
