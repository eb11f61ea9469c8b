package fdlab

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/edgecache/edge/fdetect"
)

// Warmup heartbeats per link are observed but not measured, for every
// detector alike: windows and learned models start empty.
const Warmup = 1000

// Result are the replay metrics of one link or of all links pooled.
type Result struct {
	Heartbeats      int     `json:"heartbeats"`
	PA              float64 `json:"pa"`                 // the seed's P_A: share of predictions (one per arrival) that the next arrival came before
	PAArrived       float64 `json:"pa_arrived"`         // share of received heartbeats that arrived before their freshness point
	Lost            int     `json:"lost"`               // heartbeats never received (sequence gaps) in the measured span
	TDms            float64 `json:"td_ms"`              // mean of τ_k − A_k (the seed's T_D)
	PATime          float64 `json:"pa_time"`            // Chen's P_A: share of time the peer was trusted
	TDChenMs        float64 `json:"td_chen_ms"`         // Chen's T_D: mean time from a crash to permanent suspicion, τ_k − A_k + one-way delay
	DelayMeanMs     float64 `json:"delay_mean_ms"`      // mean one-way delay included in TDChenMs (0: unknown)
	Mistakes        int     `json:"mistakes"`           // wrong suspicions (each suspicion period once)
	MistakeRate     float64 `json:"mistake_rate_per_s"` // per second of trace
	MistakeMeanMs   float64 `json:"mistake_mean_ms"`    // mean duration of a wrong suspicion
	DetectMeanMs    float64 `json:"detect_mean_ms"`     // crash right after a heartbeat: τ − A
	DetectP99Ms     float64 `json:"detect_p99_ms"`
	NsPerHeartbeat  float64 `json:"ns_per_heartbeat"` // detector cost: Observe + Freshness
	onTime, safe    int
	tdSum, mistakeT float64
	delaySum        float64
	span            float64
	detect          []float64
	nsSum           float64
	nsCount         int
}

// ReplayResult is the outcome over a trace.
type ReplayResult struct {
	Overall Result            `json:"overall"`
	Links   map[string]Result `json:"links"`
}

// Replay runs a fresh detector per link over the trace's arrivals. period
// is the heartbeat period Δ (ns).
func Replay(arrivals []Arrival, period int64, build func() (fdetect.Detector, error)) (ReplayResult, error) {
	return ReplayWindow(arrivals, period, build, 0, 0)
}

// ReplayWindow is Replay measuring only the arrivals received in
// [from, to) (ns; to 0: no end), every arrival before them observed: a lab
// that records a node's whole life scores one fault scenario of it with a
// detector that has seen what the live one had. With from and to 0 the
// first Warmup arrivals of each link are skipped instead.
func ReplayWindow(arrivals []Arrival, period int64, build func() (fdetect.Detector, error), from, to int64) (ReplayResult, error) {
	measure := func(i int, a Arrival) bool { return i >= Warmup }
	if from != 0 || to != 0 {
		measure = func(_ int, a Arrival) bool { return a.Recv >= from && (to == 0 || a.Recv < to) }
	}
	bySite := map[string][]Arrival{}
	var sites []string
	for _, a := range arrivals {
		if _, ok := bySite[a.Site]; !ok {
			sites = append(sites, a.Site)
		}
		bySite[a.Site] = append(bySite[a.Site], a)
	}
	sort.Strings(sites)
	out := ReplayResult{Links: map[string]Result{}}
	var all Result
	for _, s := range sites {
		d, err := build()
		if err != nil {
			return out, err
		}
		as := bySite[s]
		sort.SliceStable(as, func(i, j int) bool { return as[i].Recv < as[j].Recv })
		if err := plausibleGaps(s, as, period); err != nil {
			return out, err
		}
		r := replayLink(d, as, period, measure)
		out.Links[s] = r
		all.merge(r)
	}
	all.finish()
	out.Overall = all
	return out, nil
}

// plausibleGaps refuses a link whose sequence numbers skip far more
// heartbeats than the time between arrivals holds: a jump to 2^62 once
// printed 4.6e18 heartbeats lost and a negative T_D. A run of k lost
// heartbeats takes about k periods; four times that plus a minute is
// allowed, for jitter, stalls and a slow clock.
func plausibleGaps(site string, as []Arrival, period int64) error {
	var top uint64
	var topRecv int64
	for i, a := range as {
		if i > 0 && a.Seq > top {
			skipped := a.Seq - top - 1
			limit := uint64(4*max(a.Recv-topRecv, 0)/period) + uint64(time.Minute)/uint64(period)
			if skipped > limit {
				return fmt.Errorf("fdlab: link %s: sequence number jumps from %d to %d in %v: not heartbeats every %v", site, top, a.Seq, time.Duration(a.Recv-topRecv), time.Duration(period))
			}
		}
		if i == 0 || a.Seq > top {
			top, topRecv = a.Seq, a.Recv
		}
	}
	return nil
}

// replayLink measures one link. Two freshness points matter:
//   - τ_k, the freshness point of heartbeat k itself (the detector's point
//     for the next heartbeat moved on by Δ per sequence number skipped):
//     the seed's T_D is the mean slack τ_k − A_k, and PAArrived (the
//     variant this lab reported as the seed's P_A until 2026-12-02) the
//     share of received heartbeats with A_k ≤ τ_k, under which a lost
//     heartbeat is never an unsafe prediction;
//   - the point in force when k arrived (for the next expected sequence
//     number): if k came after it, the peer was wrongly suspected from
//     that point until k arrived. Mistakes and the time-based P_A count those,
//     and so does the seed's P_A as the seed defines it: one prediction per
//     arrival (for the next heartbeat), safe when the next heartbeat to
//     arrive came before it, so a lost heartbeat is unsafe unless the margin
//     covered the gap it left.
//
// A suspicion period is counted once: when the freshness point computed at
// an arrival has already passed (trust was not restored), the period goes
// on from that arrival to the next, and is one mistake, not two.
//
// Chen's T_D for heartbeat k is the detection time of a crash just before k
// would have been sent: from the send time σ_k to τ_k, that is
// τ_k − A_k plus k's one-way delay (Arrival.Delay; 0 when unknown). This is
// the latest crash that still stops k; a crash anywhere in the period
// before adds Δ/2 on average and Δ at worst, the same for every detector.
func replayLink(d fdetect.Detector, as []Arrival, period int64, measure func(int, Arrival) bool) Result {
	var r Result
	var firstMeasured, lastMeasured int64 = -1, -1
	prevMeasured := false
	var lastSeq uint64
	var lastRecv int64
	stillSuspected := false // the freshness point set at the last arrival had already passed
	for i, a := range as {
		measured := measure(i, a)
		suspectedAtArrival := false
		if i > 0 && a.Seq <= lastSeq {
			if measured && a.Seq < lastSeq && r.Lost > 0 {
				r.Lost-- // counted lost when its successor came: reordered
			}
			d.Observe(a.Seq, a.Recv) // reordered or duplicate: detectors ignore it
			continue
		}
		if i > 0 && measured {
			inForce := d.Freshness()
			tauK := inForce + period*int64(a.Seq-lastSeq-1)
			if firstMeasured < 0 {
				firstMeasured = lastRecv
			}
			r.Heartbeats++
			r.Lost += int(a.Seq - lastSeq - 1)
			r.tdSum += float64(tauK - a.Recv)
			r.delaySum += float64(a.Delay)
			if a.Recv <= tauK {
				r.onTime++
			}
			if a.Recv <= inForce {
				r.safe++
			}
			switch {
			case stillSuspected:
				// The suspicion that began at or before the last arrival
				// goes on until this one. If that arrival was not
				// measured (the warm-up's last), the period was not
				// counted yet.
				if !prevMeasured {
					r.Mistakes++
				}
				r.mistakeT += float64(a.Recv - lastRecv)
				suspectedAtArrival = true
			case a.Recv > inForce:
				r.Mistakes++
				r.mistakeT += float64(a.Recv - inForce)
				suspectedAtArrival = true
			}
		}
		lastSeq, lastRecv = a.Seq, a.Recv
		t := time.Now()
		d.Observe(a.Seq, a.Recv)
		tau := d.Freshness()
		if tau < a.Recv && measured && !suspectedAtArrival {
			r.Mistakes++ // trusted until now, suspected at once: a period from here
		}
		stillSuspected = tau < a.Recv
		ns := float64(time.Since(t).Nanoseconds())
		prevMeasured = measured
		if measured {
			lastMeasured = a.Recv
			r.nsSum += ns
			r.nsCount++
			r.detect = append(r.detect, float64(tau-a.Recv))
		}
	}
	if firstMeasured >= 0 {
		r.span = float64(lastMeasured - firstMeasured)
	}
	r.finish()
	return r
}

func (r *Result) merge(o Result) {
	r.Heartbeats += o.Heartbeats
	r.Lost += o.Lost
	r.onTime += o.onTime
	r.safe += o.safe
	r.tdSum += o.tdSum
	r.delaySum += o.delaySum
	r.Mistakes += o.Mistakes
	r.mistakeT += o.mistakeT
	r.span += o.span
	r.detect = append(r.detect, o.detect...)
	r.nsSum += o.nsSum
	r.nsCount += o.nsCount
}

func (r *Result) finish() {
	if r.Heartbeats > 0 {
		r.PAArrived = float64(r.onTime) / float64(r.Heartbeats)
		r.PA = float64(r.safe) / float64(r.Heartbeats)
		r.TDms = r.tdSum / float64(r.Heartbeats) / 1e6
		r.DelayMeanMs = r.delaySum / float64(r.Heartbeats) / 1e6
		r.TDChenMs = r.TDms + r.DelayMeanMs
	}
	if r.span > 0 {
		r.PATime = 1 - r.mistakeT/r.span
		r.MistakeRate = float64(r.Mistakes) / (r.span / 1e9)
	}
	if r.Mistakes > 0 {
		r.MistakeMeanMs = r.mistakeT / float64(r.Mistakes) / 1e6
	}
	if n := len(r.detect); n > 0 {
		sum := 0.0
		for _, x := range r.detect {
			sum += x
		}
		r.DetectMeanMs = sum / float64(n) / 1e6
		r.DetectP99Ms = quantileOf(r.detect, 0.99) / 1e6
	}
	if r.nsCount > 0 {
		r.NsPerHeartbeat = r.nsSum / float64(r.nsCount)
	}
}

// Metric names the pair of QoS metrics a sweep judges by.
type Metric string

// The metrics.
const (
	// MetricSeed is the seed paper's: P_A is the share of predictions that
	// were safe, one made at each arrival for the next heartbeat and safe
	// when the next heartbeat to arrive came before it (so a lost heartbeat
	// is unsafe unless the margin covers the gap); T_D is the mean slack
	// τ_k − A_k of the received heartbeats.
	MetricSeed Metric = "seed"
	// MetricSeedArrived judges each received heartbeat against its own
	// point τ_k, moved on by Δ per heartbeat lost before it, so a loss is
	// never unsafe: what `seed` meant before 2026-12-02, kept for
	// comparison with the tables of that time.
	MetricSeedArrived Metric = "seed-arrived"
	// MetricChen is Chen, Toueg and Aguilera's: P_A is the share of time the
	// peer was trusted (each suspicion period once), T_D the time from a
	// crash to permanent suspicion (slack plus one-way delay).
	MetricChen Metric = "chen"
)

// Metrics lists the metrics, for flags and tables.
var Metrics = []Metric{MetricSeed, MetricSeedArrived, MetricChen}

// ParseMetric validates a metric name.
func ParseMetric(s string) (Metric, error) {
	if m := Metric(s); slices.Contains(Metrics, m) {
		return m, nil
	}
	return "", fmt.Errorf("fdlab: metric %q, want seed, seed-arrived or chen", s)
}

// QoS returns (P_A, T_D ms) of r by metric m.
func (r Result) QoS(m Metric) (pa, tdMs float64) {
	switch m {
	case MetricChen:
		return r.PATime, r.TDChenMs
	case MetricSeedArrived:
		return r.PAArrived, r.TDms
	}
	return r.PA, r.TDms
}

// SweepResult is the knob value found for a target P_A.
type SweepResult struct {
	Detector string  `json:"detector"`
	Metric   Metric  `json:"metric"`
	Param    string  `json:"param"`
	Value    float64 `json:"value"`
	PA       float64 `json:"pa"`
	TDms     float64 `json:"td_ms"`
	Found    bool    `json:"found"`
	// AtRangeBottom: the target is met at the knob's lowest value, so
	// something else (a loss budget, a pause floor) sets the margin.
	AtRangeBottom bool `json:"at_range_bottom,omitempty"`
	// Params are every parameter the chosen point set (the knob and base).
	Params fdetect.Params `json:"params"`
	// Chen's mistake rate λ_M and mean mistake duration T_M at the chosen
	// point, whatever the metric: a T_D means little without them.
	MistakeRate       float64 `json:"mistake_rate_per_s"`
	MistakeDurationMs float64 `json:"mistake_duration_ms"`
	// Heartbeats is how many heartbeats the chosen point was measured
	// on: below 1/(1 − target) a target is met by a handful of them.
	Heartbeats int `json:"heartbeats"`
}

func (s *SweepResult) record(x float64, p fdetect.Params, r Result) {
	s.Value, s.Params, s.Heartbeats = x, p, r.Heartbeats
	s.PA, s.TDms = r.QoS(s.Metric)
	s.MistakeRate, s.MistakeDurationMs = r.MistakeRate, r.MistakeMeanMs
}

// knobRange is the search interval of a detector's knob, in a coordinate
// where P_A grows with the value, and how a value sets the parameters.
func knobRange(name, param string) (lo, hi float64, set func(p fdetect.Params, x float64) float64) {
	one := func(lo, hi float64, conv func(float64) float64) (float64, float64, func(fdetect.Params, float64) float64) {
		return lo, hi, func(p fdetect.Params, x float64) float64 { v := conv(x); p[param] = v; return v }
	}
	id := func(x float64) float64 { return x }
	switch {
	case param == "pause_ms":
		return one(0, 5000, id)
	case param == PauseQuantile:
		// x in [0, 1]: the quantile from 0.9 to 0.99 with no pause; x in
		// (1, 2]: the quantile stays at 0.99 and the pause grows to 5 s.
		// Low targets are won by a learned margin, high ones by a constant
		// that covers stalls; this path goes through both, and P_A grows
		// along it.
		return 0, 2, func(p fdetect.Params, x float64) float64 {
			if x <= 1 {
				p["quantile"], p["pause_ms"] = 1-math.Pow(10, -(1+x)), 0
				return p["quantile"]
			}
			p["quantile"], p["pause_ms"] = 0.99, (x-1)*5000
			return p["pause_ms"]
		}
	case name == "phi":
		return one(0.5, 16, id)
	case name == "bertier":
		return one(0, 60, id)
	case name == "ml":
		// x = −log10(1 − q): q from 0.02 to 0.9999999. With the priced loss
		// model q is a price, and P_A near 0.93 (ml-seed's own operating
		// point) takes a q below 0.9.
		return one(0.01, 7, func(x float64) float64 { return 1 - math.Pow(10, -x) })
	default:
		return one(0, 5000, id)
	}
}

// SweepDefaults fills in what a sweep of detector name by metric m uses
// when the caller leaves it open, ml's best setting for that metric (base
// is not modified):
//   - by Chen's metric, the time objective (unless base sets
//     time_objective) and the combined knob (unless knob is set): its
//     per-heartbeat quantile alone cannot reach P_A 0.999 on traces with
//     sender stalls;
//   - by the seed's metric, the priced loss model (loss_model=2, unless
//     base sets loss_model or a positive loss_budget, whose margin already
//     covers the losses): the metric counts a lost heartbeat as an
//     unsafe prediction, which a quantile of delay errors never covers, so
//     without it ml cannot reach P_A 0.999 on any of the generated sets
//     (docs/failure-detection.md, "Results by the seed's own metric").
//
// The received-only variant of the seed metric and every other detector
// are left alone.
func SweepDefaults(name string, m Metric, base fdetect.Params, knob string) (fdetect.Params, string) {
	if name != "ml" {
		return base, knob
	}
	var add fdetect.Params
	switch m {
	case MetricChen:
		add = fdetect.Params{"time_objective": 1}
		if knob == "" {
			knob = PauseQuantile
		}
	case MetricSeed:
		if b := base[fdetect.LossBudgetParam]; b > 0 {
			// The loss-aware margin already covers the losses the
			// metric counts; the loss model on top covers them twice
			// (no better than without it, measured by a review).
			return base, knob
		}
		add = fdetect.Params{"loss_model": fdetect.LossModelPriced}
	default:
		return base, knob
	}
	out := make(fdetect.Params, len(base)+len(add))
	for k, v := range add {
		out[k] = v
	}
	for k, v := range base {
		out[k] = v
	}
	return out, knob
}

// PauseQuantile is ml's combined knob (fd sweep --knob quantile+pause_ms):
// its quantile up to 0.99, then its pause floor.
const PauseQuantile = "quantile+pause_ms"

// Sweep searches the detector's main knob for the smallest T_D whose P_A
// (by metric m) is at least target (P_A grows with the knob, so a
// bisection suffices).
//
// knob names the parameter to search instead of the main knob ("": the
// main one, or for ml by Chen's metric its best path, below); ml's
// "pause_ms" (a constant floor, as Chen's α) and "quantile+pause_ms" are
// the others with a known range.
//
// ml: unless told otherwise, the sweep runs ml's best setting for the
// metric (SweepDefaults): by Chen's, its time objective along the combined
// knob; by the seed's, its priced loss model.
func Sweep(arrivals []Arrival, name string, period int64, target float64, base fdetect.Params, m Metric, knob string) (SweepResult, error) {
	base, knob = SweepDefaults(name, m, base, knob)
	param := fdetect.MainKnob[name]
	if knob != "" && knob != param {
		if (knob != "pause_ms" && knob != PauseQuantile) || name != "ml" {
			return SweepResult{}, fmt.Errorf("fdlab: %s has no sweepable knob %q (ml: quantile, pause_ms, %s)", name, knob, PauseQuantile)
		}
		param = knob
	}
	if param == "" {
		return SweepResult{}, fmt.Errorf("fdetect: no sweep for detector %q", name)
	}
	if !(target > 0 && target <= 1) { // NaN too
		return SweepResult{}, fmt.Errorf("fdlab: target P_A %v: want a share in (0, 1]", target)
	}
	swept := []string{param}
	if param == PauseQuantile {
		swept = []string{"quantile", "pause_ms"}
	}
	for _, k := range swept {
		if v, set := base[k]; set {
			// The search sets it: a value given for it would be dropped
			// without a word, and the printed config would not be the
			// one asked for.
			return SweepResult{}, fmt.Errorf("fdlab: %s=%v is the knob the sweep searches; leave it out, or sweep another with --knob", k, v)
		}
	}
	lo, hi, set := knobRange(name, param)
	params := func(x float64) (fdetect.Params, float64) {
		p := fdetect.Params{}
		for k, v := range base {
			p[k] = v
		}
		return p, set(p, x)
	}
	eval := func(x float64) (ReplayResult, error) {
		p, _ := params(x)
		return Replay(arrivals, period, func() (fdetect.Detector, error) { return fdetect.New(name, period, p) })
	}
	res := SweepResult{Detector: name, Param: param, Metric: m}
	top, err := eval(hi)
	if err != nil {
		return res, err
	}
	if pa, _ := top.Overall.QoS(m); pa < target {
		p, v := params(hi)
		res.record(v, p, top.Overall)
		return res, nil
	}
	best := top
	bestX := hi
	bottom := lo
	for range 30 {
		mid := (lo + hi) / 2
		r, err := eval(mid)
		if err != nil {
			return res, err
		}
		if pa, _ := r.Overall.QoS(m); pa >= target {
			hi, best, bestX = mid, r, mid
		} else {
			lo = mid
		}
	}
	p, v := params(bestX)
	res.record(v, p, best.Overall)
	res.Found = true
	// Every point tried met the target: the knob sets none of the margin
	// that meets it (a loss budget or a pause floor does), and its value
	// is an artefact of the search.
	res.AtRangeBottom = lo == bottom
	return res, nil
}

// Curve replays the detector at n knob values across its range and returns
// (T_D ms, 1 − P_A) points by metric m, for the trade-off plot. It applies
// SweepDefaults, parameters and knob, so a curve is the line a sweep by m
// picks its point on.
func Curve(arrivals []Arrival, name string, period int64, n int, base fdetect.Params, m Metric) ([][2]float64, error) {
	base, knob := SweepDefaults(name, m, base, "")
	param := fdetect.MainKnob[name]
	if knob != "" {
		param = knob
	}
	lo, hi, set := knobRange(name, param)
	var pts [][2]float64
	for i := range n {
		f := float64(i) / float64(max(n-1, 1))
		if param == "alpha_ms" {
			f *= f * 0.2 // margins beyond 1 s say little; sample densely near 0
		}
		x := lo + (hi-lo)*f
		if param == PauseQuantile {
			// A quarter of the points along the quantile (T_D moves
			// little there), the rest along the pause, densely near 0.
			q := max(n/4, 1)
			if i < q {
				x = float64(i) / float64(q)
			} else {
				g := float64(i-q+1) / float64(max(n-q, 1))
				x = 1 + g*g
			}
		}
		p := fdetect.Params{}
		for k, v := range base {
			p[k] = v
		}
		set(p, x)
		r, err := Replay(arrivals, period, func() (fdetect.Detector, error) { return fdetect.New(name, period, p) })
		if err != nil {
			return nil, err
		}
		pa, td := r.Overall.QoS(m)
		pts = append(pts, [2]float64{td, 1 - pa})
	}
	return pts, nil
}

// quantileOf returns the q-quantile of xs (sorted copy).
func quantileOf(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
