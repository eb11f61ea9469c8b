package cluster

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

type nopFetcher struct{}

func (nopFetcher) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, Keep: true}, nil
}

func mustMode(s string) routing.Mode {
	m, err := routing.ParseMode(s)
	if err != nil {
		panic(err)
	}
	return m
}

func newTestCluster(t testing.TB, mode string, peers map[string]string) *Cluster {
	return newTestClusterPlaced(t, mode, peers, routing.PlacementPaper)
}

// playing makes c take peer requests addressed to id (requests name the
// node they are for): a test server that stands for the peer a sender
// knows as id.
func playing(c *Cluster, id string) *Cluster {
	c.peerAuth = newVerifier(c.cfg.Secret, id)
	return c
}

func newTestClusterPlaced(t testing.TB, mode string, peers map[string]string, placement routing.Placement) *Cluster {
	t.Helper()
	store := proxy.NewStore(1<<20, 4)
	c, err := New(Config{
		NodeID: "n0", Listen: "127.0.0.1:0", Peers: peers, Secret: []byte("cluster-test-secret"), Period: 100 * time.Millisecond,
		Detector: "ml", Selection: SelectionFNA, Mode: mustMode(mode), Placement: placement, Arity: 4, Q: 2, HotThreshold: 3, PeerTimeout: 200 * time.Millisecond,
		Indicator: indicators.DefaultFilterConfig(1000),
	}, nopFetcher{}, store, NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPlanShapes: hybrid sends a cold page to its home only, and spreads it
// over the tree once hot, with the home on every path (last, unless the
// tree already passes through it); ring uses the owner; no plan ever
// contains this node or a peer twice.
func TestPlanShapes(t *testing.T) {
	peers := map[string]string{}
	var members []routing.Member
	members = append(members, routing.Member{ID: "n0"})
	for i := 1; i < 30; i++ {
		id := "n" + strconv.Itoa(i)
		peers[id] = "127.0.0.1:1"
		members = append(members, routing.Member{ID: id})
	}
	for _, placement := range []routing.Placement{routing.PlacementPaper, routing.PlacementDistinct} {
		c := newTestClusterPlaced(t, "hybrid", peers, placement)
		if err := c.router.SetView(members); err != nil {
			t.Fatal(err)
		}
		ring := c.router.Ring()
		for p := range 50 {
			kh := routing.KeyHash("http://h/p/" + strconv.Itoa(p))
			// The home, derived independently: rank 2 of the page's tree.
			want := ring.Member(ring.RankMember(kh, 2))
			if placement == routing.PlacementDistinct {
				want = ring.Member(int(ring.Ranking(nil, kh)[0]))
			}
			_, home, _ := c.planFor(kh, false, func(n int) int { return n - 1 })
			if home != want {
				t.Fatalf("%v: page %d home %s, want %s", placement, p, home, want)
			}
			for req := 1; req <= 5; req++ {
				path, _, _ := c.plan(kh)
				seen := map[string]bool{}
				for _, h := range path {
					if h.id == "n0" || seen[h.id] {
						t.Fatalf("page %d: bad path %v", p, path)
					}
					seen[h.id] = true
				}
				if home == "n0" {
					continue
				}
				if !seen[home] {
					t.Fatalf("page %d request %d: path %v misses the home %s", p, req, path, home)
				}
				if req < 3 && len(path) != 1 {
					t.Fatalf("page %d cold request %d: path %v, want the home only", p, req, path)
				}
			}
		}
	}
	r := newTestCluster(t, "ring", peers)
	_ = r.router.SetView(members)
	kh := routing.KeyHash("x")
	if path, _, _ := r.plan(kh); len(path) > 1 {
		t.Errorf("ring plan %v", path)
	}
}

func TestPeerHandlerGuards(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	h := c.PeerHandler(func(w http.ResponseWriter, r *http.Request, in proxy.Inbound) {
		if rt, ok := in.Route.(*route); !ok || rt == nil || !in.Relayed {
			t.Errorf("inbound %+v: want a relayed request with its route", in)
		}
		w.WriteHeader(204)
	}, func(proxy.PurgeRequest) (int, error) { return 0, nil })
	send := func(hop string) int {
		r := httptest.NewRequest("GET", "http://h/p/1", nil)
		r.Header.Set(hdrMode, "climb")
		r.Header.Set(hdrHop, hop)
		sign(c.cfg.Secret, "n1", c.cfg.NodeID, r)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := send("1"); code != 204 {
		t.Errorf("valid climb: %d", code)
	}
	if code := send("99"); code != http.StatusLoopDetected {
		t.Errorf("hop 99: %d, want 508", code)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://h/p/1", nil))
	if w.Code != http.StatusForbidden {
		t.Errorf("unsigned: %d", w.Code)
	}
}

// ignoreInbound serves peer data requests with a plain handler, for tests
// that look only at the request.
func ignoreInbound(f http.HandlerFunc) func(http.ResponseWriter, *http.Request, proxy.Inbound) {
	return func(w http.ResponseWriter, r *http.Request, _ proxy.Inbound) { f(w, r) }
}
