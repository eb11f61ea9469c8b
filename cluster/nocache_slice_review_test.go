package cluster

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// abRangeOrigin: a sliceable object, its bytes and ETag the
// current version's ('a' × size, "v1"; 'b' × size, "v2").
type abRangeOrigin struct {
	size    int
	version atomic.Int32
}

func (o *abRangeOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	v := o.version.Load()
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"application/octet-stream"},
		"Etag": {`"v` + string(rune('0'+v)) + `"`}}
	return rangeAnswer(h, bytes.Repeat([]byte{byte('a' + v - 1)}, o.size), fr.Req.Header.Get("Range")), nil
}

// TestNoCacheRangeDoesNotJoinAPeersStoredAnswer: probeable keeps a
// request with its own Cache-Control off the probes, and a whole miss
// with no-cache never joins another request's fill (fetchAndServe checks
// the fill's entry against the joiner's directives). But a Range request
// for an object not in the store goes through probeSliced, whose flight
// (h.slices.do on key+"\x00probe") any Range request joins, whatever its
// directives. The leader (no Cache-Control) climbs to the home H, which
// answers from its store the copy the origin has since replaced; the
// no-cache request joins and is answered with it.
func TestNoCacheRangeDoesNotJoinAPeersStoredAnswer(t *testing.T) {
	// alone: the control, the no-cache request with nobody to join.
	t.Run("alone", func(t *testing.T) { noCacheRange(t, false, "bytes=0-99") })
	// whole-beside-a-plain-request: the same without Range (fetchAndServe's
	// join, which checks the joiner's directives).
	t.Run("whole-beside-a-plain-request", func(t *testing.T) { noCacheRange(t, true, "") })
	t.Run("beside-a-plain-request", func(t *testing.T) { noCacheRange(t, true, "bytes=0-99") })
}

func noCacheRange(t *testing.T, concurrent bool, rg string) {
	const sb = 16384
	o := &abRangeOrigin{size: 3*sb - 100}
	o.version.Store(1)
	nodes := startRealNodesWith(t, []string{"A", "H"}, routing.ModeHybrid, 2, 2*time.Second, o, 1000,
		nodeTuning{proxy: func(pc *proxy.Config) { pc.SliceBytes = sb }})
	a, h := nodes["A"], nodes["H"]
	path := objectWhere(t, a, func(key string) bool { return homeOf(a, key) == "H" })
	get := func(n *realNode, rng string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://site.example"+path, nil)
		if rng != "" {
			r.Header.Set("Range", rng)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		func() {
			defer func() {
				if v := recover(); v != nil && v != http.ErrAbortHandler {
					panic(v)
				} else if v != nil {
					w.Code = -1 // cut mid-body (serveSliced)
				}
			}()
			n.ph.ServeHTTP(w, r)
		}()
		return w
	}
	// H (the home) keeps v1, whole.
	if w := get(h, ""); w.Code != 200 || w.Body.Len() != o.size {
		t.Fatalf("filling H: %d %d", w.Code, w.Body.Len())
	}
	h.ph.Wait()
	if w := get(h, "bytes=0-99"); !strings.Contains(w.Header().Get("Cache-Status"), "H; hit") {
		t.Fatalf("H does not hold the object: %q", w.Header().Get("Cache-Status"))
	}
	// A has asked for it once (its ingress q-rule keeps the second).
	if w := get(a, "bytes=0-99"); w.Code != 206 || w.Body.String() != strings.Repeat("a", 100) {
		t.Fatalf("A, first: %d %q", w.Code, w.Body.String())
	}
	a.ph.Wait()
	o.version.Store(2) // the object changes at the origin

	// H is slow to answer climbs for a moment (so two requests meet at A).
	until := time.Now().Add(400 * time.Millisecond)
	hold := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopClimb.String() {
			time.Sleep(time.Until(until))
		}
	}
	h.hold.Store(&hold)

	var wg sync.WaitGroup
	if concurrent {
		var plain *httptest.ResponseRecorder
		wg.Go(func() { plain = get(a, rg) }) // a client without directives
		defer func() {
			t.Logf("plain:    %d %q… Cache-Status %q ETag %s", plain.Code, plain.Body.String()[:min(8, plain.Body.Len())], plain.Header().Get("Cache-Status"), plain.Header().Get("ETag"))
		}()
		time.Sleep(100 * time.Millisecond)
	}
	nc := get(a, rg, "Cache-Control", "no-cache") // a reload
	wg.Wait()
	t.Logf("no-cache: %d %q… Cache-Status %q ETag %s", nc.Code, nc.Body.String()[:min(8, nc.Body.Len())], nc.Header().Get("Cache-Status"), nc.Header().Get("ETag"))
	if strings.HasPrefix(nc.Body.String(), "a") {
		t.Errorf("a no-cache Range request (honoured) was answered with the home's stored copy the origin no longer serves: it joined another request's slice probe")
	}
}
