package reject

import (
	"fmt"
	"testing"
)

func TestReasonOfWrapped(t *testing.T) {
	err := fmt.Errorf("decoding: %w", New("heartbeat", "mac", "from %s", "10.0.0.1"))
	if r, ok := ReasonOf(err); !ok || r != "mac" {
		t.Fatalf("ReasonOf = %q, %v", r, ok)
	}
	if got := err.Error(); got != "decoding: heartbeat rejected (mac): from 10.0.0.1" {
		t.Fatalf("message %q", got)
	}
	if _, ok := ReasonOf(fmt.Errorf("plain")); ok {
		t.Fatal("a plain error has a reason")
	}
}
