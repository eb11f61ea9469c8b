// Package fdetect decides when a peer is dead. A Detector turns the arrival
// times of a peer's heartbeats into a freshness point: the moment by which
// the next heartbeat should have arrived. The peer is suspected once that
// moment passes without a fresher heartbeat. The package has Chen's,
// Bertier's, φ-accrual and two-windows detectors, and ml: a learned
// predictor of the delay residual with a quantile-tracking safety margin.
// The heartbeat wire format is in cluster/wire; the tools that judge
// detectors on traces (generation, replay, sweeps) and the seed's LSTM are
// in lab/fdlab.
package fdetect

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Detector estimates when the next heartbeat must have arrived. Times are
// nanoseconds on the receiver's clock. Implementations are not safe for
// concurrent use; a node keeps one per peer behind its own lock.
type Detector interface {
	// Observe records heartbeat seq arriving at time arrival. Sequence
	// numbers increase by one per period at the sender; gaps are losses.
	Observe(seq uint64, arrival int64)
	// Freshness returns τ, the freshness point of the next heartbeat.
	Freshness() int64
}

// Suspect reports whether d suspects its peer at time now.
func Suspect(d Detector, now int64) bool { return now > d.Freshness() }

// Params are a detector's knobs by name (from --param k=v).
type Params map[string]float64

// Get returns the parameter name, or def when it is not set.
func (p Params) Get(name string, def float64) float64 {
	if v, ok := p[name]; ok {
		return v
	}
	return def
}

// AddDefaults sets each parameter of defaults that p does not set. A
// loss_estimator added beside an explicit loss_budget=0 is dropped with it
// by New.
func (p Params) AddDefaults(defaults Params) {
	for k, v := range defaults {
		if _, set := p[k]; !set {
			p[k] = v
		}
	}
}

// String formats p as cluster.detector_params takes it: name=value pairs
// sorted by name, joined by commas, so a sweep's chosen point can be copied
// into a node's config as printed.
func (p Params) String() string {
	parts := make([]string, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, k+"="+strconv.FormatFloat(p[k], 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// ParseParams parses "k=v" pairs.
func ParseParams(kv []string) (Params, error) {
	p := Params{}
	for _, s := range kv {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("fdetect: param %q: want name=value", s)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("fdetect: param %q: %w", s, err)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			// No parameter means anything at NaN or ±Inf; window=+Inf
			// once reached a detector and changed its answer unchecked.
			return nil, fmt.Errorf("fdetect: param %q: want a finite number", s)
		}
		if _, twice := p[k]; twice {
			return nil, fmt.Errorf("fdetect: param %q given twice", k)
		}
		p[k] = f
	}
	return p, nil
}

// kind is one detector New builds: its name, the parameters it takes,
// the one a sweep searches, and how to build it. kinds is the one table of
// detectors: Names, MainKnob, the config's choices and New read it.
type kind struct {
	name     string
	params   []string
	mainKnob string
	build    func(period int64, p Params) Detector
}

// paramRange is what a parameter may be: between lo and hi (each bound
// included unless open), a whole number if whole. A value outside once
// reached the detectors unchecked: window=1e18 made a slice that cannot
// exist (a panic at startup), alpha_ms=1e13 overflowed into a negative
// margin, threshold=-1 left every peer suspected, and ml fell back to its
// defaults for quantile=1.5 without a word.
type paramRange struct {
	lo, hi         float64
	loOpen, hiOpen bool
	whole          bool
}

// paramRanges are the parameters' ranges, by name (a name means the same
// thing in every detector that takes it). Windows stop at a million
// heartbeats (a day at 10 a second; 8 MB of floats per link), times at
// ten minutes.
var paramRanges = map[string]paramRange{
	"window":         {lo: 1, hi: 1e6, whole: true},
	"long":           {lo: 1, hi: 1e6, whole: true},
	"short":          {lo: 1, hi: 1e6, whole: true},
	"time_window":    {lo: 1, hi: 1e7, whole: true},
	"order":          {lo: 0, hi: 64, whole: true},
	"alpha_ms":       {lo: 0, hi: 600_000},
	"min_std_ms":     {lo: 0, hi: 600_000},
	"pause_ms":       {lo: 0, hi: 600_000},
	"beta":           {lo: 0, hi: 1000},
	"phi":            {lo: 0, hi: 1000},
	"gamma":          {lo: 0, hi: 1, loOpen: true},
	"threshold":      {lo: 0, hi: 300, loOpen: true}, // φ = −log10 of a chance: 300 is 1e-300
	"quantile":       {lo: 0, hi: 1, loOpen: true, hiOpen: true},
	"lr":             {lo: 0, hi: 2, loOpen: true, hiOpen: true}, // NLMS is stable in (0, 2)
	"base_rate":      {lo: 0, hi: 1, loOpen: true},
	"outage":         {lo: 0, hi: 1e6, loOpen: true},
	"early_penalty":  {lo: 0, hi: 1e6},
	"time_objective": {lo: 0, hi: 1, whole: true},
	"loss_model":     {lo: LossModelOff, hi: LossModelPriced, whole: true},
}

// check reports what is wrong with v for the parameter name ("" if
// nothing is).
func (r paramRange) check(v float64) string {
	switch {
	case r.whole && v != math.Trunc(v):
		return "want a whole number"
	case v < r.lo || v > r.hi || (r.loOpen && v == r.lo) || (r.hiOpen && v == r.hi):
		lb, hb := "[", "]"
		if r.loOpen {
			lb = "("
		}
		if r.hiOpen {
			hb = ")"
		}
		return fmt.Sprintf("want a value in %s%g, %g%s", lb, r.lo, r.hi, hb)
	}
	return ""
}

// nsOfMs converts a parameter in milliseconds to nanoseconds.
func nsOfMs(v float64) int64 { return int64(v * 1e6) }

var kinds = []kind{
	{"chen", []string{"window", "alpha_ms"}, "alpha_ms", func(period int64, p Params) Detector {
		return NewChen(period, int(p.Get("window", 1000)), nsOfMs(p.Get("alpha_ms", 200)))
	}},
	{"bertier", []string{"window", "beta", "phi", "gamma"}, "phi", func(period int64, p Params) Detector {
		return NewBertier(period, int(p.Get("window", 1000)), p.Get("beta", 1), p.Get("phi", 4), p.Get("gamma", 0.1))
	}},
	{"phi", []string{"window", "threshold", "min_std_ms", "pause_ms"}, "threshold", func(period int64, p Params) Detector {
		return NewPhi(period, int(p.Get("window", 1000)), p.Get("threshold", 8), nsOfMs(p.Get("min_std_ms", 10)), nsOfMs(p.Get("pause_ms", 0)))
	}},
	{"twowindows", []string{"long", "short", "alpha_ms"}, "alpha_ms", func(period int64, p Params) Detector {
		return NewTwoWindows(period, int(p.Get("long", 1000)), int(p.Get("short", 10)), nsOfMs(p.Get("alpha_ms", 200)))
	}},
	{"ml", []string{"quantile", "window", "order", "lr", "base_rate", "outage", "early_penalty", "time_objective", "time_window", "pause_ms", "loss_model"}, "quantile",
		func(period int64, p Params) Detector {
			d := DefaultMLConfig()
			return NewML(period, MLConfig{
				Quantile: p.Get("quantile", d.Quantile), Window: int(p.Get("window", float64(d.Window))), Order: int(p.Get("order", float64(d.Order))),
				LearningRate: p.Get("lr", d.LearningRate), BaseRate: p.Get("base_rate", d.BaseRate),
				OutagePeriods: p.Get("outage", d.OutagePeriods), EarlyPenalty: p.Get("early_penalty", d.EarlyPenalty),
				TimeObjective: p.Get("time_objective", 0) != 0, TimeWindow: int(p.Get("time_window", float64(d.TimeWindow))),
				Pause: float64(nsOfMs(p.Get("pause_ms", 0))), LossModel: int(p.Get("loss_model", LossModelOff)),
			})
		}},
}

// Names lists the detectors New builds, in kinds' order.
var Names = func() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.name
	}
	return out
}()

// MainKnob is the parameter each detector's sweep searches.
var MainKnob = func() map[string]string {
	out := make(map[string]string, len(kinds))
	for _, k := range kinds {
		out[k.name] = k.mainKnob
	}
	return out
}()

// LossBudgetParam is the parameter, valid for every detector, that wraps it
// in LossAware with that budget (0: off).
const LossBudgetParam = "loss_budget"

// New builds a detector by name for a heartbeat period (ns). Unknown
// parameters are an error, so a typo is not silently ignored.
func New(name string, period int64, p Params) (Detector, error) {
	// loss_budget, for every detector: wrap it in LossAware.
	if budget, ok := p[LossBudgetParam]; ok {
		if !(budget >= 0 && budget < 1) { // NaN too
			return nil, fmt.Errorf("fdetect: %s %v: want 0 (off) or a chance in (0, 1)", LossBudgetParam, budget)
		}
		estimator := LossRate
		if e, ok := p[LossEstimatorParam]; ok {
			if e != float64(LossRate) && e != float64(LossRuns) {
				return nil, fmt.Errorf("fdetect: %s %v: want 0 (rate) or 1 (runs)", LossEstimatorParam, e)
			}
			estimator = LossEstimator(e)
		}
		rest := Params{}
		for k, v := range p {
			if k != LossBudgetParam && k != LossEstimatorParam {
				rest[k] = v
			}
		}
		d, err := New(name, period, rest)
		if err != nil || budget == 0 {
			return d, err
		}
		return NewLossAwareWith(d, period, budget, estimator), nil
	}
	if _, ok := p[LossEstimatorParam]; ok {
		return nil, fmt.Errorf("fdetect: %s needs %s", LossEstimatorParam, LossBudgetParam)
	}
	i := slices.IndexFunc(kinds, func(k kind) bool { return k.name == name })
	if i < 0 {
		return nil, fmt.Errorf("fdetect: detector %q, want one of %s", name, strings.Join(Names, ", "))
	}
	k := kinds[i]
	for param := range p {
		if !slices.Contains(k.params, param) {
			return nil, fmt.Errorf("fdetect: %s has no parameter %q (it has %s)", name, param, strings.Join(k.params, ", "))
		}
	}
	if period <= 0 {
		return nil, fmt.Errorf("fdetect: period must be positive")
	}
	if v, ok := p["loss_model"]; ok && v != LossModelOff && v != LossModelBudget && v != LossModelPriced {
		return nil, fmt.Errorf("fdetect: ml loss_model %v: want 0 (off), 1 (budget) or 2 (priced)", v)
	}
	for _, param := range slices.Sorted(maps.Keys(p)) {
		if why := paramRanges[param].check(p[param]); why != "" {
			return nil, fmt.Errorf("fdetect: %s %s=%v: %s", name, param, p[param], why)
		}
	}
	return k.build(period, p), nil
}

// window keeps the last n residuals r = A − Δ·s and their sum, for O(1)
// means.
type window struct {
	buf  []float64
	next int
	full bool
	sum  float64
}

func newWindow(n int) *window { return &window{buf: make([]float64, max(n, 1))} }

func (w *window) push(x float64) {
	if w.full {
		w.sum -= w.buf[w.next]
	}
	w.buf[w.next] = x
	w.sum += x
	w.next++
	if w.next == len(w.buf) {
		w.next, w.full = 0, true
	}
}

func (w *window) len() int {
	if w.full {
		return len(w.buf)
	}
	return w.next
}

func (w *window) mean() float64 {
	if n := w.len(); n > 0 {
		return w.sum / float64(n)
	}
	return 0
}

// Chen is Chen, Toueg and Aguilera's detector: the expected arrival is the
// mean of the last n residuals A_i − Δ·s_i plus Δ·(s_l + 1), and the
// freshness point adds a constant safety margin α.
type Chen struct {
	period int64
	alpha  int64
	w      *window
	last   uint64
	seen   bool
}

// NewChen returns Chen's detector with window n and margin alpha (ns).
func NewChen(period int64, n int, alpha int64) *Chen {
	return &Chen{period: period, alpha: alpha, w: newWindow(n)}
}

// Observe implements Detector. Late or duplicate heartbeats (seq not
// newer) are ignored, so reordering cannot move the estimate backwards.
func (c *Chen) Observe(seq uint64, arrival int64) {
	if c.seen && seq <= c.last {
		return
	}
	c.w.push(float64(arrival - c.period*int64(seq)))
	c.last, c.seen = seq, true
}

// EA is the expected arrival of the next heartbeat.
func (c *Chen) EA() int64 {
	return int64(c.w.mean()) + c.period*int64(c.last+1)
}

// Freshness implements Detector.
func (c *Chen) Freshness() int64 { return c.EA() + c.alpha }

// Bertier is Bertier, Marin and Sens' detector: Chen's EA with a margin
// from Jacobson's RTT estimator: error e = A − EA − delay; delay += γe;
// var += γ(|e| − var); τ = EA + β·delay + φ·var.
type Bertier struct {
	chen           *Chen
	beta, phi, gam float64
	delay, v       float64
	primed         bool
}

// NewBertier returns Bertier's detector.
func NewBertier(period int64, n int, beta, phi, gamma float64) *Bertier {
	return &Bertier{chen: NewChen(period, n, 0), beta: beta, phi: phi, gam: gamma}
}

// Observe implements Detector.
func (b *Bertier) Observe(seq uint64, arrival int64) {
	if b.chen.seen && seq <= b.chen.last {
		return
	}
	if b.primed {
		// The error of the estimate made for this heartbeat, adjusted for
		// heartbeats lost in between.
		ea := float64(b.chen.EA()) + float64(b.chen.period)*float64(seq-b.chen.last-1)
		e := float64(arrival) - ea - b.delay
		b.delay += b.gam * e
		b.v += b.gam * (math.Abs(e) - b.v)
	}
	b.chen.Observe(seq, arrival)
	b.primed = true
}

// Freshness implements Detector.
func (b *Bertier) Freshness() int64 {
	return b.chen.EA() + int64(b.beta*b.delay+b.phi*b.v)
}

// Phi is the φ-accrual detector as Akka implements it: inter-arrival times
// over a window fitted by a normal distribution (with a minimum standard
// deviation and an acceptable pause added to the mean); the peer is
// suspected once φ = −log10(1 − F(t − last)) exceeds the threshold, i.e.
// at last + mean + pause + z·σ with z the normal quantile of 1 − 10^−Φ.
type Phi struct {
	period    int64
	intervals *window
	sq        *window // squares, for the variance
	threshold float64
	minStd    float64
	pause     float64
	lastArr   int64
	last      uint64
	seen      bool
	z         float64
}

// NewPhi returns a φ-accrual detector.
func NewPhi(period int64, n int, threshold float64, minStd, pause int64) *Phi {
	p := &Phi{period: period, intervals: newWindow(n), sq: newWindow(n), threshold: threshold, minStd: float64(minStd), pause: float64(pause)}
	// z with P(N > z) = 10^−Φ; Erfcinv keeps precision for tiny tails.
	p.z = math.Sqrt2 * math.Erfcinv(2*math.Pow(10, -threshold))
	return p
}

// Observe implements Detector.
func (p *Phi) Observe(seq uint64, arrival int64) {
	if p.seen && seq <= p.last {
		return
	}
	if p.seen {
		// Per-heartbeat interval: a lost heartbeat stretches one interval
		// over several periods, so normalise by the sequence gap.
		iv := float64(arrival-p.lastArr) / float64(seq-p.last)
		p.intervals.push(iv)
		p.sq.push(iv * iv)
	}
	p.lastArr, p.last, p.seen = arrival, seq, true
}

// Freshness implements Detector.
func (p *Phi) Freshness() int64 {
	mean := float64(p.period)
	std := p.minStd
	if p.intervals.len() > 1 {
		mean = p.intervals.mean()
		v := p.sq.mean() - mean*mean
		std = math.Max(math.Sqrt(math.Max(v, 0)), p.minStd)
	}
	return p.lastArr + int64(mean+p.pause+p.z*std)
}

// TwoWindows takes the later of a long and a short Chen estimate, so it
// reacts at once to a delay increase and forgets it slowly, plus α.
type TwoWindows struct {
	long, short *Chen
	alpha       int64
}

// NewTwoWindows returns the two-windows detector.
func NewTwoWindows(period int64, long, short int, alpha int64) *TwoWindows {
	return &TwoWindows{long: NewChen(period, long, 0), short: NewChen(period, short, 0), alpha: alpha}
}

// Observe implements Detector.
func (t *TwoWindows) Observe(seq uint64, arrival int64) {
	t.long.Observe(seq, arrival)
	t.short.Observe(seq, arrival)
}

// Freshness implements Detector.
func (t *TwoWindows) Freshness() int64 { return max(t.long.EA(), t.short.EA()) + t.alpha }
