package chaos

import (
	"testing"
	"time"
)

// scoreMembership on synthetic membership changes: a crashed node removed
// by every survivor is a death with its dead-everywhere time; a partitioned
// node removed by the majority is explained by the cut; a removal of a
// node nobody cut is a false death, inside a step or outside every step.
func TestScoreMembership(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	member := func(h *histories, o, p, ms int, in bool) { h.add(o, p, transition{at(start, ms), in}) }
	t.Run("crash", func(t *testing.T) {
		l := reviewLab(3)
		h := newHistories()
		// n3 crashes at 1 s and restarts at 9 s; n1 removes it at 6 s,
		// n2 at 6.5 s; both have it back at 10 s.
		member(h, 0, 2, 6000, false)
		member(h, 1, 2, 6500, false)
		member(h, 0, 2, 10000, true)
		member(h, 1, 2, 10000, true)
		sc := Scenario{Steps: []Step{{Fault: Crash{Node: 2}, At: time.Second, For: 8 * time.Second}}}
		ivs := [][][2]time.Time{{{at(start, 1000), at(start, 9000)}}}
		res := &Result{Steps: make([]StepResult, 1)}
		l.scoreMembership(res, sc, ivs, start, at(start, 14000), h)
		st := res.Steps[0]
		if st.Deaths != 2 || st.FalseDeaths != 0 || res.BaselineDeaths != 0 {
			t.Errorf("deaths %d, false %d, baseline %d; want 2, 0, 0", st.Deaths, st.FalseDeaths, res.BaselineDeaths)
		}
		if len(st.DeadEverywhereMs) != 1 || st.DeadEverywhereMs[0] != 5500 {
			t.Errorf("dead everywhere %v ms; want [5500]", st.DeadEverywhereMs)
		}
		if len(st.MemberHealMs) != 1 || st.MemberHealMs[0] != 1000 {
			t.Errorf("membership healed %v ms after the restart; want [1000]", st.MemberHealMs)
		}
	})
	t.Run("crash shorter than a death", func(t *testing.T) {
		l := reviewLab(3)
		h := newHistories()
		member(h, 0, 2, 2500, false) // one survivor only
		member(h, 0, 2, 4000, true)
		sc := Scenario{Steps: []Step{{Fault: Crash{Node: 2}, At: time.Second, For: 2 * time.Second}}}
		ivs := [][][2]time.Time{{{at(start, 1000), at(start, 3000)}}}
		res := &Result{Steps: make([]StepResult, 1)}
		l.scoreMembership(res, sc, ivs, start, at(start, 6000), h)
		if st := res.Steps[0]; len(st.DeadEverywhereMs) != 0 || st.Deaths != 1 {
			t.Errorf("dead everywhere %v, deaths %d; want none (n2 never removed it) and 1", st.DeadEverywhereMs, st.Deaths)
		}
	})
	t.Run("partition and false deaths", func(t *testing.T) {
		l := reviewLab(3)
		h := newHistories()
		member(h, 0, 2, 3000, false) // n1 removes partitioned n3: explained
		member(h, 2, 0, 3100, false) // n3 removes n1: explained
		member(h, 0, 1, 3200, false) // n1 removes n2, never cut: false
		member(h, 0, 1, 3900, true)
		member(h, 1, 0, 9000, false) // long after every step: baseline
		member(h, 1, 0, 9500, true)
		member(h, 0, 2, 5000, true)
		member(h, 2, 0, 5000, true)
		sc := Scenario{Steps: []Step{{Fault: Partition{Group: []int{2}}, At: time.Second, For: 3 * time.Second}}}
		ivs := [][][2]time.Time{{{at(start, 1000), at(start, 4000)}}}
		res := &Result{Steps: make([]StepResult, 1)}
		l.scoreMembership(res, sc, ivs, start, at(start, 12000), h)
		st := res.Steps[0]
		if st.Deaths != 2 || st.FalseDeaths != 1 || res.BaselineDeaths != 1 {
			t.Errorf("deaths %d, false %d, baseline %d; want 2, 1, 1", st.Deaths, st.FalseDeaths, res.BaselineDeaths)
		}
		// Whole at 5 s, but split again at 9 s: the last whole stretch
		// starts at 9.5 s.
		if len(st.MemberHealMs) != 1 || st.MemberHealMs[0] != 5500 {
			t.Errorf("membership healed %v ms after the fault; want [5500]", st.MemberHealMs)
		}
	})
	t.Run("agreed death on the minority's side", func(t *testing.T) {
		// n4, n5 cut from n1–n3: n1 removes n4 (a cut), and n5, on n4's
		// side, removes it too as the agreement reaches it after the heal:
		// a death, counted as agreed. In a one-way cut n5 ↛ n1 nobody but
		// n1 is cut from n5, so n2 removing n5 is false.
		l := reviewLab(5)
		h := newHistories()
		member(h, 0, 3, 5500, false)
		member(h, 4, 3, 6200, false)
		sc := Scenario{Steps: []Step{{Fault: Partition{Group: []int{3, 4}}, At: time.Second, For: 5 * time.Second}}}
		ivs := [][][2]time.Time{{{at(start, 1000), at(start, 6000)}}}
		res := &Result{Steps: make([]StepResult, 1)}
		l.scoreMembership(res, sc, ivs, start, at(start, 12000), h)
		if st := res.Steps[0]; st.Deaths != 2 || st.AgreedDeaths != 1 || st.FalseDeaths != 0 {
			t.Errorf("partition: deaths %d (agreed %d), false %d; want 2 (1), 0", st.Deaths, st.AgreedDeaths, st.FalseDeaths)
		}
		h = newHistories()
		member(h, 1, 4, 3000, false)
		sc = Scenario{Steps: []Step{{Fault: OneWay{From: 4, To: 0}, At: time.Second, For: 5 * time.Second}}}
		res = &Result{Steps: make([]StepResult, 1)}
		l.scoreMembership(res, sc, ivs, start, at(start, 12000), h)
		if st := res.Steps[0]; st.Deaths != 0 || st.FalseDeaths != 1 || len(st.FalseDeathPairs) != 1 || st.FalseDeathPairs[0] != "n2 removed n5, +2.0s" {
			t.Errorf("one-way: deaths %d, false %d %q; want 0, 1 [n2 removed n5, +2.0s]", st.Deaths, st.FalseDeaths, st.FalseDeathPairs)
		}
	})
}

// The state found at the first poll is recorded at the zero time (poll):
// a pair not yet a member then is no death in the scenario.
func TestScoreMembershipIgnoresTheFirstPoll(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	l := reviewLab(2)
	h := newHistories()
	h.add(0, 1, transition{At: time.Time{}, Trusted: false})
	h.add(0, 1, transition{At: at(start, 500), Trusted: true})
	res := &Result{}
	l.scoreMembership(res, Scenario{}, nil, start, at(start, 5000), h)
	if res.BaselineDeaths != 0 {
		t.Errorf("%d baseline deaths from the first poll's state", res.BaselineDeaths)
	}
}
