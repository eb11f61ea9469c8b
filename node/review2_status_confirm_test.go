package node

import (
	"strings"
	"testing"

	"github.com/edgecache/edge/cluster"
)

// TestReview2StatusRendersConfirm executes the status page's template
// with every confirmation-probe field set (no other test executes it, and
// html/template reports a missing field only at Execute).
func TestReview2StatusRendersConfirm(t *testing.T) {
	var b strings.Builder
	s := Status{Node: "n0", Peers: []cluster.PeerState{{ID: "n1", Member: true, Trusted: true}}, Confirm: &cluster.ConfirmState{On: true, Asked: 9, Answered: 5, Unanswered: 2, Overtaken: 2, Late: 1, Skipped: 3, AnswersGiven: 7, AnswersRefused: 4}}
	err := statusTmpl.Execute(&b, struct {
		Status
		Rows []struct {
			Name        string
			Value, Rate float64
		}
		Refresh int
		Uptime  string
	}{s, nil, 0, "1s"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"9 silent peers asked", "3 silences not probed", "4 asks refused", "1 answers came after the wait"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status page lacks %q", want)

		}
	}
}
