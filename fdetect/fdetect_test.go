package fdetect

import (
	"bytes"
	"encoding/binary"
	"math"
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
	if _, err := ParseParams([]string{"x"}); err == nil {
		t.Error("param without = accepted")
	}
}

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
	res, err := Replay(as, 100*ms, func() (Detector, error) { return NewChen(100*ms, 1, 0), nil })
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
	for _, d := range []string{"chen", "phi", "ml"} {
		s, err := Sweep(as, d, int64(c.Period), 0.99, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Found || s.PA < 0.99 {
			t.Errorf("%s: %+v", d, s)
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
	in := []Arrival{{"a", 1, 2, 3}, {"b", 4, 5, 6}}
	if err := WriteTrace(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadTrace(&buf)
	if err != nil || len(out) != 2 || out[1] != in[1] {
		t.Fatalf("%v %v", out, err)
	}
	for _, bad := range []string{"", "wrong,header\n", TraceHeader + "\na,1,2\n", TraceHeader + "\na,x,2,3\n", TraceHeader + "\n,1,2,3\n"} {
		if _, err := ReadTrace(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(TraceHeader + "\na,1,2,3\n"))
	f.Add([]byte(TraceHeader + "\n,,,\n"))
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

func TestHeartbeatRejections(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now().UnixNano()
	hb := Heartbeat{Node: "n1", Incarnation: 5, Seq: 10, SendNs: now, Epoch: 3, FPR: 0.01, FNR: 0.1}
	enc := func(h Heartbeat) []byte {
		b, err := h.Encode(secret)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v := NewVerifier(secret, 5*time.Second)
	if got, err := v.Verify(enc(hb), now); err != nil || got != hb {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	good := enc(Heartbeat{Node: "n1", Incarnation: 5, Seq: 11, SendNs: now})
	cases := []struct {
		name string
		b    []byte
		now  int64
		want RejectReason
	}{
		{"forged", func() []byte { b, _ := hb.Encode([]byte("wrong")); return b }(), now, RejectMAC},
		{"tampered", func() []byte { b := append([]byte(nil), good...); b[10] ^= 1; return b }(), now, RejectMAC},
		{"short", good[:20], now, RejectShort},
		{"magic", append([]byte("XHB"), good[3:]...), now, RejectMagic},
		{"version", func() []byte { b := append([]byte(nil), good...); b[3] = 2; return b }(), now, RejectVersion},
		{"skew", enc(Heartbeat{Node: "n1", Incarnation: 5, Seq: 12, SendNs: now - int64(time.Minute)}), now, RejectSkew},
		{"replay", enc(hb), now, RejectReplay},
		{"old incarnation", enc(Heartbeat{Node: "n1", Incarnation: 4, Seq: 99, SendNs: now}), now, RejectIncarnation},
	}
	for _, tc := range cases {
		_, err := v.Verify(tc.b, tc.now)
		if r, _ := ReasonOf(err); r != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	// Reordered within the window is fine once; a restart (new incarnation) resets.
	if _, err := v.Verify(good, now); err != nil {
		t.Errorf("in-window reordered heartbeat: %v", err)
	}
	if _, err := v.Verify(enc(Heartbeat{Node: "n1", Incarnation: 6, Seq: 1, SendNs: now}), now); err != nil {
		t.Errorf("new incarnation: %v", err)
	}
	counts := v.Rejections()
	if counts[RejectMAC] != 2 || counts[RejectReplay] != 1 {
		t.Errorf("counts %v", counts)
	}
	if _, err := (Heartbeat{Node: strings.Repeat("x", 65)}).Encode(secret); err == nil {
		t.Error("oversized node id encoded")
	}
}

func TestRTTFromEcho(t *testing.T) {
	h := Heartbeat{EchoSeq: 3, EchoSendNs: 1000 * ms, EchoHoldNs: 20 * ms}
	if rtt, ok := RTT(h, 1050*ms); !ok || rtt != 30*time.Millisecond {
		t.Errorf("rtt %v %v", rtt, ok)
	}
	if _, ok := RTT(Heartbeat{}, 5); ok {
		t.Error("rtt without echo")
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	b, _ := Heartbeat{Node: "n", Seq: 1, SendNs: 1}.Encode([]byte("k"))
	f.Add(b)
	f.Add([]byte("EHB\x01\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b, []byte("k"))
		if err == nil {
			if h.Node == "" || len(h.Node) > maxIDLen {
				t.Fatalf("accepted node %q", h.Node)
			}
			again, _ := h.Encode([]byte("k"))
			if !bytes.Equal(again, b) {
				t.Fatal("accepted a packet that does not re-encode identically")
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

var _ = binary.BigEndian
