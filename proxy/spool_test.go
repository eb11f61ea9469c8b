package proxy

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// patterned is a body whose every byte depends on its offset and on seed,
// so that a byte from the wrong place or the wrong response shows.
func patterned(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*7 + i/251 + seed) % 253)
	}
	return b
}

// spoolOrigin answers /<seed>/<size> with that patterned body, streamed
// without a length in 32 KiB writes, with the given Cache-Control.
func spoolOrigin(t testing.TB, cacheControl string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var seed, size int
		if _, err := fmtSscanPath(r.URL.Path, &seed, &size); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Cache-Control", cacheControl)
		body := patterned(size, seed)
		for len(body) > 0 {
			k := min(len(body), 32<<10)
			if _, err := w.Write(body[:k]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			body = body[k:]
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func fmtSscanPath(p string, seed, size *int) (int, error) {
	var a, b string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			a, b = p[1:i], p[i+1:]
			break
		}
	}
	x, err := strconv.Atoi(a)
	if err != nil {
		return 0, err
	}
	y, err := strconv.Atoi(b)
	if err != nil {
		return 0, err
	}
	*seed, *size = x, y
	return 2, nil
}

// stalledClient is a client that reads nothing until its gate opens (or
// gives up after limit bytes, if limit > 0).
type stalledClient struct {
	*httptest.ResponseRecorder
	gate  chan struct{}
	limit int
}

func newStalledClient() *stalledClient {
	return &stalledClient{ResponseRecorder: httptest.NewRecorder(), gate: make(chan struct{})}
}

func (c *stalledClient) Write(p []byte) (int, error) {
	<-c.gate
	if c.limit > 0 && c.Body.Len()+len(p) > c.limit {
		return 0, errors.New("the client left")
	}
	return c.ResponseRecorder.Write(p)
}

// spoolProxy is a handler with one upstream slot in front of srv, spilling
// into its own directory with the given budget (0: off).
func spoolProxy(t testing.TB, srv *httptest.Server, spoolBytes int64, mod func(*Config)) (*Handler, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.MaxInflight = 1
	cfg.SpoolDir, cfg.SpoolBytes = dir, spoolBytes
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(64<<20, 8)
	f := &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{}}}
	return New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil), dir
}

// serveStalled starts a stalled client's request for path and returns it
// with a channel closed when the handler returns.
func serveStalled(h *Handler, path string, hdr http.Header) (*stalledClient, chan struct{}) {
	c := newStalledClient()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }() // a client that left ends the handler with ErrAbortHandler
		r := httptest.NewRequest("GET", "http://example.com"+path, nil)
		for k, v := range hdr {
			r.Header[k] = v
		}
		h.ServeHTTP(c, r)
	}()
	return c, done
}

func getStatus(h *Handler, path string) int {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com"+path, nil))
	return w.Code
}

// A client that reads nothing of a large uncacheable answer held the
// node's upstream slot until the write timeout, so that enough such
// clients turned every miss into a 503. The body now spills to a file at
// the origin's pace and the slot comes back once it is in; the stalled
// client still gets every byte, in order.
func TestASlowReaderOfAnUncacheableAnswerFreesItsUpstreamSlot(t *testing.T) {
	srv := spoolOrigin(t, "no-store")
	const size = 3 << 20
	h, dir := spoolProxy(t, srv, 64<<20, nil)
	c, done := serveStalled(h, "/1/"+strconv.Itoa(size), nil)
	waitUntil(t, "the upstream slot is free while the client has read nothing", func() bool { return h.upstream.inFlight() == 0 && h.spool.files.Load() == 1 })
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the spill file has a name in %s: %v (it must be unlinked)", dir, entries)
	}
	if code := getStatus(h, "/2/10"); code != 200 {
		t.Errorf("a miss during the stalled download: %d, want 200", code)
	}
	close(c.gate)
	<-done
	if !bytes.Equal(c.Body.Bytes(), patterned(size, 1)) {
		t.Errorf("the stalled client got %d bytes, not the %d the origin sent (or not in order)", c.Body.Len(), size)
	}
	h.Wait()
	if used, files := h.spool.used.Load(), h.spool.files.Load(); used != 0 || files != 0 {
		t.Errorf("after the download: %d bytes in %d spill files, want none", used, files)
	}
	if n := testutil.ToFloat64(h.metrics.spool.opened); n != 1 {
		t.Errorf("edge_spool_files_opened_total = %v, want 1", n)
	}
}

// The control: with spilling off the slot stays with the stalled client.
func TestWithoutTheSpoolASlowReaderHoldsItsSlot(t *testing.T) {
	srv := spoolOrigin(t, "no-store")
	h, _ := spoolProxy(t, srv, 0, nil)
	c, done := serveStalled(h, "/1/"+strconv.Itoa(3<<20), nil)
	waitUntil(t, "the stalled download has its slot", func() bool { return h.upstream.inFlight() == 1 })
	if code := getStatus(h, "/2/10"); code != http.StatusServiceUnavailable {
		t.Errorf("a miss during the stalled download: %d, want 503 (the slot is held)", code)
	}
	close(c.gate)
	<-done
	if c.Body.Len() != 3<<20 {
		t.Errorf("the client got %d bytes", c.Body.Len())
	}
}

// A cacheable answer too large to store (a trimming fill) spills the same
// way, and is still not stored.
func TestASlowReaderOfATooLargeAnswerFreesItsUpstreamSlot(t *testing.T) {
	srv := spoolOrigin(t, "public, max-age=60")
	const size = 2 << 20
	h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) { c.MaxObjectBytes = 256 << 10 })
	c, done := serveStalled(h, "/3/"+strconv.Itoa(size), nil)
	waitUntil(t, "the upstream slot is free while the client has read nothing", func() bool { return h.upstream.inFlight() == 0 && h.spool.files.Load() == 1 })
	if code := getStatus(h, "/4/10"); code != 200 {
		t.Errorf("a miss during the stalled download: %d, want 200", code)
	}
	close(c.gate)
	<-done
	if !bytes.Equal(c.Body.Bytes(), patterned(size, 3)) {
		t.Errorf("the stalled client got %d bytes, not the %d the origin sent (or not in order)", c.Body.Len(), size)
	}
	h.Wait()
	if e, _ := h.store.Lookup(h.requestKey(httptest.NewRequest("GET", "http://example.com/3/"+strconv.Itoa(size), nil)), http.Header{}); e != nil {
		t.Error("a too-large answer was stored")
	}
	if h.spool.used.Load() != 0 || h.spool.files.Load() != 0 {
		t.Errorf("spill left behind: %d bytes, %d files", h.spool.used.Load(), h.spool.files.Load())
	}
}

// A spill that reaches its share of the budget stops growing: the pump
// waits for the reader again (the slot is held, as without a spool), and
// the reader still gets the whole body, from the file and then memory.
func TestAFullSpillFallsBackToWaitingForTheReader(t *testing.T) {
	srv := spoolOrigin(t, "no-store")
	const size = 3 << 20
	h, _ := spoolProxy(t, srv, 1<<20, nil) // 256 KiB per response
	c, done := serveStalled(h, "/5/"+strconv.Itoa(size), nil)
	waitUntil(t, "the spill is full", func() bool { return testutil.ToFloat64(h.metrics.spool.full) == 1 })
	if h.upstream.inFlight() != 1 {
		t.Error("the slot was given back before the body was in")
	}
	if code := getStatus(h, "/6/10"); code != http.StatusServiceUnavailable {
		t.Errorf("a miss while the full spill waits: %d, want 503", code)
	}
	close(c.gate)
	<-done
	if !bytes.Equal(c.Body.Bytes(), patterned(size, 5)) {
		t.Errorf("the client got %d bytes, not the %d the origin sent (or not in order)", c.Body.Len(), size)
	}
	h.Wait()
	if h.spool.used.Load() != 0 || h.spool.files.Load() != 0 {
		t.Errorf("spill left behind: %d bytes, %d files", h.spool.used.Load(), h.spool.files.Load())
	}
}

// Two users' private answers spill at once: each gets its own bytes, none
// of the other's (a spill file per response, read at the reader's own
// offset).
func TestSpilledPrivateAnswersStayWithTheirUsers(t *testing.T) {
	srv := spoolOrigin(t, "private, no-store")
	const size = 2 << 20
	h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) { c.MaxInflight = 2 })
	a, doneA := serveStalled(h, "/7/"+strconv.Itoa(size), http.Header{"Cookie": {"session=alice"}})
	b, doneB := serveStalled(h, "/8/"+strconv.Itoa(size), http.Header{"Cookie": {"session=bob"}})
	waitUntil(t, "both answers spilled and their slots came back", func() bool { return h.upstream.inFlight() == 0 && h.spool.files.Load() == 2 })
	close(b.gate)
	close(a.gate)
	<-doneA
	<-doneB
	if !bytes.Equal(a.Body.Bytes(), patterned(size, 7)) || !bytes.Equal(b.Body.Bytes(), patterned(size, 8)) {
		t.Error("a spilled answer reached its user with bytes that are not its own")
	}
}

// A client that leaves halfway through a spilled body: the file goes and
// its bytes are given back.
func TestALeavingReaderTakesItsSpillWithIt(t *testing.T) {
	srv := spoolOrigin(t, "no-store")
	h, _ := spoolProxy(t, srv, 64<<20, nil)
	c, done := serveStalled(h, "/9/"+strconv.Itoa(4<<20), nil)
	c.limit = 1 << 20
	waitUntil(t, "the body spilled", func() bool { return h.upstream.inFlight() == 0 && h.spool.files.Load() == 1 })
	close(c.gate)
	<-done
	h.Wait()
	waitUntil(t, "the spill is removed", func() bool { return h.spool.used.Load() == 0 && h.spool.files.Load() == 0 })
}

// Many slow readers at once stay within the budget, and every one of them
// gets its whole body.
func TestManySpillsStayWithinTheBudget(t *testing.T) {
	srv := spoolOrigin(t, "no-store")
	const size, readers, budget = 1 << 20, 8, 4 << 20
	h, _ := spoolProxy(t, srv, budget, func(c *Config) { c.MaxInflight = readers })
	var peak int64
	var mu sync.Mutex
	clients := make([]*stalledClient, readers)
	dones := make([]chan struct{}, readers)
	for i := range readers {
		clients[i], dones[i] = serveStalled(h, "/"+strconv.Itoa(10+i)+"/"+strconv.Itoa(size), nil)
	}
	waitUntil(t, "every pump spilled or waits", func() bool {
		mu.Lock()
		peak = max(peak, h.spool.used.Load())
		mu.Unlock()
		return testutil.ToFloat64(h.metrics.spool.opened) == readers
	})
	if peak > budget || h.spool.used.Load() > budget {
		t.Errorf("spill bytes reached %d, over the budget %d", max(peak, h.spool.used.Load()), budget)
	}
	for i := range readers {
		close(clients[i].gate)
	}
	for i := range readers {
		<-dones[i]
		if !bytes.Equal(clients[i].Body.Bytes(), patterned(size, 10+i)) {
			t.Errorf("reader %d got %d bytes, not its own %d", i, clients[i].Body.Len(), size)
		}
	}
}

// A small uncacheable body read whole (so that its slot comes back) is
// memory held until its client has it: it is charged to the buffer budget
// for that long, and over the budget it streams as it did before spilling,
// holding its slot instead. Either way the client gets its own bytes.
func TestASmallBodyReadWholeIsChargedToTheBufferBudget(t *testing.T) {
	const size = 32 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, no-store")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(patterned(size, len(r.URL.Path)))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name      string
		budget    int64
		wantSlots int   // upstream slots held while the client stalls
		wantHeld  int64 // buffer bytes charged meanwhile
	}{
		{"within the budget", 1 << 20, 0, size},
		{"over the budget", size - 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) { c.MaxBufferedBytes = tc.budget })
			c, done := serveStalled(h, "/page", nil)
			waitUntil(t, "the origin's answer to be in", func() bool {
				return h.upstream.inFlight() == tc.wantSlots && h.buffered.Load() == tc.wantHeld
			})
			// Settled: neither moves while the client stalls.
			time.Sleep(100 * time.Millisecond)
			if slots, held := h.upstream.inFlight(), h.buffered.Load(); slots != tc.wantSlots || held != tc.wantHeld {
				t.Errorf("while the client stalls: %d slots, %d bytes charged; want %d and %d", slots, held, tc.wantSlots, tc.wantHeld)
			}
			close(c.gate)
			<-done
			h.Wait()
			if !bytes.Equal(c.Body.Bytes(), patterned(size, len("/page"))) {
				t.Errorf("the client got %d bytes, not its own %d", c.Body.Len(), size)
			}
			if held := h.buffered.Load(); held != 0 {
				t.Errorf("after the answer: %d bytes still charged", held)
			}
		})
	}
}
