package node

import (
	"testing"
	"time"
)

// TestS24LabelsPeerFiguresAgree: when a peer stops, /metrics and the
// status page agree on it: edge_peer_up{peer} against "trusted", and
// edge_peer_suspicions_total{peer} against "suspicions".
func TestS24LabelsPeerFiguresAgree(t *testing.T) {
	origin := s24lOrigin(t)
	clA, clB := freeAddr(t), freeAddr(t)
	start := func(id, cl string) (*Node, func()) {
		return runNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+origin.URL+"'}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n")
	}
	a, _ := start("a", clA)
	_, stopB := start("b", clB)
	adm := a.AdminAddr()
	check := func(wantUp bool, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			m := s24lScrape(t, adm)
			up, hasUp := m[`edge_peer_up{peer="b"}`]
			sus := m[`edge_peer_suspicions_total{peer="b"}`]
			var trusted any
			var pSus float64
			if ps, ok := s24lStatusJSON(t, adm)["peers"].([]any); ok {
				for _, p := range ps {
					if p := p.(map[string]any); p["id"] == "b" {
						trusted, _ = p["trusted"]
						pSus, _ = p["suspicions"].(float64)
					}
				}
			}
			ok := hasUp && (up == 1) == wantUp && trusted == wantUp && pSus == sus
			if ok {
				t.Logf("b up=%v trusted=%v suspicions %v/%v", up, trusted, sus, pSus)
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("peer b: edge_peer_up %v (present %v), edge_peer_suspicions_total %v; status page trusted %v, suspicions %v (want up %v)", up, hasUp, sus, trusted, pSus, wantUp)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check(true, 5*time.Second)
	stopB()
	check(false, 5*time.Second)
}
