package proxy

// A hostile review of request buffering (upload.go): its tests, each
// failing before its fix.

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A POST whose small body arrives at once, to an origin that takes longer
// than limits.body_timeout to answer.
func TestAnUploadToASlowOriginIsNotCutByItsBodyDeadline(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(1500 * time.Millisecond)
		_, _ = io.WriteString(w, "done")
	}, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/slow", "text/plain", bytes.NewReader([]byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "done" {
		t.Fatalf("got %d %q", resp.StatusCode, b)
	}
}

// Stalled uploads of a declared 64 KiB each take the buffer budget for
// their whole (slow) life, before a byte of them has arrived: fills meanwhile
// are not stored. At the defaults that is 1024 connections
// (64 MiB / 64 KiB), each held body_timeout + 64 s at min_body_rate.
func TestStalledUploadsTakeAtMostAShareOfTheBufferBudget(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.MaxBufferedBytes = 16 * uploadMemory; c.MaxInflight = 100 })
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	for i := range 16 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		wg.Go(func() { <-upload(h, "/up/"+strconv.Itoa(i), uploadMemory, pr) })
		_, _ = pw.Write([]byte("x")) // one byte, then the client stalls
	}
	defer func() {
		for _, pw := range writers {
			_ = pw.CloseWithError(io.ErrUnexpectedEOF)
		}
		wg.Wait()
	}()
	waitUntil(t, "the uploads to be read (in memory, on disk, or holding a slot)", func() bool {
		n := h.buffered.Load()/uploadMemory + int64(h.upstream.inFlight())
		if h.spool != nil {
			n += h.spool.files.Load()
		}
		return n == 16
	})
	serve(h, "GET", "/page")
	h.Wait()
	w := serve(h, "GET", "/page")
	if calls.Load() != 1 {
		t.Errorf("a cacheable page fetched while 16 uploads stall (1 byte each sent): %d origin requests, Cache-Status %q; want it stored (1)",
			calls.Load(), w.Header().Get("Cache-Status"))
	}
}

// The origin answers before it reads a spilled upload; the transport may
// still be sending it when the request ends and the spill is closed. The
// origin closes its side with most of the body unread, so the transport's
// write may fail before it reads the early answer: then the client gets a
// 502, as from nginx when an upstream resets a request body. Which one wins
// is the network's race (a loaded machine sees 502s); what must not vary is
// that nothing is left held.
func TestAnEarlyAnswerToASpilledUploadLeaksNothing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(403)
		_, _ = io.WriteString(w, "no")
	}))
	defer srv.Close()
	h, _ := spoolProxy(t, srv, 64<<20, func(c *Config) { c.MaxInflight = 64 })
	var wg sync.WaitGroup
	var refused, cut atomic.Int64
	for i := range 32 {
		wg.Go(func() {
			body := patterned(4<<20, i)
			w := <-upload(h, "/e/"+strconv.Itoa(i), int64(len(body)), bytes.NewReader(body))
			switch w.Code {
			case 403:
				refused.Add(1)
			case 502:
				cut.Add(1)
			default:
				t.Errorf("upload %d: %d %q; want the origin's 403 or a 502 for the write it cut", i, w.Code, w.Body.String())
			}
		})
	}
	wg.Wait()
	t.Logf("%d early answers, %d writes cut by the origin", refused.Load(), cut.Load())
	h.Wait()
	time.Sleep(200 * time.Millisecond)
	if held, used, files := h.buffered.Load(), h.spool.used.Load(), h.spool.files.Load(); held != 0 || used != 0 || files != 0 {
		t.Errorf("after: %d buffered, %d spooled in %d files", held, used, files)
	}
}

var _ = strings.Contains

// Uploads that send all but their last byte and stall (slowBody's average
// rate lets a 32 MiB body that came fast wait ~9 h for its last byte; 8 of
// them hold the default 256 MiB spool) take the spool: a slow reader of an
// uncacheable answer can no longer spill and holds its upstream slot again.
func TestStalledUploadsTakeAtMostAShareOfTheSpool(t *testing.T) {
	srv := spoolOrigin(t, "no-store")
	h, _ := spoolProxy(t, srv, 4<<20, func(c *Config) { c.MaxInflight = 8 }) // one spill's share: 1 MiB
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	for i := range 4 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		n := h.spool.perFile
		wg.Go(func() { <-upload(h, "/up/"+strconv.Itoa(i), n, pr) })
		go func() { _, _ = pw.Write(patterned(int(n)-1, i)) }() // all but the last byte
	}
	defer func() {
		for _, pw := range writers {
			_ = pw.CloseWithError(io.ErrUnexpectedEOF)
		}
		wg.Wait()
	}()
	waitUntil(t, "the uploads to be read", func() bool {
		u := h.spool.used.Load()
		time.Sleep(100 * time.Millisecond)
		return u > 0 && u == h.spool.used.Load()
	})
	streamed := h.upstream.inFlight() // uploads that hold a slot
	c, done := serveStalled(h, "/1/"+strconv.Itoa(900<<10), nil)
	defer func() { close(c.gate); <-done }()
	time.Sleep(500 * time.Millisecond)
	if n := h.upstream.inFlight() - streamed; n != 0 {
		t.Errorf("a stalled reader of a 900 KiB uncacheable answer holds %d upstream slot(s) while 4 uploads stall (spool used %d of %d), want 0", n, h.spool.used.Load(), h.spool.budget)
	}
}
