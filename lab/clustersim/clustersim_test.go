package clustersim

import "testing"

func TestModel(t *testing.T) {
	c := Costs{PeriodSec: 0.1, PacketBytes: 150, PacketCPUSec: 20e-6, BaseCPUSec: 0.002, IndicatorBPerSec: 100}
	all, err := Model(c, Scheme{}, 101)
	if err != nil {
		t.Fatal(err)
	}
	if all.PacketsPerSec != 1000 || all.BytesPerSec != 150000 || all.IndicatorBytesPerSec != 10000 || all.DetectRounds != 1 {
		t.Fatalf("all-to-all at 101 nodes: %+v", all)
	}
	if got := all.CPUSec; got < 0.0219 || got > 0.0221 {
		t.Fatalf("CPU = %v, want 0.022", got)
	}
	b, _ := Model(c, Scheme{Monitors: 8, Indicator: 10}, 10001)
	if b.PacketsPerSec != 80 || b.IndicatorBytesPerSec != 1000 || b.DetectRounds < 2 {
		t.Fatalf("bounded at 10001 nodes: %+v", b)
	}
	// The crossover: 2 ms base + (n-1) × 10/s × 20 µs = 5 % of a core.
	if n := Crossover(c, 0.05); n != 241 {
		t.Fatalf("crossover = %d, want 241", n)
	}
	if _, err := Model(c, Scheme{}, 0); err == nil {
		t.Fatal("0 nodes accepted")
	}
}
