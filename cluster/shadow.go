package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/edgecache/edge/fdetect"
)

// ShadowDetector is a failure detector run beside the node's own on the
// same heartbeats, for comparison only: its suspicions are recorded (the
// status page's peers[].shadows, edge_fd_shadow_suspicions_total) and
// never acted on. The fault lab runs every detector this way in one
// cluster, so that they are judged on the very same arrivals, with the
// same local-delay allowance, in a fifth of the time separate runs take.
type ShadowDetector struct {
	Name string // as configured: "phi" or "ml/loss_model=2/loss_budget=0"
	Kind string // the detector, fdetect.Names
	Args fdetect.Params
}

// ParseShadowDetector reads "kind" or "kind/k=v/k=v"; defaults (the node's
// loss_budget and loss_estimator) are added as the node adds them to its
// own detector, unless the entry sets them.
func ParseShadowDetector(spec string, period time.Duration, defaults fdetect.Params) (ShadowDetector, error) {
	parts := strings.Split(spec, "/")
	args, err := fdetect.ParseParams(parts[1:])
	if err != nil {
		return ShadowDetector{}, fmt.Errorf("shadow detector %q: %w", spec, err)
	}
	args.AddDefaults(defaults)
	s := ShadowDetector{Name: spec, Kind: parts[0], Args: args}
	if _, err := fdetect.New(s.Kind, int64(period), s.Args); err != nil {
		return ShadowDetector{}, fmt.Errorf("shadow detector %q: %w", spec, err)
	}
	return s, nil
}

// shadow is one shadow detector's state for one peer: it trusts the peer
// from a heartbeat until its freshness point passes, as the node's own
// detector does in all-to-all monitoring.
type shadow struct {
	name    string
	det     fdetect.Detector
	trusted bool
	history []Transition
}

// newShadows builds a peer's shadow detectors (fresh: a new peer, or a
// restarted one whose old history must not count).
func (c *Cluster) newShadows() []*shadow {
	out := make([]*shadow, 0, len(c.cfg.Shadows))
	for _, s := range c.cfg.Shadows {
		d, _ := fdetect.New(s.Kind, int64(c.cfg.Period), s.Args) // validated by Config.Validate
		out = append(out, &shadow{name: s.Name, det: d})
	}
	return out
}

// observeShadows feeds a heartbeat to p's shadows; each trusts p again.
// c.mu must be held.
func observeShadows(p *Peer, seq uint64, recvNs int64, now time.Time) {
	for _, s := range p.shadows {
		s.det.Observe(seq, recvNs)
		if !s.trusted {
			s.trusted = true
			s.history = appendHistory(s.history, Transition{At: now, Trusted: true})
		}
	}
}

// checkShadows suspects p in each shadow whose freshness point, moved on
// by shift (the node's own delays, as for its own detector), has passed.
// c.mu must be held.
func (c *Cluster) checkShadows(p *Peer, now time.Time, shift time.Duration) {
	for _, s := range p.shadows {
		if s.trusted && fdetect.Suspect(s.det, now.Add(-shift).UnixNano()) {
			s.trusted = false
			s.history = appendHistory(s.history, Transition{At: now, Trusted: false})
			c.metrics.ShadowSuspicions.WithLabelValues(s.name).Inc()
		}
	}
}

// shadowHistories returns p's shadows' transitions by name (nil without
// shadows). c.mu must be held.
func shadowHistories(p *Peer) map[string][]Transition {
	if len(p.shadows) == 0 {
		return nil
	}
	out := make(map[string][]Transition, len(p.shadows))
	for _, s := range p.shadows {
		out[s.name] = append([]Transition(nil), s.history...)
	}
	return out
}

// DetectorSummary names the node's failure detector as it runs, its
// parameters after the node's defaults and cluster.detector_params (which
// may set the loss budget and estimator), for the status page.
func (c *Cluster) DetectorSummary() string {
	args := c.cfg.DetectorArgs
	var other []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		if k != fdetect.LossBudgetParam && k != fdetect.LossEstimatorParam {
			other = append(other, fmt.Sprintf("%s=%g", k, args[k]))
		}
	}
	name := c.cfg.Detector
	if len(other) > 0 {
		name += " (" + strings.Join(other, ", ") + ")"
	}
	budget := args[fdetect.LossBudgetParam]
	if !(budget > 0) {
		return name + ", loss-aware margin off"
	}
	estimator := fdetect.LossEstimator(args[fdetect.LossEstimatorParam]) // absent: 0, rate
	return fmt.Sprintf("%s, loss-aware margin with budget %g per heartbeat and the %s estimator", name, budget, estimator)
}
