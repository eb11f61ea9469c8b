package cluster

import "testing"

// TestS60AFillWhoseHeaderIsNotInWhenThePurgeReturnsIsStillJoined: as
// TestS59AHeldFillIsJoinedByARequestAfterThePurgeReturned, but the home's
// origin fill (begun before the page changed) has not answered its header
// when the purge returns. A's fill, begun during the round after A's own
// purge, is neither published nor held yet, so a request arriving after
// the purge returned joins it (the purge log does not name it); the early
// done in fillWhole comes after that join, and runs only for PurgeHeld
// (here A's answer is not kept for its q-rule, detail=q-rule, so it is not
// PurgeHeld and stays joinable after its header too).
func TestS60AFillWhoseHeaderIsNotInWhenThePurgeReturnsIsStillJoined(t *testing.T) {
	s59HeldJoin(t, &s59GatedOrigin{gate: make(chan struct{}), slowHeader: true}, "/doc/s60held",
		"it joined A's fill before the held copy's header came")
}
