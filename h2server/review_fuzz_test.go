package h2server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzReviewServeConn feeds arbitrary frames (after a valid preface and
// SETTINGS) to a connection with hits and a handler: no panic, no hang.
func FuzzReviewServeConn(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, p := range rvPairs(rvGet("/x")) {
		enc.WriteField(p)
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	hb.Reset()
	for _, p := range rvPairs(rvPost("/y", "content-length", "3", "trailer", "x")) {
		enc.WriteField(p)
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(3, false, []byte("abc"))
	fr.WriteWindowUpdate(3, 10)
	fr.WriteRSTStream(3, http2.ErrCodeCancel)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	f.Add(seed.Bytes())
	body := bytes.Repeat([]byte("h"), 70000)
	srv := &Server{WriteTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond,
		Hits: &rvAnswerer{body: body}, Fields: hitpathFields(),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Trailer", "X-T")
			w.Write(b)
			w.Write(body)
			w.Header().Set("X-T", "t")
		})}
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() { srv.ServeConn(context.Background(), a, nil); close(done) }()
		go io.Copy(io.Discard, b)
		b.SetWriteDeadline(time.Now().Add(time.Second))
		b.Write([]byte(http2.ClientPreface))
		cf := http2.NewFramer(b, nil)
		cf.WriteSettings()
		b.Write(in)
		time.Sleep(5 * time.Millisecond)
		b.Close()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("ServeConn did not return 3 s after its client closed")
		}
	})
}
