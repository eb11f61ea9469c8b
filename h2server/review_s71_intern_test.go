package h2server

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/edgecache/edge/hitpath"
)

// countingDiscard counts the bytes it is handed and keeps none.
type countingDiscard struct{ n atomic.Int64 }

func (d *countingDiscard) Write(p []byte) (int, error) { d.n.Add(int64(len(p))); return len(p), nil }

// TestS71InternedFieldValuesAreBoundedInBytes: a connection interns the
// field values of the hits it answers (hit.go, conn.intern), at most
// internLimit (256) of them, but of any size, and keeps them for as long
// as the connection lives. A stored response with one large field (an
// origin's 1 MiB header: Go's client accepts up to 10 MiB of response
// header) costs a fresh copy of it on every HTTP/2 connection that asks
// for it once, held while the connection idles: N idle connections hold N
// copies, charged to no budget. Here 24 connections each ask once (the
// client discards what it reads, holding nothing); the heap should not
// grow by a copy per connection (a bound expected: intern only short
// values, say up to 1 KiB).
func TestS71InternedFieldValuesAreBoundedInBytes(t *testing.T) {
	const conns, big = 24, 1 << 20
	srv := &Server{Handler: http.NotFoundHandler(),
		Hits:   &rvAnswerer{extra: "X-Big: " + strings.Repeat("v", big) + "\r\n", body: []byte("hi")},
		Fields: hitpath.NewFields(hitpath.Config{})}
	addr := rvServer(t, srv)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	f := rvGet("/")
	for i := 0; i+1 < len(f); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: f[i], Value: f[i+1]})
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		fr := http2.NewFramer(nc, nil)
		_, _ = nc.Write([]byte(http2.ClientPreface))
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		d := &countingDiscard{}
		go func() { _, _ = io.Copy(d, nc) }()
		deadline := time.Now().Add(5 * time.Second)
		for d.n.Load() < big/2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if d.n.Load() < big/2 {
			t.Fatalf("conn %d: the answer did not come (%d bytes)", i, d.n.Load())
		}
		// The connection stays open and idle (closed at cleanup).
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d idle connections that each got one hit with a %d KiB field: heap grew %d MiB", conns, big>>10, grew>>20)
	if grew > conns*big/2 {
		t.Errorf("each idle connection keeps its own copy of the large field: %d MiB for %d connections", grew>>20, conns)
	}
}
