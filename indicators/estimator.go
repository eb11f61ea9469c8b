package indicators

import (
	"fmt"
	"strings"
)

// FNREstimator is how a cache estimates the false-negative rate of the
// indicator it last advertised (the rate its peers' stale replicas miss
// a held key), which peers use to price negative probes (ν).
type FNREstimator int

// The estimators; the zero value is the paper's.
const (
	// FNRBits is the paper's estimate, from the bit counts of the
	// up-to-date and advertised filters.
	FNRBits FNREstimator = iota
	// FNRCount estimates from the keys inserted since the advertisement:
	// the only ones a replica can miss.
	FNRCount
	// FNRExact tests each key entering or leaving the cache against the
	// advertised snapshot, so the count of held keys it misses is exact
	// (it costs a key set).
	FNRExact
)

var fnrEstimatorNames = [...]string{"bits", "count", "exact"}

func (e FNREstimator) String() string {
	if e < 0 || int(e) >= len(fnrEstimatorNames) {
		return fmt.Sprintf("FNREstimator(%d)", int(e))
	}
	return fnrEstimatorNames[e]
}

// ParseFNREstimator parses an estimator name (bits, count or exact).
func ParseFNREstimator(s string) (FNREstimator, error) {
	for i, n := range fnrEstimatorNames {
		if s == n {
			return FNREstimator(i), nil
		}
	}
	return 0, fmt.Errorf("indicators: fnr estimator %q, want one of %s", s, strings.Join(fnrEstimatorNames[:], ", "))
}

// Set implements flag.Value (and pflag's), for command-line flags.
func (e *FNREstimator) Set(s string) error {
	v, err := ParseFNREstimator(s)
	if err == nil {
		*e = v
	}
	return err
}

// Type implements pflag.Value.
func (e *FNREstimator) Type() string { return "estimator" }
