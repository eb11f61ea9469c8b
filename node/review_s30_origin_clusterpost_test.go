package node

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// s30PostOrigin records every POST it receives: path -> bodies.
type s30PostOrigin struct {
	*httptest.Server
	mu    sync.Mutex
	posts map[string][]string
}

func newS30PostOrigin(t *testing.T, delay time.Duration) *s30PostOrigin {
	o := &s30PostOrigin{posts: map[string][]string{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			o.mu.Lock()
			o.posts[r.URL.Path] = append(o.posts[r.URL.Path], string(b))
			o.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, "order="+r.URL.Path)
			return
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *s30PostOrigin) got(path string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.posts[path]...)
}

func startS30Cluster(t *testing.T, siteYAML string) (a, b *s7Node) {
	t.Helper()
	clA, clB := freeAddr(t), freeAddr(t)
	clusterYAML := func(id string, cl string) string {
		return "node_id: " + id + "\ncluster: {listen: '" + cl + "', peers: 'a=" + clA + ",b=" + clB + "', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n"
	}
	start := func(id, cl string) *s7Node {
		s := &s7Node{file: t.TempDir() + "/edge.yaml", pub: freeAddr(t), adm: freeAddr(t), t: t}
		s.writeRaw(clusterYAML(id, cl) + siteYAML)
		s.run()
		return s
	}
	a, b = start("a", clA), start("b", clB)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if len(a.cluster.Peers()) >= 1 && len(b.cluster.Peers()) >= 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	return a, b
}

// A review found (now mended): in a cluster (two nodes, routing.mode hybrid, the default), a
// POST is a pass that goes through the cluster fetcher like a miss: for
// every URL whose home is the other node, the ingress "climbs" to that
// peer with cluster.peerRequest, which copies method, target and headers
// but sets Body = http.NoBody. The peer then forwards the POST to the
// origin with an empty body (Content-Length: 0). Steps: start nodes a and
// b with one site; POST 30 JSON orders (distinct paths /checkout/N) to a.
// Expected: the origin receives each POST once with its JSON. Got: about
// half (the URLs homed on b) reach the origin with an empty body, and the
// client is answered the origin's reply to the empty request (200 here).
// A shop behind a two-node edge loses the payload of half its orders,
// logins, form posts and API writes.
func TestS30OriginClusterPostReachesOriginOnceWithItsBody(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clustered nodes")
	}
	o := newS30PostOrigin(t, 0)
	a, _ := startS30Cluster(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	bad := 0
	for i := range 30 {
		path := fmt.Sprintf("/checkout/%d", i)
		body := fmt.Sprintf(`{"order":%d}`, i)
		resp, _ := rawAsk(t, a.pub, "POST "+path+" HTTP/1.1\r\nHost: shop.test\r\nContent-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\nConnection: close\r\n\r\n"+body)
		got := o.got(path)
		if resp.StatusCode != 200 || len(got) != 1 || got[0] != body {
			bad++
			t.Logf("%s: status %d, origin saw %q", path, resp.StatusCode, got)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 30 POSTs did not reach the origin exactly once with their body", bad)
	}
}

// A review found (now mended): in a cluster, a POST relayed through the peer that takes longer
// than the ingress's wait for a peer's header (4 × cluster.peer_timeout,
// 2 s by default) is sent again, by the ingress, straight to the origin:
// climb fails over from a peer that did not answer in time to
// c.origin.Fetch with no regard for the method. Steps: origin takes 2.5 s
// to answer a POST (a payment call); POST to node a for URLs homed on b.
// Expected: each order reaches the origin once. Got: the origin sees the
// POST twice for every URL homed on the peer (once from b, body lost,
// once from a with the body): a double order for every slow checkout.
func TestS30OriginClusterSlowPostIsSentTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clustered nodes")
	}
	o := newS30PostOrigin(t, 2500*time.Millisecond)
	a, _ := startS30Cluster(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/pay/%d", i)
			body := fmt.Sprintf(`{"pay":%d}`, i)
			rawAsk(t, a.pub, "POST "+path+" HTTP/1.1\r\nHost: shop.test\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\nConnection: close\r\n\r\n"+body)
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	twice := 0
	for i := range 8 {
		path := fmt.Sprintf("/pay/%d", i)
		if got := o.got(path); len(got) != 1 {
			twice++
			t.Logf("%s: origin saw %d POSTs: %q", path, len(got), got)
		}
	}
	if twice > 0 {
		t.Fatalf("%d of 8 slow POSTs reached the origin more than once (double orders)", twice)
	}
}

// A review found (now mended): in a cluster, a POST relayed through the peer whose origin
// answers 5xx is sent again by the ingress straight to the origin (climbTo
// treats any peer answer >= 500 as a failed hop and climb falls back to
// the origin for every method). Steps: the origin answers 500 to a POST
// it cannot parse (the peer sent it without its body); POST to node a for
// URLs homed on b. Expected: one POST per order reaches the origin, and
// the client gets the origin's answer. Got: two POSTs per URL homed on b
// (one empty via b, one with the body via a). With an origin that answers
// 500/503 after committing (a payment gateway timing out behind it), each
// such POST is a double order.
func TestS30OriginCluster5xxPostIsSentTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clustered nodes")
	}
	var mu sync.Mutex
	seen := map[string]int{}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		if !strings.HasPrefix(string(b), "{") {
			http.Error(w, "cannot parse order", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(o.Close)
	a, _ := startS30Cluster(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	twice := 0
	for i := range 20 {
		path := fmt.Sprintf("/order/%d", i)
		body := fmt.Sprintf(`{"order":%d}`, i)
		rawAsk(t, a.pub, "POST "+path+" HTTP/1.1\r\nHost: shop.test\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\nConnection: close\r\n\r\n"+body)
		mu.Lock()
		n := seen[path]
		mu.Unlock()
		if n != 1 {
			twice++
			t.Logf("%s: origin saw %d POSTs", path, n)
		}
	}
	if twice > 0 {
		t.Fatalf("%d of 20 POSTs reached the origin more than once", twice)
	}
}
