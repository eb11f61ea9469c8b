package proxy

import (
	"context"
	"io"
	"net/http"
	"testing"
)

// lastWithEOF is a body of known length as net/http reads it: its last
// bytes come with io.EOF.
type lastWithEOF struct{ left int }

func (b *lastWithEOF) Read(p []byte) (int, error) {
	n := min(len(p), b.left, 1000)
	b.left -= n
	if b.left == 0 {
		return n, io.EOF
	}
	return n, nil
}

// TestFillCommitsBeforeTheLastByteIsRead: a fill stores its entry before
// any reader gets the body's last byte, so that a client that has read a
// whole answer and asks again finds the stored entry (a hit), not the fill
// still in flight (an end-to-end test saw "collapsed" on a loaded machine).
func TestFillCommitsBeforeTheLastByteIsRead(t *testing.T) {
	p := newTestProxy(t, nil)
	const size = 10_000
	for i := range 300 {
		f := newFill(0, fillWait{})
		f.entry = &Entry{Status: 200, Header: http.Header{}}
		rd, _ := f.reader()
		committed, late := false, false
		f.commit = func(*Entry) func() { committed, late = true, rd.off == size; return nil } // under f.mu, as next moves off
		go func() { _ = f.pump(&lastWithEOF{left: size}, size, 1<<20, p.h) }()
		n := 0
		for {
			b, err := rd.next(context.Background(), nil)
			n += len(b)
			if err != nil {
				break
			}
		}
		rd.Close()
		f.mu.Lock()
		c, l := committed, late
		f.mu.Unlock()
		if n != size || !c || l {
			t.Fatalf("run %d: read %d bytes, committed %v, the reader had the last byte first %v", i, n, c, l)
		}
	}
}
