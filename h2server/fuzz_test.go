package h2server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/edgecache/edge/hitpath"
)

// FuzzConnFrames feeds a connection arbitrary frames after the preface:
// whatever they are, the server must neither panic nor hang, and must end
// the connection once the client has gone.
func FuzzConnFrames(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/hit"}, {"content-length", "3"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("abc"))
	_ = fr.WriteWindowUpdate(0, 100)
	_ = fr.WritePing(false, [8]byte{})
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	f.Add(seed.Bytes())
	seed.Reset()
	hb.Reset()
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/hit"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 4, 8, 0, 0, 0, 0, 1, 0, 0, 0, 0}) // a zero WINDOW_UPDATE on stream 1
	seed.Reset()
	hb.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/y"}, {"content-length", "3"}, {"trailer", "x"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(3, false, []byte("abc"))
	_ = fr.WriteWindowUpdate(3, 10)
	_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}) // a reset, then a window of 0
	f.Add(seed.Bytes())

	body := bytes.Repeat([]byte("b"), 70000)
	f.Fuzz(func(t *testing.T, frames []byte) {
		s := &Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "X-T")
				_, _ = io.Copy(w, r.Body)
				_, _ = w.Write(body) // beyond the first window
				w.Header().Set("X-T", "t")
			}),
			Hits:              answerer{body: body, n: new(atomic.Int64)},
			Fields:            hitpath.NewFields(hitpath.Config{}),
			WriteTimeout:      2 * time.Second,
			IdleTimeout:       200 * time.Millisecond,
			ReadHeaderTimeout: 2 * time.Second,
		}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeConn(context.Background(), server, nil)
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		var in bytes.Buffer
		in.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&in, nil).WriteSettings()
		in.Write(frames)
		_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = client.Write(in.Bytes())
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after the client left")
		}
	})
}
