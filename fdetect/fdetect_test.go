package fdetect

import (
	"encoding/binary"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// TestChenHandComputed: Δ = 100 ms, arrivals at 10, 120, 215 ms for seq
// 0, 1, 2. Residuals 10, 20, 15 → mean 15; EA = 15 + 100·3 = 315 ms; with
// α = 50 ms, τ = 365 ms.
func TestChenHandComputed(t *testing.T) {
	c := NewChen(100*ms, 10, 50*ms)
	for i, a := range []int64{10, 120, 215} {
		c.Observe(uint64(i), a*ms)
	}
	if c.EA() != 315*ms || c.Freshness() != 365*ms {
		t.Fatalf("EA %d τ %d", c.EA()/ms, c.Freshness()/ms)
	}
	// A window of 2 forgets the first residual: mean 17.5 → EA 317.5 ms.
	c2 := NewChen(100*ms, 2, 0)
	for i, a := range []int64{10, 120, 215} {
		c2.Observe(uint64(i), a*ms)
	}
	if c2.EA() != 317500*int64(time.Microsecond) {
		t.Fatalf("window 2: EA %v", time.Duration(c2.EA()))
	}
}

func TestLostAndReorderedHeartbeats(t *testing.T) {
	c := NewChen(100*ms, 10, 0)
	c.Observe(0, 10*ms)
	c.Observe(3, 312*ms) // 1 and 2 lost: residual 12
	c.Observe(2, 250*ms) // arrives late, out of order: ignored
	c.Observe(3, 999*ms) // duplicate: ignored
	if got := c.EA(); got != 11*ms+400*ms {
		t.Fatalf("EA %v, want 411ms (mean residual 11 + Δ·4)", time.Duration(got))
	}
	for _, name := range Names {
		d, err := New(name, 100*ms, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Observe(5, 510*ms)
		before := d.Freshness()
		d.Observe(4, 420*ms)
		if d.Freshness() != before {
			t.Errorf("%s: an older heartbeat moved the freshness point", name)
		}
	}
}

// TestBertierHandComputed: after the first heartbeat, e = A − EA − delay.
func TestBertierHandComputed(t *testing.T) {
	b := NewBertier(100*ms, 10, 1, 4, 0.1)
	b.Observe(0, 10*ms) // EA after: 10 + 100 = 110
	b.Observe(1, 130*ms)
	// e = 130 − 110 − 0 = 20 ms; delay = 2 ms; var = 0.1·20 = 2 ms.
	// EA now: mean(10, 30) + 200 = 220 ms; τ = 220 + 1·2 + 4·2 = 230 ms.
	if got := b.Freshness(); got != 230*ms {
		t.Fatalf("τ %v, want 230ms", time.Duration(got))
	}
}

// TestPhiHandComputed: intervals 100, 100, 100 ms with min std 10 ms; at
// threshold Φ the freshness point is last + mean + z·σ with
// P(N > z) = 10^−Φ; for Φ = 3, z = 3.0902.
func TestPhiHandComputed(t *testing.T) {
	p := NewPhi(100*ms, 10, 3, 10*ms, 0)
	for i := range 4 {
		p.Observe(uint64(i), int64(i)*100*ms)
	}
	want := 300*ms + 100*ms + int64(3.0902*10*float64(ms))
	if got := p.Freshness(); math.Abs(float64(got-want)) > float64(ms)/10 {
		t.Fatalf("τ %v, want %v", time.Duration(got), time.Duration(want))
	}
}

func TestTwoWindowsTakesTheLater(t *testing.T) {
	d := NewTwoWindows(100*ms, 100, 2, 0)
	for i := range 50 {
		d.Observe(uint64(i), int64(i)*100*ms+10*ms)
	}
	d.Observe(50, 50*100*ms+90*ms) // delay jumps to 90 ms
	d.Observe(51, 51*100*ms+90*ms)
	// The short window sees 90 ms at once; the long one about 13 ms.
	if got := d.Freshness() - 52*100*ms; got != 90*ms {
		t.Fatalf("residual part %v, want 90ms", time.Duration(got))
	}
}

func TestMLLearnsAConstantDelayAndSkipsOutages(t *testing.T) {
	m := NewML(100*ms, DefaultMLConfig())
	seq := uint64(0)
	for range 3000 {
		m.Observe(seq, int64(seq)*100*ms+40*ms)
		seq++
	}
	// Predicts 40 ms residual with a near-zero margin.
	slack := m.Freshness() - (int64(seq)*100*ms + 40*ms)
	if slack < 0 || slack > 2*ms {
		t.Fatalf("slack after a constant delay: %v", time.Duration(slack))
	}
	// A 2 s outage, then heartbeats resume at the same delay: not learned.
	seq += 20
	m.Observe(seq, int64(seq)*100*ms+40*ms)
	if m.Margin() > 2*ms {
		t.Fatalf("margin grew after an outage: %v", time.Duration(m.Margin()))
	}
}

func TestNewRejectsUnknownParams(t *testing.T) {
	if _, err := New("chen", 100*ms, Params{"alpah_ms": 3}); err == nil || !strings.Contains(err.Error(), "alpah_ms") {
		t.Errorf("typo accepted: %v", err)
	}
	if _, err := New("nope", 100*ms, nil); err == nil {
		t.Error("unknown detector accepted")
	}
	for _, v := range []float64{-1, 0.5, 3} {
		if _, err := New("ml", 100*ms, Params{"loss_model": v}); err == nil || !strings.Contains(err.Error(), "loss_model") {
			t.Errorf("loss_model %v accepted: %v", v, err)
		}
	}
	if _, err := ParseParams([]string{"x"}); err == nil {
		t.Error("param without = accepted")
	}
	for _, bad := range []string{"window=NaN", "window=+Inf", "alpha_ms=-Inf", "quantile=inf", "q=1e999"} {
		if _, err := ParseParams([]string{bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if p, err := ParseParams([]string{"alpha_ms=1e308", "quantile=0.999"}); err != nil || p["alpha_ms"] != 1e308 {
		t.Errorf("finite params refused: %v %v", p, err)
	}
}

var _ = binary.BigEndian

// TestTailQuantileSmoothsTheFarTail: on exponential samples (mean 10 ms)
// the fitted 0.9999 quantile is near the true one (10 ms · ln 10⁴ = 92 ms)
// even though the window holds only two samples beyond it.
func TestTailQuantileSmoothsTheFarTail(t *testing.T) {
	q := newQuantileWindow(20000)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		q.add(rng.ExpFloat64() * 10 * float64(ms))
	}
	want := 10 * float64(ms) * math.Log(1e4)
	if got := q.tailQuantile(0.9999, 0.99); math.Abs(got-want)/want > 0.15 {
		t.Errorf("tail quantile %.1f ms, want about %.1f ms", got/float64(ms), want/float64(ms))
	}
	if got, plain := q.tailQuantile(0.9, 0.99), q.quantile(0.9); got != plain {
		t.Errorf("below the threshold the fit must be the plain quantile: %v != %v", got, plain)
	}
}

// TestMLTimeObjectiveCoversLossesAndPause: with the time objective,
// lateness against the point in force counts lost heartbeats, so on a link
// that loses one heartbeat in 50 a 0.99 margin covers a whole period; the
// pause floor holds whatever the history.
func TestMLTimeObjectiveCoversLossesAndPause(t *testing.T) {
	d, err := New("ml", 100*ms, Params{"time_objective": 1, "quantile": 0.99})
	if err != nil {
		t.Fatal(err)
	}
	m := d.(*ML)
	for seq := uint64(0); seq < 5000; seq++ {
		if seq%50 == 49 {
			continue // lost
		}
		m.Observe(seq, int64(seq)*100*ms+40*ms)
	}
	if m.Margin() < 90*ms {
		t.Errorf("time objective margin %v with 2 %% loss, want about one period", time.Duration(m.Margin()))
	}
	c, err := New("ml", 100*ms, Params{"pause_ms": 700})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(0); seq < 3000; seq++ {
		c.Observe(seq, int64(seq)*100*ms+40*ms)
	}
	if c.(*ML).Margin() < 700*ms {
		t.Errorf("margin %v below the 700 ms pause", time.Duration(c.(*ML).Margin()))
	}
}

// TestQuantileWindowMatchesSorting: the bucketed quantile is the upper edge
// of the bucket holding the exact quantile, as the window slides.
func TestQuantileWindowMatchesSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	q := newQuantileWindow(500)
	var all []float64
	for i := range 3000 {
		x := (rng.NormFloat64()*5 + 3) * float64(ms) // some ≤ 0: bucket 0
		q.add(x)
		all = append(all, x)
		if i%97 != 0 {
			continue
		}
		win := append([]float64(nil), all[max(0, len(all)-500):]...)
		slices.Sort(win)
		for _, p := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
			exact := win[max(0, int(math.Ceil(p*float64(len(win))))-1)]
			if got, want := q.quantile(p), qUpper(int(qBucket(exact))); got != want {
				t.Fatalf("after %d samples, q(%v) = %v, want %v (exact %v)", i+1, p, got, want, exact)
			}
		}
	}
}

// TestMLYoungDetectorAllowsAFewPeriods: for its first heartbeats a detector
// has no tail to go by; after a late heartbeat its prediction can be early,
// and with one period of margin it allowed as little as 150 ms of silence.
// It now allows at least OutagePeriods periods beyond the expected arrival.
func TestMLYoungDetectorAllowsAFewPeriods(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		m := NewML(100*ms, DefaultMLConfig())
		for s := uint64(1); s < youngSamples; s++ {
			a := int64(s)*100*ms + int64(rng.IntN(3))*ms
			if rng.IntN(10) == 0 {
				a += int64(rng.IntN(40)) * ms
			}
			m.Observe(s, a)
			if allowed := m.Freshness() - a; allowed < 300*ms {
				t.Fatalf("trial %d, heartbeat %d: %v of silence allowed", trial, s, time.Duration(allowed))
			}
		}
	}
}

// TestLossAware: a clean link keeps the inner detector's point; at 5 %
// random loss the margin grows by k−1 = 4 periods at the default budget
// (0.05^5 ≤ 2.5e-6 < 0.05^4; 5 at 1e-7) and no gap of up to 4 lost
// heartbeats is a suspicion, while the bare
// detector suspects at most double losses; silence leaves the estimate
// alone, so a crash is still detected.
func TestLossAware(t *testing.T) {
	const period = int64(100 * time.Millisecond)
	clean := NewLossAware(NewChen(period, 100, 50e6), period, DefaultLossBudget)
	for s := range uint64(500) {
		clean.Observe(s, int64(s)*period)
	}
	if clean.Extra() != 0 {
		t.Fatalf("clean link: %d extra periods, want 0", clean.Extra())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	bare := NewChen(period, 100, 50e6)
	aware := NewLossAware(NewChen(period, 100, 50e6), period, DefaultLossBudget)
	var bareMistakes, awareMistakes int
	for s := range uint64(20000) {
		if rng.Float64() < 0.05 {
			continue // lost
		}
		at := int64(s) * period
		if s > 2000 { // after both have learned the link
			if at > bare.Freshness() {
				bareMistakes++
			}
			if at > aware.Freshness() {
				awareMistakes++
			}
		}
		bare.Observe(s, at)
		aware.Observe(s, at)
	}
	if e := aware.Extra(); e < 3 || e > 5 {
		t.Errorf("5 %% loss (estimated %.3f): %d extra periods, want 4 ± 1", aware.Loss(), e)
	}
	if bareMistakes < 20 || awareMistakes != 0 {
		t.Errorf("mistakes: bare %d (want many), loss-aware %d (want 0)", bareMistakes, awareMistakes)
	}
	// A crash now: the last heartbeat was 19999 (or a little earlier); the
	// freshness point stays where it is, within the 5 extra periods and
	// Chen's margin of it, so the crash is detected in under a second.
	if wait := time.Duration(aware.Freshness() - int64(19999)*period); wait > time.Second {
		t.Errorf("a crash would be detected %v after the last heartbeat, want under 1 s", wait)
	}
}

// TestLossAwareOutageIsNotLoss: a partition's gap of 50 heartbeats leaves
// the estimate of a clean link at zero.
func TestLossAwareOutageIsNotLoss(t *testing.T) {
	const period = int64(100 * time.Millisecond)
	d := NewLossAware(NewChen(period, 100, 50e6), period, DefaultLossBudget)
	for s := range uint64(200) {
		d.Observe(s, int64(s)*period)
	}
	for s := uint64(250); s < 300; s++ {
		d.Observe(s, int64(s)*period)
	}
	if d.Loss() > 0.01 || d.Extra() != 0 {
		t.Fatalf("after an outage: loss %.3f, %d extra periods; want the clean link's 0", d.Loss(), d.Extra())
	}
}

func TestNewLossBudgetParam(t *testing.T) {
	const period = int64(100 * time.Millisecond)
	if d, err := New("ml", period, Params{LossBudgetParam: 1e-7, "quantile": 0.99}); err != nil {
		t.Fatal(err)
	} else if _, ok := d.(*LossAware); !ok {
		t.Errorf("loss_budget=1e-7 built %T, want *LossAware", d)
	}
	if d, err := New("chen", period, Params{LossBudgetParam: 0}); err != nil {
		t.Fatal(err)
	} else if _, ok := d.(*LossAware); ok {
		t.Error("loss_budget=0 still wrapped the detector")
	}
	for _, bad := range []float64{-1, 1, 2} {
		if _, err := New("chen", period, Params{LossBudgetParam: bad}); err == nil {
			t.Errorf("loss_budget=%v accepted", bad)
		}
	}
	if _, err := New("chen", period, Params{LossBudgetParam: 1e-7, "quantile": 1}); err == nil {
		t.Error("an unknown parameter next to loss_budget was accepted")
	}
}

// TestMLAfterASenderStall: a sender that was stopped for 2 s skips its
// ticks, so its heartbeats come 2 s later than their sequence numbers say
// from then on. The detector must take that as the link's new phase: with
// the baseline left 2 s behind, the learned reversion pulled the
// prediction early, and a peer was suspected 94 ms after a heartbeat
// (an end-to-end test, after SIGSTOP and SIGCONT).
func TestMLAfterASenderStall(t *testing.T) {
	for _, name := range []string{"ml", "ml-time"} {
		cfg := DefaultMLConfig()
		cfg.TimeObjective = name == "ml-time"
		m := NewML(100*ms, cfg)
		rng := rand.New(rand.NewPCG(1, 2))
		// The sender's Go ticker fires at multiples of the period. Stopped
		// just after tick 1500 for 2.08 s, it sends the one tick its
		// channel buffered (1501's) when it resumes, 20 ms before the next
		// tick on the old phase; its sequence numbers go on by one per
		// tick sent, not per tick due.
		worst := int64(math.MaxInt64)
		seq := uint64(0)
		for tick := int64(0); seq < 3000; tick++ {
			sent := tick * 100 * ms
			switch {
			case tick == 1501:
				sent = 1500*100*ms + 2080*ms // the buffered tick, at SIGCONT
			case tick > 1501 && tick <= 1520:
				continue // dropped while stopped
			}
			arrival := sent + 20*ms + rng.Int64N(10*ms)
			m.Observe(seq, arrival)
			if tick > 1500 {
				worst = min(worst, m.Freshness()-arrival)
			}
			seq++
		}
		// The next heartbeat is due up to a period (± 10 ms of jitter)
		// after the last; the point may come no earlier than half of that.
		if worst < 30*ms {
			t.Errorf("%s: after the stall a heartbeat was given %v before suspicion", name, time.Duration(worst))
		}
	}
}

// FuzzParseParams: a parameter list either fails with an error or gives
// finite values whose String form parses back to the same parameters (the
// form fd sweep prints for cluster.detector_params).
func FuzzParseParams(f *testing.F) {
	for _, s := range []string{"quantile=0.999", "loss_model=2,quantile=0.9998128602936442", "window=NaN", "a=1,a=2", "=", "x", "q=0x1p-3", "q=1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParams(strings.Split(s, ","))
		if err != nil {
			return
		}
		for k, v := range p {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%q: %s = %v accepted", s, k, v)
			}
		}
		if len(p) == 0 {
			return
		}
		back, err := ParseParams(strings.Split(p.String(), ","))
		if err != nil {
			t.Fatalf("%q: String %q does not parse: %v", s, p.String(), err)
		}
		if !maps.Equal(p, back) {
			t.Fatalf("%q: %v → %q → %v", s, p, p.String(), back)
		}
	})
}
