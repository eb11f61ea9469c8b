package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// pageOrigin answers every page with a cacheable body of its size.
type pageOrigin struct{ body string }

func (o pageOrigin) Fetch(_ context.Context, _ proxy.FetchRequest) (proxy.Result, error) {
	h := http.Header{"Cache-Control": {"max-age=600"}, "Content-Type": {"text/plain"}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(o.body)), ContentLength: int64(len(o.body))}, Keep: true}, nil
}

// BenchmarkPeerHop is a miss at an ingress answered by the page's home
// over the peer protocol (real loopback sockets, the real caching handler
// on both sides): the ingress's miss path, the signed request, the home's
// hit, the signed answer read whole and verified, the fill. Each iteration
// asks the ingress for a page it does not hold; the home holds them all.
// Its CPU profile is where a peer-answered page's cost on the nodes goes
// (scripts/peerlatency measures what a client sees).
//
//	go test ./cluster -run '^$' -bench PeerHop -benchmem
func BenchmarkPeerHop(b *testing.B) {
	origin := pageOrigin{body: strings.Repeat("x", 4096)}
	nodes := startRealNodes(b, []string{"A", "H"}, routing.ModeHybrid, 2, 500*time.Millisecond, origin)
	a, home := nodes["A"], nodes["H"]
	a.c.cfg.PeerWholeBytes = DefaultConfig().PeerWholeBytes // read whole, as a node does by default
	// Pages whose home is H, filled there.
	var paths []string
	for i := 0; len(paths) < 128; i++ { // 512 KiB: within the home's 1 MiB store
		p := "/p/" + strconv.Itoa(i)
		if rankingOf(a, p)[0] == "H" {
			paths = append(paths, p)
			home.ph.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://site.example"+p, nil))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := paths[i%len(paths)]
		w := httptest.NewRecorder()
		a.ph.ServeHTTP(w, httptest.NewRequest("GET", "http://site.example"+p, nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Cache-Status"), "fwd=") {
			b.Fatalf("%s: %d %q: want a page forwarded to its home", p, w.Code, w.Header().Get("Cache-Status"))
		}
		b.StopTimer()
		u, _ := url.Parse("http://site.example" + p)
		a.ph.Store().Remove(a.ph.URLKey(u)) // asked again, it must go to the home again
		b.StartTimer()
	}
}
