package node

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// s24lClusterJunk sends one round of forged traffic to a node's cluster
// port (UDP: heartbeats and membership; TCP: the peer listener), every
// forged id, region, site and path tagged with tag.
func s24lClusterJunk(t *testing.T, cl, tag string, k int) {
	t.Helper()
	u, err := net.Dial("udp", cl)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	rnd := rand.New(rand.NewPCG(1, uint64(len(tag))))
	for i := 0; i < k; i++ {
		v := fmt.Sprintf("%s%d", tag, i)
		for _, p := range [][]byte{
			[]byte(v), []byte("EDGE" + v), append([]byte{0, 1, 2, 3}, v...), append([]byte{1}, v...),
			func() []byte {
				b := make([]byte, 150)
				for j := range b {
					b[j] = byte(rnd.Uint32())
				}
				copy(b[20:], v)
				return b
			}(),
		} {
			_, _ = u.Write(p)
		}
		heads := []string{
			"GET /p/" + v + " HTTP/1.1\r\nHost: a.test\r\nEdge-Node: " + v + "\r\nEdge-To: a\r\nEdge-Time: " + fmt.Sprint(time.Now().UnixNano()) + "\r\nEdge-Nonce: " + v + "\r\nEdge-Auth: " + strings.Repeat("ab", 32) + "\r\nEdge-Site: " + v + "\r\nEdge-Mode: " + v + "\r\nEdge-Path: " + v + ":1\r\nEdge-Region: " + v + "\r\nConnection: close\r\n\r\n",
			"GET /p/" + v + " HTTP/1.1\r\nHost: a.test\r\nEdge-Node: b\r\nEdge-To: " + v + "\r\nEdge-Time: x" + v + "\r\nEdge-Auth: " + v + "\r\nConnection: close\r\n\r\n",
			"POST /purge HTTP/1.1\r\nHost: a.test\r\nEdge-Node: " + v + "\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
			"GET /indicator/" + v + " HTTP/1.1\r\nHost: " + v + "\r\nConnection: close\r\n\r\n",
			v + " /" + v + " HTTP/1.1\r\nHost: " + v + "\r\nConnection: close\r\n\r\n",
			"\x00\x01junk " + v + "\r\n\r\n",
		}
		for _, h := range heads {
			c, err := net.DialTimeout("tcp", cl, 2*time.Second)
			if err != nil {
				continue
			}
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = io.WriteString(c, h)
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}
}

// s24lExplorer asks the unauthenticated route explorer about tagged URLs
// and hosts.
func s24lExplorer(t *testing.T, adm, tag string, k int) {
	t.Helper()
	for i := 0; i < k; i++ {
		v := fmt.Sprintf("%s%d", tag, i)
		for _, u := range []string{"http://a.test/" + v, "http://" + v + ".test/x", "https://A.TEST.:99/" + v + "?q=" + v} {
			_, _ = getBody(t, "http://"+adm+"/status?url="+url.QueryEscape(u))
			_, _ = getBody(t, "http://"+adm+"/status/route.json?url="+url.QueryEscape(u))
		}
	}
}

// TestS24LabelsClusterJunkAddsNoSeries: forged heartbeats, membership
// packets and peer requests from a stranger (no cluster secret), with
// distinct node ids, regions, sites, modes and paths, add no series in a
// second round and put none of their values in a label; the cluster
// listener's connection gauge (and the route explorer, asked about
// tagged URLs) returns to its baseline and the status page
// reports the same figure as /metrics.
func TestS24LabelsClusterJunkAddsNoSeries(t *testing.T) {
	origin := s24lOrigin(t)
	clA, clB := freeAddr(t), freeAddr(t)
	start := func(id, cl string) *Node {
		return startNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+origin.URL+"'}\ntuning: {hit_path: true}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n")
	}
	a, _ := start("a", clA), start("b", clB)
	adm := a.AdminAddr()
	// Some real traffic between the peers first, so that per-peer series exist.
	for i := range 5 {
		_, _ = getBody(t, "http://"+a.PublicAddr()+fmt.Sprintf("/warm%d", i))
	}
	s24lClusterJunk(t, clA, "warm", 2)
	time.Sleep(200 * time.Millisecond)
	m0 := s24lScrape(t, adm)
	s24lClusterJunk(t, clA, "zqa", 10)
	s24lExplorer(t, adm, "zqa", 10)
	time.Sleep(200 * time.Millisecond)
	m1 := s24lScrape(t, adm)
	s24lClusterJunk(t, clA, "zqb", 10)
	s24lExplorer(t, adm, "zqb", 10)
	time.Sleep(300 * time.Millisecond)
	m2 := s24lScrape(t, adm)
	s0, s1, s2 := s24lEdgeSeries(m0), s24lEdgeSeries(m1), s24lEdgeSeries(m2)
	t.Logf("edge_ series %d, %d, %d; new in A: %v", len(s0), len(s1), len(s2), s24lNew(s0, s1))
	if nw := s24lNew(s1, s2); len(nw) > 0 {
		t.Errorf("round B's forged values added %d series: %s", len(nw), strings.Join(nw, "; "))
	}
	for _, tag := range []string{"zqa", "zqb", "warm"} {
		if l := s24lLabelsWith(s2, tag); len(l) > 0 {
			t.Errorf("labels hold the stranger's value %q: %s", tag, strings.Join(l, "; "))
		}
	}
	for k, v := range m2 {
		if (strings.HasPrefix(k, "edge_heartbeat_rejections_total") || strings.HasPrefix(k, "edge_peer_request_rejections_total") || strings.HasPrefix(k, "edge_membership_rejections_total")) && v != 0 {
			t.Logf("%s %v", k, v)
		}
	}
	// The cluster listener's connections return to what the peers hold.
	deadline := time.Now().Add(3 * time.Second)
	var open float64
	for {
		m := s24lScrape(t, adm)
		open = s24lSum(m, "edge_peer_connections")
		st := s24lStatusJSON(t, adm)
		pc, _ := st["peer_connections"].(map[string]any)
		if pc != nil && pc["open"] == open && open <= s24lSum(m0, "edge_peer_connections") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("edge_peer_connections %v (baseline %v), status page %v", open, s24lSum(m0, "edge_peer_connections"), pc)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = http.StatusOK
}
