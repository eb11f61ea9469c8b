package cluster

import (
	"sort"
	"testing"

	"github.com/hashicorp/memberlist"
)

// namedBroadcast is a memberlist broadcast about one node (as its alive,
// suspect and dead messages are): a newer one replaces an older one.
type namedBroadcast struct{ name, msg string }

func (b namedBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b namedBroadcast) Message() []byte                       { return []byte(b.msg) }
func (b namedBroadcast) Finished()                             {}
func (b namedBroadcast) Name() string                          { return b.name }

// TestMemberlistQueueKeepsEveryAnnouncement: memberlist v0.7.0's queue
// reset its id generator when an announcement replaced the only one
// queued, and a later message of the same length then took the id of the
// one still queued; the queue kept one of the two, and a node's own
// refutation was never sent (third_party/README.md). Every announcement
// queued here, all of one length, must come out.
func TestMemberlistQueueKeepsEveryAnnouncement(t *testing.T) {
	q := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 5 }, RetransmitMult: 4}
	q.QueueBroadcast(namedBroadcast{"self", "self:1"}) // publishMeta's announcement
	q.QueueBroadcast(namedBroadcast{"self", "self:2"}) // the refutation replaces it
	for _, peer := range []string{"peer", "pee2", "pee3"} {
		q.QueueBroadcast(namedBroadcast{peer, peer + ":1"}) // peers' announcements, passed on
	}
	if n := q.NumQueued(); n != 4 {
		t.Errorf("%d announcements queued, want 4", n)
	}
	var got []string
	for _, m := range q.GetBroadcasts(0, 1400) {
		got = append(got, string(m))
	}
	sort.Strings(got)
	want := []string{"pee2:1", "pee3:1", "peer:1", "self:2"}
	if len(got) != len(want) {
		t.Fatalf("sent %q, want %q: an announcement was lost", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
}
