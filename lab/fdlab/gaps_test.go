package fdlab

import (
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/fdetect"
)

// TestReplayRefusesImplausibleSequenceJumps: a sequence number that skips
// far more heartbeats than the time between arrivals holds (a jump to
// 2^62, a wrap to 2^64−1) is refused, not counted as billions lost.
func TestReplayRefusesImplausibleSequenceJumps(t *testing.T) {
	period := int64(100 * time.Millisecond)
	build := func() (fdetect.Detector, error) { return fdetect.New("chen", period, nil) }
	for _, jump := range []uint64{1 << 62, 1<<64 - 1} {
		var as []Arrival
		for i := range 2000 {
			seq := uint64(i)
			if i == 1500 {
				seq = jump
			}
			as = append(as, Arrival{Site: "a", Seq: seq, Recv: int64(i) * period})
		}
		if _, err := Replay(as, period, build); err == nil || !strings.Contains(err.Error(), "jumps") {
			t.Errorf("a jump to %d: %v", jump, err)
		}
	}
	// A real outage: 300 heartbeats lost over 30 s is plausible.
	var as []Arrival
	for i := range 2000 {
		seq := uint64(i)
		if i >= 1500 {
			seq += 300
		}
		recv := int64(seq) * period
		as = append(as, Arrival{Site: "a", Seq: seq, Recv: recv})
	}
	r, err := Replay(as, period, build)
	if err != nil || r.Overall.Lost != 300 {
		t.Errorf("an outage of 300 heartbeats: %v, lost %d", err, r.Overall.Lost)
	}
}
