package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/edgecache/edge/disk"
)

// tierStartup measures the edge's own disk tier with n small objects: the
// start after a clean shutdown (index snapshot) and after a crash (scan of
// every file), and the RAM its index takes per object.
func tierStartup(dir string, n int) {
	_ = os.RemoveAll(dir)
	t, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 1 << 40, QueueBytes: 1 << 30})
	must(err)
	hdr := http.Header{"Content-Type": {"text/html"}, "Cache-Control": {"public, max-age=3600"}, "Etag": {`"x"`}}
	body := make([]byte, 512)
	start := time.Now()
	for i := 0; i < n; i++ {
		t.Write(&disk.Record{Key: "https://site.example/p/" + strconv.Itoa(i), Status: 200, Header: hdr, Body: body,
			RequestTime: start, ResponseTime: start})
		if i%4000 == 3999 {
			must(t.Flush(context.Background()))
		}
	}
	must(t.Flush(context.Background()))
	fmt.Printf("tier: wrote %d objects in %.1f s (%.0f µs each)\n", n, time.Since(start).Seconds(), float64(time.Since(start).Microseconds())/float64(n))
	must(t.Close(context.Background()))

	runtime.GC()
	debug.FreeOSMemory()
	rss0 := rss()
	t, err = disk.Open(disk.Options{Dir: dir, MaxBytes: 1 << 40})
	must(err)
	rc := t.Recovery()
	runtime.GC()
	ram := float64(rss()-rss0) / float64(n)
	fmt.Printf("tier: clean restart (snapshot %v): %d objects in %.2f s; index RAM %.0f B/object\n", rc.FromSnapshot, rc.Objects, rc.Duration.Seconds(), ram)
	must(t.Close(context.Background()))
	must(os.Remove(filepath.Join(dir, "v1", "index.snap"))) // as a crash leaves it
	t, err = disk.Open(disk.Options{Dir: dir, MaxBytes: 1 << 40})
	must(err)
	rc = t.Recovery()
	fmt.Printf("tier: restart after a crash (scan): %d objects in %.2f s, %d discarded\n", rc.Objects, rc.Duration.Seconds(), rc.Discarded)
	must(t.Close(context.Background()))
	_ = os.RemoveAll(dir)
}
