package cluster

import (
	"fmt"
	"strings"
)

// Selection is which peers the ingress probes before climbing.
type Selection int

// The selection policies.
const (
	// SelectionFNA is false-negative aware: a negatively indicated peer
	// may be worth asking, priced by the miss penalty.
	SelectionFNA Selection = iota
	// SelectionFNO asks only positively indicated peers.
	SelectionFNO
	// SelectionOff never probes: misses climb the page's path.
	SelectionOff
	// SelectionFNAHome is fna with the estimates kept per peer for the
	// pages it is home to (indicators.FNAHome): a peer that is a page's
	// home (in its region, with regional homes) is priced by how often its
	// negative indications for its own pages are wrong; another peer's
	// negative indication is taken at its word.
	SelectionFNAHome
	// SelectionFNALearned is fna-home whose ν is corrected by what its
	// negative probes found (indicators.FNALearned), with a selection never
	// priced worse than fno's (the default until 2026-12-04).
	SelectionFNALearned
	// SelectionFNARate is fna-home whose ν for a home is the hit rate its
	// negative probes realised (indicators.FNARate), with the same
	// selection as fna-learned and a little exploration: the default, by
	// measurement (docs/indicators.md, "fna-rate"; docs/cluster.md).
	SelectionFNARate
	// SelectionRaceAll asks every trusted peer but the climb's first hop on
	// every miss, each probe racing the climb, none waited for: a miss
	// costs the nearest copy the cluster holds, or the climb when none
	// does. No indicator is read. It prices nothing, sends the most probes
	// and bytes between regions, and is there as a measurement: the miss
	// latency no selection rule can beat in the same run, against which the
	// others' gains are read (docs/cluster.md, "The bound").
	SelectionRaceAll
)

var selectionNames = [...]string{"fna", "fno", "off", "fna-home", "fna-learned", "fna-rate", "race-all"}

// HomeAware reports whether the policy keeps separate estimates for the
// peers that are a page's home.
func (s Selection) HomeAware() bool {
	return s == SelectionFNAHome || s == SelectionFNALearned || s == SelectionFNARate
}

// neverWorse reports whether the policy selects with SelectNoWorse.
func (s Selection) neverWorse() bool { return s == SelectionFNALearned || s == SelectionFNARate }

func (s Selection) String() string {
	if s < 0 || int(s) >= len(selectionNames) {
		return fmt.Sprintf("Selection(%d)", int(s))
	}
	return selectionNames[s]
}

// ParseSelection parses fna, fno, off, fna-home, fna-learned, fna-rate or
// race-all.
func ParseSelection(s string) (Selection, error) {
	for i, n := range selectionNames {
		if s == n {
			return Selection(i), nil
		}
	}
	return 0, fmt.Errorf("cluster: selection %q, want one of %s", s, strings.Join(selectionNames[:], ", "))
}
