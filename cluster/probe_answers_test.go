package cluster

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/edgecache/edge/indicators"
)

// TestProbeAnswersUseTheSetsReplicas: an answer is recorded in the replica
// read with the candidate set, under c.mu, not in the peer's current one,
// which a restart replaces under c.mu (found by review: a data race under
// -race, and an answer to a probe sent before the restart taught the new
// replica). Late answers are recorded as well: a far home's hit comes after
// a near peer's.
func TestProbeAnswersUseTheSetsReplicas(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"p1": "127.0.0.1:1"})
	var p *Peer
	c.mu.Lock()
	p = c.peers["p1"]
	c.mu.Unlock()
	old := p.replica
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			c.mu.Lock()
			p.replica = &indicators.Replica{} // as received() does on a restart
			c.mu.Unlock()
		}
	}()
	answer := func(status int) probeAnswer {
		// A node's store answers with its own Cache-Status member a hit.
		h := http.Header{"Cache-Status": {"p1; hit"}}
		return probeAnswer{resp: &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(""))}, i: 0}
	}
	for i := range 200 {
		cs := candidateSet{peers: []*Peer{p}, ids: []string{"p1"}, replicas: []*indicators.Replica{old}, indicated: []bool{false}, derivedNu: []float64{0.5}}
		ch := make(chan probeAnswer, 1)
		ch <- answer(http.StatusGatewayTimeout)
		c.firstHit(ch, 1, nil, &cs)
		if i%10 == 0 {
			c.recordAnswer(answer(http.StatusOK), &cs) // a late hit, after a winner
		}
	}
	<-done
	if k := old.Calibration(); k <= 0 || k >= 0.5 {
		t.Fatalf("κ %v: the set's replica should have learnt from 200 misses and 20 late hits at a predicted 50 %%", k)
	}
	if got := p.negProbes.Load(); got != 220 {
		t.Fatalf("%d negative probes counted, want 220 (late answers included)", got)
	}
	if got := p.negHits.Load(); got != 20 {
		t.Fatalf("%d negative-probe hits counted, want 20", got)
	}
}
