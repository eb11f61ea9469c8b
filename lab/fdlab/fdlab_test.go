package fdlab

import (
	"bytes"
	"math"
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

func TestSweepMeetsTarget(t *testing.T) {
	c := DefaultGenConfig()
	c.Duration, c.Links = 5*time.Minute, 2
	as, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Metric{MetricSeed, MetricChen} {
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
