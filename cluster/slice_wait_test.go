package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// rangeOrigin serves a 4000-byte object per path after a pause, with a
// strong ETag and Range support (206), so that the proxy slices it.
type rangeOrigin struct {
	pause time.Duration
	n     atomic.Int64
}

const rangeObjectSize = 4000

func (o *rangeOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.n.Add(1)
	select {
	case <-time.After(o.pause):
	case <-ctx.Done():
		return proxy.Result{}, ctx.Err()
	}
	h := http.Header{"Cache-Control": {"max-age=600"}, "Etag": {`"v1"`}, "Content-Type": {"application/octet-stream"}}
	return rangeAnswer(h, bytes.Repeat([]byte{'x'}, rangeObjectSize), fr.Req.Header.Get("Range")), nil
}

// rangeAnswer answers body under h, or the part a "bytes=a-b" (or "a-")
// Range asks for with a 206, as a test origin with Range support does.
func rangeAnswer(h http.Header, body []byte, rg string) proxy.Result {
	if strings.HasPrefix(rg, "bytes=") {
		a, b, _ := strings.Cut(strings.TrimPrefix(rg, "bytes="), "-")
		ai, _ := strconv.Atoi(a)
		bi, err := strconv.Atoi(b)
		if err != nil || bi >= len(body) {
			bi = len(body) - 1
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", ai, bi, len(body)))
		part := body[ai : bi+1]
		return proxy.Result{Resp: &http.Response{StatusCode: http.StatusPartialContent, Header: h, Body: io.NopCloser(bytes.NewReader(part)), ContentLength: int64(len(part))}, Keep: true}
	}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}
}

// TestSliceProbeFlightsDoNotWaitOnEachOther (a hostile review's): a Range
// request for an object not in the store is answered by probeSliced,
// whose flight every request joined, a peer's climb included, with no
// wait order. Two nodes of a tree each climb through the other: A's probe
// climbed to B and joined B's probe flight, which climbed to A and joined
// A's, and every client waited for the peer header timeout (4 ×
// peer_timeout): tree 5 rounds of 16, hybrid-hot 25 requests of 48.
// The flights now keep the wait order (proxy/flights.go).
func TestSliceProbeFlightsDoNotWaitOnEachOther(t *testing.T) {
	for _, c := range []struct {
		name string
		mode routing.Mode
		hot  int
	}{{"tree", routing.ModeTree, 1000}, {"hybrid-hot", routing.ModeHybrid, 1}} {
		t.Run(c.name, func(t *testing.T) { sliceProbeFlights(t, c.mode, c.hot) })
	}
}

func sliceProbeFlights(t *testing.T, mode routing.Mode, hot int) {
	const pt = 500 * time.Millisecond
	origin := &rangeOrigin{pause: 100 * time.Millisecond}
	ids := []string{"A", "B", "C"}
	nodes := startRealNodesWith(t, ids, mode, 2, pt, origin, hot, nodeTuning{proxy: func(pc *proxy.Config) { pc.SliceBytes = 1024 }})
	for round := range 16 {
		path := "/big/" + strconv.Itoa(round)
		took := askEveryNodeAtOnce(t, ids, func(id string) {
			w := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "http://site.example"+path, nil)
			req.Header.Set("Range", "bytes=0-99")
			nodes[id].ph.ServeHTTP(w, req)
			if w.Code != http.StatusPartialContent || w.Body.Len() != 100 {
				t.Errorf("%s at %s: %d, %d bytes", path, id, w.Code, w.Body.Len())
			}
		})
		t.Logf("%s: %v (origin fetches so far %d)", path, took, origin.n.Load())
		noneWaitedOut(t, path, took, pt, "the slice probe flights")
	}
}

// TestSliceFlightsDoNotWaitOnEachOther (a hostile review's): once every
// node holds an object's manifest, a slice not yet stored is fetched by
// slicer.slice in a flight that a peer's climb for the same slice joined
// unchecked, as the probe flight above: concurrent readers of one slice
// at three tree nodes waited on each other for the peer header timeout
// (3 rounds of 12).
func TestSliceFlightsDoNotWaitOnEachOther(t *testing.T) {
	const pt = 500 * time.Millisecond
	origin := &rangeOrigin{pause: 100 * time.Millisecond}
	ids := []string{"A", "B", "C"}
	nodes := startRealNodesWith(t, ids, routing.ModeTree, 2, pt, origin, 1000, nodeTuning{proxy: func(pc *proxy.Config) { pc.SliceBytes = 1024 }})
	get := func(id, path, rg string) (int, int) {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "http://site.example"+path, nil)
		req.Header.Set("Range", rg)
		nodes[id].ph.ServeHTTP(w, req)
		return w.Code, w.Body.Len()
	}
	for round := range 12 {
		path := "/sliced/" + strconv.Itoa(round)
		// Prime: every node asks for slice 0 until it keeps the manifest
		// (the ingress q-rule keeps it on the second request).
		for range 3 {
			for _, id := range ids {
				get(id, path, "bytes=0-9")
			}
		}
		took := askEveryNodeAtOnce(t, ids, func(id string) {
			if code, n := get(id, path, "bytes=3000-3099"); code != http.StatusPartialContent || n != 100 { // slice 2: nobody holds it
				t.Errorf("%s at %s: %d, %d bytes", path, id, code, n)
			}
		})
		t.Logf("%s: %v (origin fetches so far %d)", path, took, origin.n.Load())
		noneWaitedOut(t, path, took, pt, "the slice flights")
	}
}
