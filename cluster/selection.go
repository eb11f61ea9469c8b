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
)

var selectionNames = [...]string{"fna", "fno", "off"}

func (s Selection) String() string {
	if s < 0 || int(s) >= len(selectionNames) {
		return fmt.Sprintf("Selection(%d)", int(s))
	}
	return selectionNames[s]
}

// ParseSelection parses fna, fno or off.
func ParseSelection(s string) (Selection, error) {
	for i, n := range selectionNames {
		if s == n {
			return Selection(i), nil
		}
	}
	return 0, fmt.Errorf("cluster: selection %q, want one of %s", s, strings.Join(selectionNames[:], ", "))
}
