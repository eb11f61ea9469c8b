package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// lmRangeOrigin: a sliceable object validated by Last-Modified only (no
// ETag: sliceable, but a peer's answer of it is not resumable).
type lmRangeOrigin struct {
	size int
	n    atomic.Int64
}

func (o *lmRangeOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.n.Add(1)
	h := http.Header{"Cache-Control": {"max-age=600"}, "Last-Modified": {"Mon, 02 Jan 2006 15:04:05 GMT"}, "Content-Type": {"application/octet-stream"}}
	return rangeAnswer(h, bytes.Repeat([]byte{'q'}, o.size), fr.Req.Header.Get("Range")), nil
}

// TestAProbeOfAPartlyStoredSlicedObjectIsAMiss (a hostile review's): B
// holds X's manifest and slice 0 only, and A probes B for X. At 5cfbeaa
// B's only-if-cached slicer answered 200, sent slice 0 and cut the
// connection at slice 1 (errSliceNotCached after the header): the probe
// counted as a hit, and a streamed peer answer (any answer above
// cluster.peer_whole_bytes: every sliced object with the default sizes)
// that is not resumable reached A's client cut short. B now answers 504.
func TestAProbeOfAPartlyStoredSlicedObjectIsAMiss(t *testing.T) {
	const sb = 16384
	origin := &lmRangeOrigin{size: 3*sb - 100}
	nodes := startRealNodesWith(t, []string{"A", "B"}, routing.ModeRing, 2, 400*time.Millisecond, origin, 1000,
		nodeTuning{proxy: func(pc *proxy.Config) { pc.SliceBytes = sb }, peerWhole: 1024})
	a, b := nodes["A"], nodes["B"]
	path := objectWhere(t, a, func(key string) bool { return homeOf(a, key) == "B" })
	primeSlice0(t, b, path) // B (the home) keeps the manifest and slice 0 only
	// A's probe for X, whole (what a miss at A sends B with selection on).
	out := httptest.NewRequest("GET", "http://site.example"+path, nil)
	out.RequestURI = ""
	out.Header.Set("Cache-Control", "only-if-cached")
	out.Header.Set(hdrMode, hopProbe.String())
	out.Header.Set(hdrHop, "1")
	resp, err := a.c.send(out, a.c.peer("B"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusGatewayTimeout {
		resp.Body.Close()
		return // a miss: the ingress's climb goes on
	}
	t.Errorf("B answered the probe %d, want 504: it lacks a slice of the object", resp.StatusCode)
	// What probe() does with a winner: settle it (peer_whole_bytes 1 KiB:
	// streamed, as any sliced object with the default sizes).
	u, _ := url.Parse("http://site.example" + path)
	fr := proxy.FetchRequest{Key: a.ph.URLKey(u), Req: out}
	res, ok := a.c.settle(context.Background(), fr, resp, "B")
	if !ok {
		t.Logf("settle: a failed hop (the climb goes on): held")
		return
	}
	body, rerr := io.ReadAll(res.Resp.Body)
	res.Resp.Body.Close()
	t.Logf("settled as served (From %s, InMemory %v, length %d): %d of %d bytes, err %v", res.From, res.InMemory, res.Resp.ContentLength, len(body), origin.size, rerr)
	if rerr != nil || len(body) != origin.size {
		t.Errorf("the probe answer settled as served gave %d of %d bytes (%v): B answered a probe 200 and cut it at a slice it lacks (errSliceNotCached after the header); A streams it to its client, which gets a cut body", len(body), origin.size, rerr)
	}
}
