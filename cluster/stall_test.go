package cluster

import (
	"testing"
	"time"
)

// TestSchedWatchRemembersLocalDelayForItsWindow: a monitor lag counts as a
// local delay for the window, then is forgotten; a busy scheduler (more
// runnable goroutines than CPUs) shows up without any lag.
func TestSchedWatchRemembersLocalDelayForItsWindow(t *testing.T) {
	w := newSchedWatch(400*time.Millisecond, true)
	t0 := time.Now()
	if d := w.observe(t0, 80*time.Millisecond); d < 80*time.Millisecond {
		t.Fatalf("lag of 80 ms gave local delay %v", d)
	}
	if d := w.observe(t0.Add(200*time.Millisecond), 0); d < 80*time.Millisecond {
		t.Fatalf("forgot the lag within the window: %v", d)
	}
	if d := w.observe(t0.Add(time.Second), 0); d >= 80*time.Millisecond {
		t.Fatalf("still remembers the lag after the window: %v", d)
	}
	if w.histogram() == nil {
		t.Skip("this Go runtime has no /sched/latencies:seconds")
	}
	// Keep more goroutines runnable than there are CPUs for a while: some
	// wait in the run queue, and the histogram says so.
	stop := time.Now().Add(100 * time.Millisecond)
	done := make(chan struct{})
	for range 64 {
		go func() {
			defer func() { done <- struct{}{} }()
			for time.Now().Before(stop) {
			}
		}()
	}
	for range 64 {
		<-done
	}
	if d := w.observe(time.Now(), 0); d <= 0 {
		t.Errorf("64 spinning goroutines left no run-queue latency: %v", d)
	}
}

// TestBlindWatchKeepsTheTickerLagOnly: with the run-queue latency left out
// (Config.runQueueBlind, for virtual time) the local delay is the ticker
// lag alone, however busy the real process is.
func TestBlindWatchKeepsTheTickerLagOnly(t *testing.T) {
	w := newSchedWatch(400*time.Millisecond, false)
	now := time.Now()
	busy(50 * time.Millisecond) // real run-queue latency the runtime records
	if d := w.observe(now, 0); d != 0 {
		t.Errorf("blind watch reports %v with no ticker lag: want 0", d)
	}
	if d := w.observe(now.Add(10*time.Millisecond), 7*time.Millisecond); d != 7*time.Millisecond {
		t.Errorf("blind watch reports %v for a 7ms ticker lag", d)
	}
}

// busy keeps more goroutines runnable than there are Ps for about d.
func busy(d time.Duration) {
	stop := time.Now().Add(d)
	done := make(chan struct{})
	for range 8 {
		go func() {
			for time.Now().Before(stop) {
			}
			done <- struct{}{}
		}()
	}
	for range 8 {
		<-done
	}
}
