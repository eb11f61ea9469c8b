package cluster

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/iotest"
)

type reviewBudget struct {
	mu              sync.Mutex
	left, held, max int64
	refuseAt        int // refuse the n-th charge (1-based), 0: never
	charges         int
}

func (b *reviewBudget) Charge(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.charges++
	if n <= 0 {
		panic("charge of a non-positive amount")
	}
	if b.charges == b.refuseAt || n > b.left {
		return false
	}
	b.left -= n
	b.held += n
	b.max = max(b.max, b.held)
	return true
}

func (b *reviewBudget) Release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += n
	b.held -= n
	if b.held < 0 {
		panic("released more than charged")
	}
}

func TestReviewReadStartAccounting(t *testing.T) {
	sizes := []int{0, 1, 4095, 4096, 8191, 8192, 8193, 16383, 16384, 16385, 32767, 32768, 32769, 65536, 65537, 100000, 300000}
	limits := []int64{0, 1, 100, 8191, 8192, 8193, 16384, 32768, 65536, 98304, 256 << 10}
	for _, size := range sizes {
		for _, limit := range limits {
			for _, oneByte := range []bool{false, true} {
				for _, refuse := range []int{0, 1, 2, 3, 4} {
					data := bytes.Repeat([]byte{'x'}, size)
					for i := range data {
						data[i] = byte(i * 7)
					}
					var r io.Reader = bytes.NewReader(data)
					if oneByte {
						r = iotest.OneByteReader(r)
					}
					b := &reviewBudget{left: 1 << 30, refuseAt: refuse}
					c := &Cluster{budget: b}
					a := c.readStart(r, limit)
					if a.err != nil {
						t.Fatalf("size %d limit %d: %v", size, limit, a.err)
					}
					if a.charged != int64(cap(a.head)) || a.charged != b.held {
						t.Errorf("size %d limit %d refuse %d: charged %d, cap %d, budget holds %d", size, limit, refuse, a.charged, cap(a.head), b.held)
					}
					if !bytes.Equal(a.head, data[:len(a.head)]) {
						t.Errorf("size %d limit %d: head differs", size, limit)
					}
					wantMore := int64(size) > limit
					if !a.more && (wantMore || len(a.head) != size) {
						t.Errorf("size %d limit %d refuse %d: more=false with %d bytes", size, limit, refuse, len(a.head))
					}
					if refuse == 0 && a.more != wantMore {
						t.Errorf("size %d limit %d: more=%v", size, limit, a.more)
					}
					if int64(len(a.head)) > limit+1 || int64(cap(a.head)) > limit+1 {
						t.Errorf("size %d limit %d: head len %d cap %d beyond limit+1", size, limit, len(a.head), cap(a.head))
					}
					c.aheadRelease(a.charged)()
					if b.held != 0 {
						t.Errorf("size %d limit %d: %d left charged", size, limit, b.held)
					}
				}
			}
		}
	}
}

func TestReviewReadStartErrorReleases(t *testing.T) {
	for _, at := range []int{0, 1, 8192, 8193, 20000, 40000} {
		b := &reviewBudget{left: 1 << 30}
		c := &Cluster{budget: b}
		r := io.MultiReader(bytes.NewReader(make([]byte, at)), iotest.ErrReader(errors.New("boom")))
		a := c.readStart(r, 1<<20)
		if a.err == nil || a.charged != 0 || b.held != 0 {
			t.Errorf("error after %d bytes: err %v, charged %d, budget holds %d", at, a.err, a.charged, b.held)
		}
	}
}
