package h2server

import (
	"bytes"
	"io"
	"math/rand"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/edgecache/edge/hitpath"
)

// A chaotic client: hits (inline and window-blocked), handler responses
// with bodies and trailers, uploads, client resets at random moments,
// SETTINGS_INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE changes mid-stream,
// window updates, pings. Run under -race; afterwards every goroutine the
// server started must be gone.
func TestReviewChaosRace(t *testing.T) {
	var panics atomic.Int64
	body := bytes.Repeat([]byte("z"), 200<<10)
	srv := &Server{WriteTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second,
		Hits: &rvAnswerer{body: body}, Fields: hitpath.NewFields(hitpath.Config{}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if p := recover(); p != nil {
					panics.Add(1)
					panic(p)
				}
			}()
			switch r.URL.Path {
			case "/up":
				n, _ := io.Copy(io.Discard, r.Body)
				w.Header().Set("Trailer", "X-N")
				io.WriteString(w, "ok")
				w.Header().Set("X-N", strconv.FormatInt(n, 10))
			case "/slow":
				for i := 0; i < 20; i++ {
					if _, err := w.Write(body[:8<<10]); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					time.Sleep(time.Millisecond)
				}
			default:
				w.Write(body[:rand.Intn(len(body))])
			}
		})}
	addr := rvServer(t, srv)
	before := runtime.NumGoroutine()
	deadline := time.Now().Add(3 * time.Second)
	for conn := 0; time.Now().Before(deadline); conn++ {
		c := rvDial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(rand.Intn(70000))})
		rng := rand.New(rand.NewSource(int64(conn)))
		go func() { // drain frames
			for range c.frames {
			}
		}()
		id := uint32(1)
		for i := 0; i < 200; i++ {
			switch op := rng.Intn(10); op {
			case 0, 1:
				c.headers(id, true, rvGet("/hit")...) // a hit (Hits answers everything GET)
				id += 2
			case 2:
				f := rvGet("/slow")
				f = append(f, "authorization", "x") // handler path
				c.headers(id, true, f...)
				id += 2
			case 3:
				c.headers(id, false, rvPost("/up")...)
				c.data(id, rng.Intn(2) == 0, make([]byte, rng.Intn(40000)))
				id += 2
			case 4:
				if id > 1 {
					victim := uint32(rng.Intn(int(id/2)))*2 + 1
					c.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(victim, http2.ErrCodeCancel) })
				}
			case 5:
				c.do(func(fr *http2.Framer) error {
					return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(rng.Intn(100000))},
						http2.Setting{ID: http2.SettingMaxFrameSize, Val: uint32(16384 + rng.Intn(100000))})
				})
			case 6, 7:
				if id > 1 {
					s := uint32(rng.Intn(int(id/2)))*2 + 1
					c.do(func(fr *http2.Framer) error {
						_ = fr.WriteWindowUpdate(0, uint32(1+rng.Intn(200000)))
						return fr.WriteWindowUpdate(s, uint32(1+rng.Intn(200000)))
					})
				}
			case 8:
				c.do(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) })
			case 9:
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(50 * time.Millisecond)
		c.nc.Close()
	}
	if panics.Load() > 0 {
		t.Errorf("%d handler panics", panics.Load())
	}
	// Every connection was closed by its client: the server's goroutines
	// must end (within the write timeout of any blocked writer).
	var n int
	for i := 0; i < 60; i++ {
		n = runtime.NumGoroutine()
		if n <= before+2 && srv.Conns() == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("goroutines before %d after %d, conns %d", before, n, srv.Conns())
	if srv.Conns() != 0 {
		buf := make([]byte, 1<<20)
		t.Errorf("connections still open after their clients closed: %d\n%s", srv.Conns(), buf[:runtime.Stack(buf, true)])
	}
}

// Rapid reset (CVE-2023-44487): HEADERS then RST_STREAM, many times, to a
// handler that does not watch its context. The handlers started must stay
// bounded.
func TestReviewRapidReset(t *testing.T) {
	var started, maxRunning, running atomic.Int64
	var release chan struct{}
	var relMu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		relMu.Lock()
		rel := release
		relMu.Unlock()
		started.Add(1)
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		<-rel
		running.Add(-1)
	})
	for _, name := range []string{"edge", "x/net"} {
		started.Store(0)
		maxRunning.Store(0)
		relMu.Lock()
		release = make(chan struct{})
		relMu.Unlock()
		var addr string
		if name == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		var refused, goaway atomic.Int64
		go func() {
			for f := range c.frames {
				switch f := f.(type) {
				case *http2.RSTStreamFrame:
					if f.ErrCode == http2.ErrCodeRefusedStream {
						refused.Add(1)
					}
				case *http2.GoAwayFrame:
					goaway.Add(1)
				}
			}
		}()
		start := time.Now()
		id := uint32(1)
		sent := 0
		for ; sent < 5000; sent++ {
			c.wmu.Lock()
			c.hb.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a.test"}, {":path", "/"}} {
				_ = c.enc.WriteField(hpackField(f[0], f[1]))
			}
			err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndStream: true, EndHeaders: true})
			if err == nil {
				err = c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
			c.wmu.Unlock()
			if err != nil {
				break
			}
			id += 2
		}
		time.Sleep(300 * time.Millisecond)
		t.Logf("%s: sent %d HEADERS+RST in %v: handlers started %d, max running %d, refused %d, goaway %d",
			name, sent, time.Since(start).Round(time.Millisecond), started.Load(), maxRunning.Load(), refused.Load(), goaway.Load())
		close(release)
		c.nc.Close()
	}
}

// CONTINUATION flood (CVE-2024-27316): a header block that never ends.
func TestReviewContinuationFlood(t *testing.T) {
	addr := rvServer(t, &Server{Handler: http.NotFoundHandler(), MaxHeaderListSize: 64 << 10})
	c := rvDial(t, addr)
	var big bytes.Buffer
	enc := hpackEncoder(&big)
	for i := 0; big.Len() < 16000; i++ {
		_ = enc.WriteField(hpackField("x-pad-"+strconv.Itoa(i), string(bytes.Repeat([]byte("a"), 200))))
	}
	blk := big.Bytes()[:16000]
	sent := 0
	c.wmu.Lock()
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk, EndStream: true})
	for err == nil && sent < 64<<20 {
		err = c.fr.WriteContinuation(1, false, blk)
		sent += len(blk)
	}
	c.wmu.Unlock()
	t.Logf("server stopped reading after %d KiB of CONTINUATION (err %v)", sent>>10, err)
	if err == nil {
		t.Errorf("64 MiB of CONTINUATION frames were accepted")
	}
}

// PING and SETTINGS flood from a client that never reads: the server's
// memory must stay bounded (it may block or close, not queue).
func TestReviewPingSettingsFloodNoRead(t *testing.T) {
	srv := &Server{Handler: http.NotFoundHandler(), WriteTimeout: 2 * time.Second}
	addr := rvServer(t, srv)
	raw, _ := net.Dial("tcp", addr)
	defer raw.Close()
	raw.(*net.TCPConn).SetReadBuffer(4096)
	fr := http2.NewFramer(raw, raw)
	raw.Write([]byte(http2.ClientPreface))
	fr.WriteSettings()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	raw.SetWriteDeadline(time.Now().Add(5 * time.Second))
	n := 0
	var err error
	for ; n < 2_000_000 && err == nil; n++ {
		if n%2 == 0 {
			err = fr.WritePing(false, [8]byte{byte(n)})
		} else {
			err = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("sent %d frames (err %v); server heap in use grew by %d KiB", n, err, (int64(ms.HeapInuse)-int64(before))>>10)
}
