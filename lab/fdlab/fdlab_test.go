package fdlab

import (
	"bytes"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/fdetect"
)

const ms = int64(time.Millisecond)

// TestReplayKnownAnswers on a hand-made trace: Chen with window 1 and α = 0.
// After warm-up, heartbeats alternate 10 ms and 30 ms residuals.
func TestReplayKnownAnswers(t *testing.T) {
	var as []Arrival
	n := Warmup + 101
	for i := range n {
		r := int64(10)
		if i%2 == 1 {
			r = 30
		}
		as = append(as, Arrival{Site: "a", Seq: uint64(i), Send: int64(i) * 100 * ms, Recv: int64(i)*100*ms + r*ms})
	}
	res, err := Replay(as, 100*ms, func() (fdetect.Detector, error) { return fdetect.NewChen(100*ms, 1, 0), nil })
	if err != nil {
		t.Fatal(err)
	}
	r := res.Overall
	// Measured: heartbeats Warmup..n−1 (101). τ_k = EA from the previous
	// residual: a 30 after a 10 is late by 20 ms; a 10 after a 30 is early
	// by 20 ms. Warmup is even, so measured k starts on a 10-residual:
	// 51 on time (early by 20) and 50 late (by 20).
	if r.Heartbeats != 101 || r.Mistakes != 50 || math.Abs(r.PA-51.0/101) > 1e-9 {
		t.Fatalf("%+v", r)
	}
	if math.Abs(r.TDms-(51*20.0-50*20.0)/101) > 1e-9 || math.Abs(r.MistakeMeanMs-20) > 1e-9 {
		t.Fatalf("T_D %v, mistake mean %v", r.TDms, r.MistakeMeanMs)
	}
	// Detection time after each heartbeat: τ − A = Δ (window 1: the same residual again).
	if math.Abs(r.DetectMeanMs-100) > 1e-9 || math.Abs(r.DetectP99Ms-100) > 1e-9 {
		t.Fatalf("detect %v / %v", r.DetectMeanMs, r.DetectP99Ms)
	}
	// Time trusted: 50 mistakes of 20 ms over the span from the arrival of
	// heartbeat Warmup−1 (residual 30) to the last (residual 10): 10 080 ms.
	if math.Abs(r.PATime-(1-1000.0/10080)) > 1e-9 {
		t.Fatalf("P_A(time) %v", r.PATime)
	}
}

// TestSeedMetricCountsLostHeartbeats: on a link with perfectly regular
// arrivals and one heartbeat in ten lost, every received heartbeat is on
// time against its own point, so the received-only variant says 1; the
// seed's P_A is the share of predictions (one per arrival) that the next
// arrival met, and a 5 ms margin does not cover a lost heartbeat's gap: the
// arrival after each loss is unsafe, 100 of 900.
func TestSeedMetricCountsLostHeartbeats(t *testing.T) {
	var as []Arrival
	for i := range Warmup + 1000 {
		if i > Warmup && i%10 == 5 {
			continue // lost
		}
		as = append(as, Arrival{Site: "a", Seq: uint64(i), Send: int64(i) * 100 * ms, Recv: int64(i)*100*ms + 10*ms})
	}
	res, err := Replay(as, 100*ms, func() (fdetect.Detector, error) { return fdetect.NewChen(100*ms, 10, 5*ms), nil })
	if err != nil {
		t.Fatal(err)
	}
	r := res.Overall
	if r.Lost != 100 || r.Heartbeats != 900 || r.PAArrived != 1 || math.Abs(r.PA-800.0/900) > 1e-12 {
		t.Fatalf("lost %d, received %d, P_A %v, P_A(arrived) %v: want 100, 900, 8/9, 1", r.Lost, r.Heartbeats, r.PA, r.PAArrived)
	}
	// A margin over a period covers a single loss: every prediction safe.
	res, err = Replay(as, 100*ms, func() (fdetect.Detector, error) { return fdetect.NewChen(100*ms, 10, 105*ms), nil })
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Overall; r.PA != 1 || r.PAArrived != 1 {
		t.Fatalf("margin 105 ms: P_A %v, P_A(arrived) %v, want 1 and 1", r.PA, r.PAArrived)
	}
	if pa, _ := r.QoS(MetricSeed); pa != r.PA {
		t.Errorf("QoS(seed) = %v, want P_A %v", pa, r.PA)
	}
	if pa, _ := r.QoS(MetricSeedArrived); pa != 1 {
		t.Errorf("QoS(seed-arrived) = %v, want 1", pa)
	}
	for _, bad := range []string{"", "Seed", "chen ", "arrived"} {
		if _, err := ParseMetric(bad); err == nil {
			t.Errorf("ParseMetric(%q) accepted", bad)
		}
	}
}

// TestSweepDefaultsForMLByChen: ml swept by Chen's metric runs its time
// objective along the combined knob, by the seed's metric its priced loss
// model, unless the caller says otherwise; other detectors and the
// received-only metric are left alone.
func TestSweepDefaultsForMLByChen(t *testing.T) {
	base := fdetect.Params{"window": 500}
	p, knob := SweepDefaults("ml", MetricChen, base, "")
	if knob != PauseQuantile || p["time_objective"] != 1 || p["window"] != 500 {
		t.Fatalf("ml by chen: %v %q", p, knob)
	}
	if _, ok := p["loss_model"]; ok {
		t.Fatalf("ml by chen got a loss model: %v", p)
	}
	if _, ok := base["time_objective"]; ok {
		t.Fatal("SweepDefaults modified its argument")
	}
	if p, knob := SweepDefaults("ml", MetricChen, fdetect.Params{"time_objective": 0}, "quantile"); knob != "quantile" || p["time_objective"] != 0 {
		t.Fatalf("explicit choices overridden: %v %q", p, knob)
	}
	p, knob = SweepDefaults("ml", MetricSeed, base, "")
	if knob != "" || p["loss_model"] != fdetect.LossModelPriced || p["window"] != 500 || len(p) != 2 {
		t.Fatalf("ml by seed: %v %q", p, knob)
	}
	if _, ok := base["loss_model"]; ok {
		t.Fatal("SweepDefaults modified its argument")
	}
	if p, _ := SweepDefaults("ml", MetricSeed, fdetect.Params{"loss_model": 0}, ""); p["loss_model"] != 0 {
		t.Fatalf("explicit loss_model=0 overridden: %v", p)
	}
	// A loss budget's margin already covers the losses: no loss model on top.
	if p, _ := SweepDefaults("ml", MetricSeed, fdetect.Params{"loss_budget": 2.5e-6}, ""); len(p) != 1 {
		t.Fatalf("loss model added beside a loss budget: %v", p)
	}
	if p, _ := SweepDefaults("ml", MetricSeed, fdetect.Params{"loss_budget": 0}, ""); p["loss_model"] != fdetect.LossModelPriced {
		t.Fatalf("loss_budget=0 (off) kept the loss model out: %v", p)
	}
	for _, c := range []struct {
		name string
		m    Metric
	}{{"phi", MetricSeed}, {"phi", MetricChen}, {"ml", MetricSeedArrived}, {"chen", MetricSeed}} {
		if p, knob := SweepDefaults(c.name, c.m, nil, ""); p != nil || knob != "" {
			t.Errorf("%s by %s: %v %q, want nothing added", c.name, c.m, p, knob)
		}
	}
}

// generated returns a default generated trace of the given length and
// number of links, and the configuration that made it.
func generated(t testing.TB, d time.Duration, links int) (GenConfig, []Arrival) {
	t.Helper()
	c := DefaultGenConfig()
	c.Duration, c.Links = d, links
	as, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	return c, as
}

// TestCurveIsTheSweepsLine: the trade-off plot draws ml with what a sweep
// by the same metric adds (the loss model by the seed's metric), not the
// bare detector, so the curve holds the point the sweep prints.
func TestCurveIsTheSweepsLine(t *testing.T) {
	c, as := generated(t, 2*time.Minute, 1)
	period := int64(c.Period)
	got, err := Curve(as, "ml", period, 4, nil, MetricSeed)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Curve(as, "ml", period, 4, fdetect.Params{"loss_model": fdetect.LossModelPriced}, MetricSeed)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := Curve(as, "ml", period, 4, fdetect.Params{"loss_model": 0}, MetricSeed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("default curve %v, want the loss model's %v", got, want)
	}
	if slices.Equal(got, bare) {
		t.Errorf("default curve equals the bare detector's %v: the trace does not tell them apart", bare)
	}
}

func TestSweepMeetsTarget(t *testing.T) {
	c, as := generated(t, 5*time.Minute, 2)
	for _, m := range Metrics {
		for _, d := range []string{"chen", "phi", "ml"} {
			s, err := Sweep(as, d, int64(c.Period), 0.99, nil, m, "")
			if err != nil {
				t.Fatal(err)
			}
			if !s.Found || s.PA < 0.99 || s.Metric != m {
				t.Errorf("%s by %s: %+v", d, m, s)
			}
			if m == MetricChen && (s.TDms <= 0 || s.MistakeRate <= 0) {
				t.Errorf("%s by chen: T_D %.1f ms, mistake rate %v: want both positive (the trace has delays and stalls)", d, s.TDms, s.MistakeRate)
			}
			if s.MistakeRate <= 0 || s.MistakeDurationMs <= 0 {
				t.Errorf("%s by %s: λ_M %v, T_M %v ms: want both reported (the trace has stalls)", d, m, s.MistakeRate, s.MistakeDurationMs)
			}
		}
	}
}

// TestSweepRefusesWhatItCannotHonour: a target P_A outside (0, 1] (NaN
// once "met" with a config to copy), and a --param naming the knob the
// sweep sets (once dropped without a word).
func TestSweepRefusesWhatItCannotHonour(t *testing.T) {
	c, as := generated(t, time.Minute, 1)
	for _, target := range []float64{math.NaN(), -1, 0, 1.5} {
		if _, err := Sweep(as, "chen", int64(c.Period), target, nil, MetricSeed, ""); err == nil {
			t.Errorf("target %v accepted", target)
		}
	}
	for _, tc := range []struct {
		name, knob string
		base       fdetect.Params
	}{
		{"chen", "", fdetect.Params{"alpha_ms": 5}},
		{"ml", "", fdetect.Params{"quantile": 0.9}},
		{"ml", PauseQuantile, fdetect.Params{"pause_ms": 10}},
	} {
		_, err := Sweep(as, tc.name, int64(c.Period), 0.99, tc.base, MetricChen, tc.knob)
		if err == nil || !strings.Contains(err.Error(), "knob") {
			t.Errorf("%s %v knob %q: %v, want the swept knob refused", tc.name, tc.base, tc.knob, err)
		}
	}
}

// TestGenerateRefusesWhatItCannotMake: NaN, chances outside [0, 1] and
// negative durations once made traces replay refuses (a receive time of
// −2^63, heartbeats received before they were sent).
func TestGenerateRefusesWhatItCannotMake(t *testing.T) {
	for name, mod := range map[string]func(c *GenConfig){
		"jitter-shape NaN": func(c *GenConfig) { c.JitterShape = math.NaN() },
		"queue-rho NaN":    func(c *GenConfig) { c.QueueRho = math.NaN() },
		"loss-bad 2":       func(c *GenConfig) { c.LossBad = 2 },
		"good-to-bad -1":   func(c *GenConfig) { c.GoodToBad = -1 },
		"loss-good NaN":    func(c *GenConfig) { c.LossGood = math.NaN() },
		"jitter -1ms":      func(c *GenConfig) { c.JitterScale = -time.Millisecond },
		"shift-max -1s":    func(c *GenConfig) { c.ShiftMax = -time.Second },
		"stall-max -1s":    func(c *GenConfig) { c.StallMax = -time.Second },
		"stall-max < min":  func(c *GenConfig) { c.StallMax = c.StallMin / 2 },
	} {
		c := DefaultGenConfig()
		c.Duration, c.Links = time.Second, 1
		mod(&c)
		if _, err := Generate(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestGeneratorHasStallsAndLoss(t *testing.T) {
	c := DefaultGenConfig()
	c.Duration, c.Links, c.StallEvery = 10*time.Minute, 1, time.Minute
	as, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	expected := int(c.Duration / c.Period)
	if len(as) >= expected || len(as) < expected*9/10 {
		t.Errorf("%d of %d heartbeats received: want some loss", len(as), expected)
	}
	late := 0
	for _, a := range as {
		if time.Duration(a.Send-int64(a.Seq)*int64(c.Period)) >= c.StallMin {
			late++
		}
	}
	if late == 0 {
		t.Error("no heartbeat was delayed by a sender stall")
	}
}

// TestGeneratorSleepingSender: a sender that sleeps a period after each
// send drifts later than s·Δ by about its mean wake-up lateness per
// heartbeat, never sends two heartbeats less than a period apart (no burst
// after a stall), and a stall shifts every later heartbeat. A bad sender
// kind is an error.
func TestGeneratorSleepingSender(t *testing.T) {
	c := DefaultGenConfig()
	c.Duration, c.Links, c.Sender, c.SenderJitter, c.StallEvery = 10*time.Minute, 1, SenderSleep, 2*time.Millisecond, 2*time.Minute
	as, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(as, func(i, j int) bool { return as[i].Seq < as[j].Seq })
	last := as[len(as)-1]
	drift := time.Duration(last.Send-int64(last.Seq)*int64(c.Period)) / time.Duration(last.Seq)
	if drift < c.SenderJitter || drift > 3*c.SenderJitter {
		t.Errorf("drift %v per heartbeat, want about the wake-up lateness %v (plus stalls)", drift, c.SenderJitter)
	}
	for i := 1; i < len(as); i++ {
		gap := as[i].Send - as[i-1].Send
		if per := gap / int64(as[i].Seq-as[i-1].Seq); per < int64(c.Period) {
			t.Fatalf("heartbeats %d and %d sent %v apart: a sleeping sender sends no bursts", as[i-1].Seq, as[i].Seq, time.Duration(gap))
		}
	}
	c.Sender = "cron"
	if _, err := Generate(c); err == nil {
		t.Error("sender cron accepted")
	}
}

func TestTraceCSV(t *testing.T) {
	var buf bytes.Buffer
	for _, in := range [][]Arrival{
		{{Site: "a", Seq: 1, Send: 2, Recv: 3}, {Site: "b", Seq: 4, Send: 5, Recv: 6}},
		{{Site: "a", Seq: 1, Send: 2, Recv: 3, Delay: 7}, {Site: "b", Seq: 4, Send: 5, Recv: 6, Delay: 8}},
	} {
		buf.Reset()
		if err := WriteTrace(&buf, in); err != nil {
			t.Fatal(err)
		}
		out, err := ReadTrace(&buf)
		if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
			t.Fatalf("%v %v", out, err)
		}
	}
	for _, bad := range []string{"", "wrong,header\n", TraceHeader + "\na,1,2\n", TraceHeader + "\na,x,2,3\n", TraceHeader + "\n,1,2,3\n",
		TraceHeader + "\na,1,2,3,4\n", TraceHeaderDelay + "\na,1,2,3\n", TraceHeaderDelay + "\na,1,2,3,-4\n", TraceHeaderDelay + "\na,1,2,3,x\n", TraceHeader + "\n"} {
		if _, err := ReadTrace(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(TraceHeader + "\na,1,2,3\n"))
	f.Add([]byte(TraceHeader + "\n,,,\n"))
	f.Add([]byte(TraceHeaderDelay + "\na,1,2,3,4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := ReadTrace(bytes.NewReader(b))
		if err == nil {
			for _, a := range as {
				if a.Site == "" {
					t.Fatal("accepted an empty site")
				}
			}
		}
	})
}

func TestLSTMLearnsASine(t *testing.T) {
	m := NewMLSeed(100*ms, SeedConfig{Eta: 200, Epochs: 5, Batch: 32, Seq: 8, Hidden: 8, RetrainEvery: 20, EarlyPenalty: 1})
	var errLate float64
	for i := range 1200 {
		r := 50*ms + int64(20*float64(ms)*math.Sin(float64(i)/6))
		if i >= 1000 {
			pred := m.pred
			errLate += math.Abs(float64(r) - pred)
		}
		m.Observe(uint64(i), int64(i)*100*ms+r)
	}
	if mean := errLate / 200 / float64(ms); mean > 8 {
		t.Errorf("mean absolute error on a sine after training: %.2f ms", mean)
	}
}

// TestReplayCountsASuspicionOnce: after a stall the queued heartbeats arrive
// together, each still later than Chen's (mean-based) freshness point, so
// trust is restored only by the last. That is one mistake of 500 ms, not
// five overlapping ones (500 + 400 + 300 + 200 + 100 ms).
func TestReplayCountsASuspicionOnce(t *testing.T) {
	var as []Arrival
	n := Warmup + 20
	for i := range n {
		recv := int64(i) * 100 * ms
		if i >= Warmup+5 && i < Warmup+10 {
			recv = int64(Warmup+5)*100*ms + 500*ms // the burst behind a stall
		}
		as = append(as, Arrival{Site: "a", Seq: uint64(i), Send: int64(i) * 100 * ms, Recv: recv, Delay: 30 * ms})
	}
	res, err := Replay(as, 100*ms, func() (fdetect.Detector, error) { return fdetect.NewChen(100*ms, 1000, 0), nil })
	if err != nil {
		t.Fatal(err)
	}
	r := res.Overall
	if r.Mistakes != 1 || math.Abs(r.MistakeMeanMs-500) > 1 {
		t.Fatalf("mistakes %d of mean %.1f ms, want one of 500 ms", r.Mistakes, r.MistakeMeanMs)
	}
	if math.Abs(r.DelayMeanMs-30) > 1e-9 || math.Abs(r.TDChenMs-(r.TDms+30)) > 1e-9 {
		t.Fatalf("Chen T_D %.3f = seed T_D %.3f + delay %.3f, want delay 30", r.TDChenMs, r.TDms, r.DelayMeanMs)
	}
}

// TestReplayWindowMeasuresOnlyTheWindow: the same alternating trace, scored
// only over arrivals received in a window of 20 heartbeats that starts on a
// late one (every arrival before it observed, none before Warmup needed):
// 10 late ones are mistakes, and heartbeats outside the window count for
// nothing.
func TestReplayWindowMeasuresOnlyTheWindow(t *testing.T) {
	var as []Arrival
	for i := range 200 {
		r := int64(10)
		if i%2 == 1 {
			r = 30
		}
		as = append(as, Arrival{Site: "a", Seq: uint64(i), Send: int64(i) * 100 * ms, Recv: int64(i)*100*ms + r*ms})
	}
	from, to := as[51].Recv, as[71].Recv // arrivals 51..70: 10 late (odd), 10 early
	res, err := ReplayWindow(as, 100*ms, func() (fdetect.Detector, error) { return fdetect.NewChen(100*ms, 1, 0), nil }, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Overall; r.Heartbeats != 20 || r.Mistakes != 10 {
		t.Fatalf("heartbeats %d mistakes %d, want 20 and 10", r.Heartbeats, r.Mistakes)
	}
}
