package chaos

import (
	"net/netip"
	"testing"
	"time"

	"github.com/edgecache/edge/lab/netns"
)

// Review tests: score() fed synthetic histories (no namespaces needed).

func reviewLab(n int) *Lab {
	l := &Lab{}
	a := netip.MustParseAddr("198.51.100.1")
	for i := range n {
		l.nodes = append(l.nodes, &netns.Host{Name: nodeName(i), Addr: a})
		a = a.Next()
	}
	return l
}

func at(start time.Time, ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }

// A suspicion the fault causes after it ended (a late detection, inside the
// grace window) splits the views again, but allTrusted takes the FIRST
// moment every pair is trusted, before the split: healing is reported
// 200 ms while the views were split until 3.1 s, 1.1 s after the heal.
func TestHealIgnoresLateSuspicionInGrace(t *testing.T) {
	l := reviewLab(2)
	start := time.Unix(1_700_000_000, 0)
	h := newHistories()
	// n1 suspects n2 during the partition and trusts it 200 ms after it.
	h.add(0, 1, transition{at(start, 1500), false})
	h.add(0, 1, transition{at(start, 2200), true})
	// n2 detects n1 late: 400 ms after the heal, trusts it at 3.1 s.
	h.add(1, 0, transition{at(start, 2400), false})
	h.add(1, 0, transition{at(start, 3100), true})
	sc := Scenario{Name: "p", Duration: 5 * time.Second, Steps: []Step{{Fault: Partition{Group: []int{1}}, At: time.Second, For: time.Second}}}
	ivs := [][][2]time.Time{{{at(start, 1000), at(start, 2000)}}}
	res := &Result{}
	l.score(res, sc, ivs, start, start, at(start, 6000), h, nil)
	st := res.Steps[0]
	t.Logf("heal %v ms, not healed %d, detect %v, missed %d, false %d, baseline %d", st.HealMs, st.NotHealed, st.DetectMs, st.Missed, st.FalseSuspicions, res.BaselineSuspicions)
	if len(st.HealMs) != 1 || st.HealMs[0] < 1100 {
		t.Errorf("heal %v ms; the views were split until 3.1 s (1100 ms after the fault ended)", st.HealMs)
	}
}

// A short partition that ends before anybody detects it: the suspicion
// comes 300 ms after the end, the views stay split for 700 ms more, and the
// step reports healing in 0 ms.
func TestHealZeroWhenDetectionAfterEnd(t *testing.T) {
	l := reviewLab(2)
	start := time.Unix(1_700_000_000, 0)
	h := newHistories()
	h.add(0, 1, transition{at(start, 2300), false})
	h.add(0, 1, transition{at(start, 3000), true})
	sc := Scenario{Name: "p", Duration: 5 * time.Second, Steps: []Step{{Fault: Partition{Group: []int{1}}, At: time.Second, For: time.Second}}}
	ivs := [][][2]time.Time{{{at(start, 1000), at(start, 2000)}}}
	res := &Result{}
	l.score(res, sc, ivs, start, start, at(start, 6000), h, nil)
	st := res.Steps[0]
	t.Logf("heal %v ms, missed %d", st.HealMs, st.Missed)
	if len(st.HealMs) == 1 && st.HealMs[0] == 0 {
		t.Errorf("heal 0 ms reported, but n1 suspected n2 from 2.3 s to 3.0 s, after the fault")
	}
}

// Flapping: onsets [1,2] and [3,4] s, grace 2 s: their windows [1,4) and
// [3,6) overlap, so one client error at 3.5 s is counted twice for the step.
func TestErrorsDoubleCountedAcrossOnsets(t *testing.T) {
	l := reviewLab(2)
	start := time.Unix(1_700_000_000, 0)
	sc := Scenario{Name: "f", Duration: 6 * time.Second, Steps: []Step{{Fault: Loss{Share: 0.5}, At: time.Second, For: 4 * time.Second, Every: 2 * time.Second, On: time.Second}}}
	ivs := [][][2]time.Time{{{at(start, 1000), at(start, 2000)}, {at(start, 3000), at(start, 4000)}}}
	res := &Result{}
	res.Load.Errors = 1
	res.Load.ErrorTimes = []float64{3.5}
	l.score(res, sc, ivs, start, start, at(start, 7000), newHistories(), nil)
	if got := res.Steps[0].Errors; got != 1 {
		t.Errorf("one client error counted %d times for the step", got)
	}
}

// Crash and restart: a new edge process starts with every peer untrusted
// and records no transition for that (p.trusted is false, history empty);
// it records "trusted" only when it hears the peer. The merged history
// still ends, for the restarted observer, with the OLD process's "trusted",
// so allTrusted declares the cluster healed while n3 still distrusts n1 and
// n2 (until 3.6 s): 100 ms reported, 600 ms true.
func TestHealAfterRestartIgnoresRestartedNodesUntrust(t *testing.T) {
	l := reviewLab(3)
	start := time.Unix(1_700_000_000, 0)
	h := newHistories()
	// Before the scenario: everyone trusts everyone.
	for o := range 3 {
		for p := range 3 {
			if o != p {
				h.add(o, p, transition{at(start, -10_000), true})
			}
		}
	}
	// n1, n2 suspect the crashed n3 and trust it again at 3.1 s.
	for o := range 2 {
		h.add(o, 2, transition{at(start, 1500), false})
		h.add(o, 2, transition{at(start, 3100), true})
	}
	// The restarted n3 trusts its peers at 3.6 s (untrusted since 3.0 s,
	// with no transition for that).
	h.add(2, 0, transition{at(start, 3600), true})
	h.add(2, 1, transition{at(start, 3600), true})
	sc := Scenario{Name: "c", Duration: 5 * time.Second, Steps: []Step{{Fault: Crash{Node: 2}, At: time.Second, For: 2 * time.Second}}}
	ivs := [][][2]time.Time{{{at(start, 1000), at(start, 3000)}}}
	res := &Result{}
	l.score(res, sc, ivs, start, start, at(start, 6000), h, nil)
	st := res.Steps[0]
	t.Logf("heal %v ms", st.HealMs)
	if len(st.HealMs) != 1 || st.HealMs[0] < 600 {
		t.Errorf("heal %v ms; the restarted n3 distrusted its peers until 600 ms after the restart", st.HealMs)
	}
}

// A request in flight during a fault that fails after its window (a
// timeout of a request the fault stalled) is the fault's; one sent and
// failed outside every window is not; one in flight across two steps
// counts once against the scenario.
func TestErrorsPlacedByTheirWholeSpan(t *testing.T) {
	l := reviewLab(2)
	start := time.Unix(1_700_000_000, 0)
	sc := Scenario{Name: "s", Duration: 30 * time.Second, Steps: []Step{
		{Fault: Partition{Group: []int{1}}, At: 2 * time.Second, For: 3 * time.Second},
		{Fault: Loss{Share: 0.2}, At: 13 * time.Second, For: 3 * time.Second},
	}}
	ivs := [][][2]time.Time{{{at(start, 2000), at(start, 5000)}}, {{at(start, 13000), at(start, 16000)}}}
	res := &Result{}
	res.Load.Errors = 3
	res.Load.ErrorTimes = []float64{12.5, 18.0, 25.0}
	res.Load.ErrorStarts = []float64{2.5, 8.0, 24.0}
	l.score(res, sc, ivs, start, start, at(start, 30000), newHistories(), nil)
	if res.Steps[0].Errors != 1 || res.Steps[1].Errors != 1 || res.ErrorsOutside != 1 {
		t.Errorf("partition %d, loss %d, outside %d; want 1, 1 and 1", res.Steps[0].Errors, res.Steps[1].Errors, res.ErrorsOutside)
	}
}
