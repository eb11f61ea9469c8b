package cluster

// DEFECT, minor (failed before 2026-12-07). freshAlive bounded the age of a stamped
// announcement on one side only: age > metaFreshness is a replay, but a
// stamp ahead of this node's clock (a negative age) is fresh whatever its
// size. Heartbeats refuse a clock more than maxSkew off either way; here a
// node whose clock ran an hour ahead when it announced itself can have
// its join stream replayed by a stranger (memberlist has no replay
// protection; freshAlive is the only guard once memberlist forgot the
// node) for the next hour and more after it left, where a correct clock
// bounds that to metaFreshness.

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestS41AnAnnouncementStampedFarAheadIsNotFresh(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	now := time.Now()
	for _, ahead := range []time.Duration{maxSkew / 2, time.Hour} {
		n := &memberlist.Node{Name: "n9", Meta: nodeMeta{Incarnation: 1, Epoch: 1, Stamp: now.Add(ahead).UnixNano()}.encode()}
		err := c.freshAlive(n, now)
		if ahead < maxSkew && err != nil {
			t.Errorf("stamp %v ahead refused: %v", ahead, err)
		}
		if ahead > maxSkew && err == nil {
			t.Errorf("an announcement stamped %v ahead of this node's clock is taken as fresh (replayable for that long after its node left)", ahead)
		}
	}
}
