package origin

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// s31TLSOrigin is an HTTP/2 https origin running h; it returns a client
// config that trusts it.
func s31TLSOrigin(t *testing.T, h http.Handler) ClientConfig {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	// A 64 KiB receive window per stream (as many origins and
	// load balancers run): the transport's end of writing is then close to
	// the handler's end of reading, so the response header timeout
	// (which starts once the body is written) is not what trips.
	srv.Config.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	return ClientConfig{URL: srv.URL, CAFile: caFile, ConnectTimeout: time.Second, MaxIdleConns: 4, IdleConnTimeout: time.Minute}
}

// s31SlowReader is a handler that reads its body steadily, step bytes
// every every, never pausing longer, and answers how much it read.
func s31SlowReader(step int, every time.Duration, gapMax *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, step)
		var total int
		last := time.Now()
		for {
			n, err := io.ReadFull(r.Body, buf)
			total += n
			if g := time.Since(last); int64(g) > gapMax.Load() {
				gapMax.Store(int64(g))
			}
			last = time.Now()
			if err != nil {
				break
			}
			time.Sleep(every)
		}
		w.Header().Set("X-Read", http.StatusText(200))
		_, _ = io.WriteString(w, "read ok")
		_ = total
	}
}

// Held: an HTTP/2 origin that reads an upload steadily (32 KiB every
// 50 ms, about 640 KiB/s) with a 64 KiB stream window is not cut with
// response_timeout 2s (it read 400ms once, and a loaded run cut it): the transport hands the body over in 16 KiB
// frames, so the watch's per-chunk clock stays far below the timeout.
// (With HTTP/1 chunks are 32 KiB: only an origin under ~1 KiB/s per
// 30 s default timeout would be charged.)
func TestS31OriginSteadyH2OriginIsNotCut(t *testing.T) {
	var gap atomic.Int64
	cfg := s31TLSOrigin(t, s31SlowReader(32<<10, 50*time.Millisecond, &gap))
	cfg.ResponseTimeout = 2 * time.Second // 40 times the longest pause: a busy machine cannot make it a stall
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("u"), 3<<20)
	req, _ := http.NewRequest(http.MethodPost, "/upload", io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = int64(len(body))
	start := time.Now()
	resp, err := c.Fetch(context.Background(), req)
	if err != nil {
		t.Fatalf("an origin reading steadily (longest pause %v) was cut after %v: %v (cause %q)",
			time.Duration(gap.Load()).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), err, Cause(err))
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "read ok" {
		t.Fatalf("answer %q", b)
	}
}

// A review found (now mended): the send watch keeps running after the origin has answered: an
// origin that answers at once without reading the upload (an early 200
// streaming a long answer, or a 4xx with a large page) has the answer it
// is streaming cut after origin.response_timeout, because the transport
// still holds a chunk it cannot write and the watch then cancels the
// request's context, which the response body shares. Steps: HTTP/1 origin
// answers a 4 MiB POST at once, without reading it, streaming 10 lines
// 150 ms apart (1.5 s); response_timeout 500ms. Expected: the client of
// the answer gets all 10 lines (the origin is sending; nothing stalled).
// Actual: the answer breaks off after about 500 ms.
func TestS31OriginEarlyAnswerIsCutByTheSendWatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for i := range 10 {
			_, _ = io.WriteString(w, "line\n")
			w.(http.Flusher).Flush()
			_ = i
			time.Sleep(150 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(ClientConfig{URL: srv.URL, ResponseTimeout: 500 * time.Millisecond, ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("u"), 32<<20)
	req, _ := http.NewRequest(http.MethodPost, "/report", io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = int64(len(body))
	resp, err := c.Fetch(context.Background(), req)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) != 50 {
		t.Fatalf("the origin's answer was cut: got %d of 50 bytes, err %v", len(b), err)
	}
}

// Held: an origin that stops reading an upload fails the fetch within a
// few response timeouts with ErrSendStalled, cause "stalled", reported to
// OnError; and a slow client body (the watch's clock stops while it
// reads) is not charged to the origin; no goroutines are left behind.
func TestS31OriginSendWatchStalledAndSlowClient(t *testing.T) {
	block := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1024)
		_, _ = r.Body.Read(buf) // reads a little, then hangs
		<-block
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(block) })
	var causes []string
	c, err := NewClient(ClientConfig{URL: stuck.URL, ResponseTimeout: 300 * time.Millisecond, ConnectTimeout: time.Second,
		OnError: func(cause string) { causes = append(causes, cause) }})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	body := bytes.Repeat([]byte("u"), 32<<20)
	req, _ := http.NewRequest(http.MethodPost, "/up", io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = int64(len(body))
	start := time.Now()
	_, err = c.Fetch(context.Background(), req)
	took := time.Since(start)
	if err == nil || !errors.Is(err, ErrSendStalled) || Cause(err) != "stalled" {
		t.Fatalf("err %v cause %q", err, Cause(err))
	}
	if took > 3*time.Second {
		t.Fatalf("cut only after %v", took)
	}
	t.Logf("a stuck origin cut after %v: %v", took.Round(time.Millisecond), err)
	if len(causes) != 1 || causes[0] != "stalled" {
		t.Fatalf("OnError causes %q", causes)
	}

	// A slow client: 8 pieces 200 ms apart (1.6 s, over the timeout of
	// 300 ms) to an origin that reads everything at once.
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, http.StatusText(200)+" "+time.Duration(n).String())
	}))
	t.Cleanup(ok.Close)
	c2, _ := NewClient(ClientConfig{URL: ok.URL, ResponseTimeout: 300 * time.Millisecond, ConnectTimeout: time.Second})
	pr, pw := io.Pipe()
	go func() {
		for range 8 {
			time.Sleep(200 * time.Millisecond)
			_, _ = pw.Write([]byte("piece"))
		}
		pw.Close()
	}()
	req2, _ := http.NewRequest(http.MethodPost, "/slow", pr)
	req2.ContentLength = -1
	resp, err := c2.Fetch(context.Background(), req2)
	if err != nil {
		t.Fatalf("a slow client's upload was charged to the origin: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdle()
	c2.CloseIdle()
	time.Sleep(300 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+6 {
		t.Fatalf("goroutines %d -> %d", before, after)
	}
}
