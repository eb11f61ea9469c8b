package node

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// An HTTP/2 client opens big responses, stops reading (TCP window fills,
// the server's frame writer blocks), then half-closes its side. The server
// sees EOF, its serve loop ends and closes the connection: that must free it.
func TestTLSH2StalledReaderConnFreed(t *testing.T) {
	for _, batching := range []bool{false, true} {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		var closed atomic.Int32
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b := make([]byte, 1<<20)
				for i := 0; i < 64; i++ {
					if _, err := w.Write(b); err != nil {
						return
					}
				}
			}),
			TLSConfig:    &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}},
			WriteTimeout: 30 * time.Second,
			ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateClosed {
					closed.Add(1)
				}
			},
		}
		l := net.Listener(ln)
		if batching {
			l = batchListener{Listener: ln, stats: new(batchStats), full: tlsFullRecords}
		}
		go func() { _ = srv.ServeTLS(l, "", "") }()
		raw, _ := net.Dial("tcp", ln.Addr().String())
		raw.(*net.TCPConn).SetReadBuffer(4096)
		cc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err := cc.Handshake(); err != nil {
			t.Fatal(err)
		}
		_, _ = cc.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(cc, cc)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		_ = fr.WriteWindowUpdate(0, 1<<31-1-65535)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for id := uint32(1); id < 20; id += 2 {
			hb.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "t"}, {":path", "/"}} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		}
		time.Sleep(1500 * time.Millisecond) // server fills the socket buffers and blocks
		_ = cc.CloseWrite()
		_ = raw.(*net.TCPConn).CloseWrite()
		deadline := time.Now().Add(5 * time.Second)
		for closed.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("batching=%v: server conn closed=%d", batching, closed.Load())
		if closed.Load() == 0 {
			t.Errorf("batching=%v: server connection never closed after the client's EOF (leaked)", batching)
		}
		raw.Close()
		go srv.Close() // may hang with batching
		ln.Close()
	}
}
