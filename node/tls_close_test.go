package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

func newBC(c net.Conn, full []int) *batchConn {
	return &batchConn{Conn: c, stats: new(batchStats), hold: defaultHoldLimit, full: full}
}

// A write blocked on a peer that does not read holds c.mu; Close must still
// be able to break it (what net/http, http2's shutdown timer and tls.Conn.Close
// rely on).
func TestTLSCloseBreaksBlockedWrite(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	bc := newBC(a, plainFull)
	go func() { _, _ = bc.Write(make([]byte, 100)) }() // nobody reads b: blocks
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { _ = bc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("batchConn.Close blocked behind a stuck Write (c.mu held across Conn.Write)")
	}
}

// Same through TLS over loopback TCP: the server writes to a client that
// does not read; tls.Conn.Close (which calls the inner Close at once when a
// Write is in flight) must return.
func TestTLSTLSCloseBreaksBlockedWrite(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	cert := selfSigned(t)
	bl := batchListener{Listener: ln, stats: new(batchStats), full: tlsFullRecords}
	tl := tls.NewListener(bl, &tls.Config{Certificates: []tls.Certificate{cert}})
	ccc := make(chan *tls.Conn, 1)
	go func() {
		cc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Error(err)
		}
		ccc <- cc
	}()
	sc, _ := tl.Accept()
	if err := sc.(*tls.Conn).Handshake(); err != nil {
		t.Fatal(err)
	}
	if cc := <-ccc; cc != nil {
		defer cc.Close()
	}
	go func() { _, _ = sc.Write(make([]byte, 64<<20)) }()
	time.Sleep(200 * time.Millisecond)
	done := make(chan struct{})
	go func() { _ = sc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("tls.Conn.Close over batchConn hung while a Write was blocked")
	}
}

// Held record then close_notify: the client must see all bytes then EOF.
func TestTLSHeldThenCloseNotify(t *testing.T) {
	for _, size := range []int{netHTTPBufferSize, 2 * netHTTPBufferSize, 3*netHTTPBufferSize + 7} {
		a, b := net.Pipe()
		cert := selfSigned(t)
		srv := tls.Server(newBC(a, tlsFullRecords), &tls.Config{Certificates: []tls.Certificate{cert}, DynamicRecordSizingDisabled: true})
		cli := tls.Client(b, &tls.Config{InsecureSkipVerify: true})
		got := make(chan []byte, 1)
		go func() { d, _ := io.ReadAll(cli); got <- d }()
		if err := srv.Handshake(); err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		for off := 0; off < size; off += netHTTPBufferSize {
			end := min(off+netHTTPBufferSize, size)
			if _, err := srv.Write(want[off:end]); err != nil {
				t.Fatal(err)
			}
		}
		_ = srv.Close()
		select {
		case d := <-got:
			if !bytes.Equal(d, want) {
				t.Fatalf("size %d: got %d bytes, mismatch", size, len(d))
			}
		case <-time.After(3 * time.Second):
			t.Fatal("client never got EOF")
		}
		b.Close()
	}
}

// A held record with an idle client must arrive (timer flush).
func TestTLSHeldArrivesWhenIdle(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	cert := selfSigned(t)
	srv := tls.Server(newBC(a, tlsFullRecords), &tls.Config{Certificates: []tls.Certificate{cert}, DynamicRecordSizingDisabled: true})
	cli := tls.Client(b, &tls.Config{InsecureSkipVerify: true})
	got := make(chan error, 1)
	go func() { buf := make([]byte, netHTTPBufferSize); _, err := io.ReadFull(cli, buf); got <- err }()
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write(make([]byte, netHTTPBufferSize)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("held record never sent to an idle client")
	}
}

// Write/timer/Close/CloseWrite/Read concurrency under -race.
// TestTLSBatchRace races writes, the hold timer, CloseWrite and
// Close (the race detector of make test is the main check).
func TestTLSBatchRace(t *testing.T) {
	for i := 0; i < 200; i++ {
		a, b := net.Pipe()
		bc := &batchConn{Conn: a, stats: new(batchStats), hold: 50 * time.Microsecond, full: []int{16}}
		go func() { _, _ = io.Copy(io.Discard, b) }()
		var wg sync.WaitGroup
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 20; j++ {
					if _, err := bc.Write(make([]byte, 16+j%2)); err != nil {
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
			_ = bc.CloseWrite()
			_ = bc.Close()
		}()
		wg.Wait()
		if _, err := bc.Write([]byte("x")); err == nil {
			t.Fatal("a write after Close succeeded")
		}
		b.Close()
	}
}

// HTTP/2 with many concurrent streams over batched TLS: every body intact.
func TestTLSH2ConcurrentStreamsIntact(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + n)
		}
		return b
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		b := body(n)
		chunk, _ := strconv.Atoi(r.URL.Query().Get("c"))
		if chunk <= 0 {
			chunk = n
		}
		for off := 0; off < n; off += chunk {
			_, _ = w.Write(b[off:min(off+chunk, n)])
			if r.URL.Query().Get("f") != "" {
				w.(http.Flusher).Flush()
			}
		}
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}}
	stats := new(batchStats)
	go func() { _ = srv.ServeTLS(batchListener{Listener: ln, stats: stats, full: tlsFullRecords}, "", "") }()
	defer srv.Close()
	for _, proto := range []string{"h2", "h1"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: proto == "h2", MaxConnsPerHost: 2}
		if proto == "h1" {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for i := 0; i < 400; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				n := []int{0, 1, 4096, 4096 - 9, 4096 + 9, 8192, 4096*3 + 1, 100000, 16384, 16384 - 9}[i%10] + i/10%3
				c := []int{0, 4096, 4087, 1000}[i%4]
				f := ""
				if i%3 == 0 {
					f = "&f=1"
				}
				resp, err := cl.Get(fmt.Sprintf("https://%s/?n=%d&c=%d%s", ln.Addr(), n, c, f))
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || sha256.Sum256(got) != sha256.Sum256(body(n)) {
					errs <- fmt.Errorf("%s n=%d c=%d: %d bytes err %v", proto, n, c, len(got), err)
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		tr.CloseIdleConnections()
	}
	t.Logf("sends %d merged %d", stats.sends.Load(), stats.merged.Load())
	_ = context.Background
}
