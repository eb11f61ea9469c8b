package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/proxy"
)

// Negative probes beside the climb (Config.NegativeProbesBesideClimb).
//
// FNA asks a negatively indicated peer when the miss penalty makes it worth
// it, and the paper prices such a probe as if the climb waited for it. It
// does not have to: a negative probe that misses (most do: the indicator
// said no) then costs the request a round trip to that peer before the
// climb starts, measured as fna-learned's worse p99 against fno in the
// two-region lab (docs/cluster.md). Beside the climb, the probes likely to
// hit are still waited for (positives, and negatives whose ρ is below
// raceAbove: waiting is what lets them stand in for the climb), but the
// climb starts as soon as they missed, and the other negative probes'
// answers race it: a
// negative hit that comes before the climb's answer wins and the climb is
// cancelled; a climb that answers first wins, and the negative answers
// still to come are recorded (fna-learned and fna-rate learn from each)
// and closed.
//
// The price: a climb that a negative hit overtakes may already have asked
// the home, and the home the origin (cancelled with the climb, a fill may
// still complete there); measured with the latency in docs/cluster.md.
// Either answer is one of the same request's, each checked by the cache it
// came from, so the race hands no request another's response.

// raceAbove is the exclusion probability ρ from which a negative probe
// races the climb rather than being waited for. A negative that more
// likely hits than misses (a learned ν below ½: the other region's home
// that a lagged crowd has just filled) is waited for, as a positive is:
// racing it, the climb would reach the origin for pages the probe was about
// to bring. Measured on the two-continent lagged workload: racing every
// negative (ν there about 0.05) sent 48 % more requests to the origin
// (5,656 against 3,824) for the same mean (docs/cluster.md).
const raceAbove = 0.5

// unlikelyNegatives is the mask of the negatively indicated candidates
// whose ρ is at least above (raceAbove).
func (cs *candidateSet) unlikelyNegatives(above float64) uint64 {
	var m uint64
	for i, cand := range cs.cands {
		if cs.negative&(1<<uint(i)) != 0 && cand.Rho >= above {
			m |= 1 << uint(i)
		}
	}
	return m
}

// pendingProbes are the negative probes whose answers are still to come.
type pendingProbes struct {
	answers <-chan probeAnswer
	left    int
	cs      *candidateSet
	cancel  context.CancelFunc // the probes' context: once their answers are in, or with the winner's body
}

// climbBeside climbs the page's path while the negative probes of neg are
// still out, and serves whichever answers first with the page (Fetch's
// climb and probe rules for Keep and the climb's latency apply to each).
func (c *Cluster) climbBeside(ctx context.Context, fr proxy.FetchRequest, kh uint64, path []hop, tree, isHome bool, start time.Time, neg *pendingProbes) (proxy.Result, error) {
	cctx, cancelClimb := context.WithCancel(ctx)
	done := make(chan climbed, 1)
	go func() { done <- c.climbPath(cctx, fr, kh, path, tree) }()
	var failed *climbed
	wait := (<-chan climbed)(done)
	for neg.left > 0 {
		select {
		case cl := <-wait:
			if cl.err != nil && ctx.Err() == nil {
				// A failed climb wins nothing: the negatives may still hit.
				failed, wait = &cl, nil
				continue
			}
			c.countRace(false)
			go c.drainAnswers(neg.answers, neg.left, neg.cs, neg.cancel)
			return c.climbResult(fr, kh, isHome, start, cl, cancelClimb)
		case a := <-neg.answers:
			neg.left--
			if c.recordAnswer(a, neg.cs) != "hit" {
				if a.resp != nil {
					a.resp.Body.Close()
				}
				continue
			}
			cancelClimb()
			go func() {
				if failed != nil {
					return
				}
				if cl := <-done; cl.err == nil && cl.res.Resp != nil {
					cl.res.Resp.Body.Close()
				}
			}()
			// As probe's winner: the other negatives' context lasts until
			// they have answered too, so that their outcomes teach their
			// estimates (TestS46BesideNegativeWinnerStillCancelsTheOtherNegatives).
			release := afterAll(2, neg.cancel)
			a.resp.Body = &cancelOnClose{ReadCloser: a.resp.Body, cancel: release}
			go c.drainAnswers(neg.answers, neg.left, neg.cs, release)
			res, ok := c.settle(ctx, fr, a.resp, neg.cs.ids[a.i])
			if !ok {
				// Its body failed before anything was sent, and the
				// climb it overtook is gone: climb again. The climb
				// answers, so the race is the climb's.
				c.countRace(false)
				return c.climbResult(fr, kh, isHome, start, c.climbPath(ctx, fr, kh, path, tree), nil)
			}
			// The origin's answer, if the slow probe body's race went to
			// it, stands for the climb (probeResult), and so does the race.
			c.countRace(res.From == proxy.UpstreamPeer)
			return c.probeResult(kh, isHome, res), nil
		}
	}
	// Every negative probe missed: the climb's answer is the one.
	neg.cancel()
	c.countRace(false)
	if failed != nil {
		return c.climbResult(fr, kh, isHome, start, *failed, cancelClimb)
	}
	return c.climbResult(fr, kh, isHome, start, <-done, cancelClimb)
}

// probeRaces counts the races by winner, and the first hop's probes
// beside the others (Config.FirstHopWithProbes) and their hits, for the
// status page.
type probeRaces struct {
	climb, negative, firstHop, firstHopHits, staleServed, staleServedEarly atomic.Uint64
}

func (c *Cluster) countRace(negativeWon bool) {
	if negativeWon {
		c.races.negative.Add(1)
		c.metrics.BesideClimb.WithLabelValues("negative_probe").Inc()
		return
	}
	c.races.climb.Add(1)
	c.metrics.BesideClimb.WithLabelValues("climb").Inc()
}

// ProbeRaceState is how negative probes raced the climb, and what they
// showed over every peer, for the status page.
type ProbeRaceState struct {
	Beside      bool   `json:"beside"`       // cluster.negative_probes beside_climb
	ClimbWon    uint64 `json:"climb_won"`    // the climb answered first (or every negative probe missed)
	NegativeWon uint64 `json:"negative_won"` // a negative probe's hit overtook the climb
	// Pooled is fna-learned's ν correction over the negative probes of
	// each region's peers ("" for peers of no region), the prior of a
	// peer there with few of its own (nil with another selection).
	Pooled map[string]float64 `json:"pooled_nu_calibration"`
	// FirstHopWithProbes is cluster.first_hop_with_probes; FirstHopAsked
	// counts the first hop's probes since start, FirstHopHits those that
	// found the page.
	FirstHopWithProbes bool   `json:"first_hop_with_probes"`
	ProbeFirstHop      bool   `json:"probe_first_hop"` // the first hop is a probe candidate instead (cluster.probe_first_hop)
	FirstHopAsked      uint64 `json:"first_hop_asked"`
	FirstHopHits       uint64 `json:"first_hop_hits"`
	// StaleServed counts the requests whose climb failed and that were
	// answered with a stale copy a probe had found (stalefallback.go).
	StaleServed uint64 `json:"stale_fallbacks_served"`
	// StaleWhileClimbing is cluster.stale_while_climbing; StaleServedEarly
	// counts the requests answered with a probe's stale copy while their
	// climb was still out (stalefallback.go).
	StaleWhileClimbing bool   `json:"stale_while_climbing"`
	StaleServedEarly   uint64 `json:"stale_served_while_climbing"`
}

// ProbeRaces returns how negative probes raced the climb since start.
func (c *Cluster) ProbeRaces() ProbeRaceState {
	var pooled map[string]float64
	if c.cfg.Selection == SelectionFNALearned {
		pooled = map[string]float64{}
		c.mu.Lock()
		for region, pool := range c.calPools {
			pooled[region] = pool.Kappa()
		}
		c.mu.Unlock()
	}
	return ProbeRaceState{Beside: c.cfg.NegativeProbesBesideClimb, ClimbWon: c.races.climb.Load(), NegativeWon: c.races.negative.Load(), Pooled: pooled,
		FirstHopWithProbes: c.cfg.FirstHopWithProbes, ProbeFirstHop: c.cfg.ProbeFirstHop, FirstHopAsked: c.races.firstHop.Load(), FirstHopHits: c.races.firstHopHits.Load(),
		StaleServed: c.races.staleServed.Load(), StaleWhileClimbing: c.cfg.StaleWhileClimbing, StaleServedEarly: c.races.staleServedEarly.Load()}
}
