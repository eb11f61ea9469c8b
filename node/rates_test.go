package node

import (
	"testing"
	"time"
)

func TestRateWindowOverTheLastMinute(t *testing.T) {
	var w rateWindow
	t0 := time.Unix(1000, 0)
	if w.rates() != nil {
		t.Fatal("rates from no samples")
	}
	for i := range 30 { // 150 s of samples, 10 requests per 5 s step
		w.add(t0.Add(time.Duration(i)*rateStep), map[string]float64{"result hit": float64(10 * i)})
	}
	r := w.rates()
	if got := r["result hit"]; got < 1.99 || got > 2.01 {
		t.Errorf("rate %v, want 2/s", got)
	}
	if n := len(w.samples); n > int(rateSpan/rateStep)+2 {
		t.Errorf("%d samples kept for a %v span", n, rateSpan)
	}
	w.add(t0.Add(31*rateStep), map[string]float64{"result hit": 0}) // a counter that went back (a reload's new site)
	if got := w.rates()["result hit"]; got != 0 {
		t.Errorf("a counter that went back gave rate %v", got)
	}
}

func TestHumanUnits(t *testing.T) {
	for v, want := range map[any]string{int64(87): "87 B", int64(1536): "1.5 KiB", int64(256 << 20): "256.0 MiB", 3.0 * (1 << 30): "3.0 GiB"} {
		if got := humanBytes(v); got != want {
			t.Errorf("humanBytes(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[any]string{uint64(7): "7", int64(1234567): "1,234,567", 1000.0: "1,000"} {
		if got := humanCount(v); got != want {
			t.Errorf("humanCount(%v) = %q, want %q", v, got, want)
		}
	}
}
