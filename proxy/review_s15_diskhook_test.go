package proxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// HOLDS: with the store's OnRemove set (after AttachDisk, as the cluster
// does) and a disk tier small enough to evict, concurrent misses, hits,
// purges and replacements through the handler neither race (-race) nor
// deadlock, and the hook hears the disk-only keys that left.
func TestS15DiskOnRemoveUnderLoadHolds(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, strings.Repeat("x", 2000)+r.URL.Path)
	}, nil)
	tier, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 40 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	var heard atomic.Int64
	h.store.OnRemove(func(string) { heard.Add(1) })
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				p := "/p" + strconv.Itoa((g*13+i)%50)
				serve(h, "GET", p)
				if i%7 == 0 {
					h.store.Remove(h.requestKey(httptestRequestWithBody("GET", p, "")))
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(4 * time.Second):
		t.Fatal("deadlock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = tier.Flush(ctx)
	if heard.Load() == 0 {
		t.Error("nothing heard although the disk tier evicted and purges ran")
	}
}
