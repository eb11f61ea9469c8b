package cachestatus

import "testing"

func TestLast(t *testing.T) {
	for in, want := range map[string]string{
		"edge-1; hit": "edge-1; hit",
		"edge-2; hit, edge-1; fwd=uri-miss; stored": "edge-1; fwd=uri-miss; stored",
		"a; hit, b; fwd=stale, c; fwd=miss":         "c; fwd=miss",
		"":                                          "",
	} {
		if got := Last(in); got != want {
			t.Errorf("Last(%q) = %q, want %q", in, got, want)
		}
	}
}
