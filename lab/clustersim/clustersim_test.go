package clustersim

import (
	"math"
	"testing"
)

func TestModel(t *testing.T) {
	c := Costs{PeriodSec: 0.1, PacketBytes: 150, PacketCPUSec: 20e-6, BaseCPUSec: 0.002, IndicatorBPerSec: 100}
	all, err := Model(c, Scheme{}, 101)
	if err != nil {
		t.Fatal(err)
	}
	if all.PacketsPerSec != 1000 || all.BytesPerSec != 150000 || all.IndicatorBytesPerSec != 10000 || all.MembershipPacketsPerSec != 0 || all.DeadEverywhereSec != all.LocalDropSec {
		t.Fatalf("all-to-all at 101 nodes: %+v", all)
	}
	if got := all.CPUSec; got < 0.0219 || got > 0.0221 {
		t.Fatalf("CPU = %v, want 0.022", got)
	}
	m := DefaultMembership
	b, _ := Model(c, Scheme{Monitors: 4, Indicator: 10, Membership: m}, 10001)
	// 40 heartbeats and 2 probe packets per second.
	if b.PacketsPerSec != 42 || b.MembershipPacketsPerSec != 2 || b.IndicatorBytesPerSec != 1000 {
		t.Fatalf("bounded at 10001 nodes: %+v", b)
	}
	// 1 s probe + 4 × 4 s suspicion + ⌈log3 10001⌉ = 9 rounds of 0.2 s.
	if math.Abs(b.DeadEverywhereSec-18.8) > 1e-3 {
		t.Fatalf("dead everywhere at 10001 nodes = %v s, want 18.8", b.DeadEverywhereSec)
	}
	// Push/pull at 100 nodes: every 5 s × 3, both sides sending 100 members.
	h, _ := Model(c, Scheme{Monitors: 4, Membership: m}, 100)
	if want := 2*m.ProbeBytes + 2*100*m.MemberBytes/15; math.Abs(h.MembershipBytesPerSec-want) > 1e-9 {
		t.Fatalf("membership bytes at 100 nodes = %v, want %v", h.MembershipBytesPerSec, want)
	}
	// The crossover: 2 ms base + (n-1) × 10/s × 20 µs = 5 % of a core.
	if n := Crossover(c, 0.05); n != 241 {
		t.Fatalf("crossover = %d, want 241", n)
	}
	if _, err := Model(c, Scheme{}, 0); err == nil {
		t.Fatal("0 nodes accepted")
	}
}
