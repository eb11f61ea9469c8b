package proxy

import (
	"net/http"
	"testing"
)

func TestAnsweredFromStore(t *testing.T) {
	for _, c := range []struct {
		fields []string
		want   bool
	}{
		{[]string{"X; hit"}, true},
		{[]string{"X; hit; detail=stale-while-revalidate"}, true},
		{[]string{"H; fwd=uri-miss; fwd-status=200; stored, X; hit"}, true},
		{[]string{"H; hit", "X; fwd=request; detail=client_limit"}, false}, // the peer's own refusal, after an upstream's hit
		{[]string{"X; fwd=uri-miss; fwd-status=200"}, false},
		{[]string{"X; fwd=request; detail=client_limit"}, false},
		{[]string{"X; hit, Y; fwd=miss"}, false},
		{[]string{"X;hit"}, true},
		{[]string{"X"}, false},
		{[]string{""}, false},
		{nil, false},
		{[]string{"X; hitx"}, false},
		{[]string{"X; fwd=miss; detail=hit"}, false},
	} {
		h := http.Header{}
		for _, f := range c.fields {
			h.Add("Cache-Status", f)
		}
		if got := AnsweredFromStore(h); got != c.want {
			t.Errorf("%q: %v, want %v", c.fields, got, c.want)
		}
	}
}

// FuzzAnsweredFromStore: whatever came before, the last member decides:
// this cache's own hit after it reads as from the store, a forward as not.
func FuzzAnsweredFromStore(f *testing.F) {
	f.Add("H; hit")
	f.Add("X; fwd=uri-miss, Y;")
	f.Add(";;,,")
	f.Fuzz(func(t *testing.T, before string) {
		h := http.Header{"Cache-Status": {before}}
		_ = AnsweredFromStore(h)
		if !AnsweredFromStore(http.Header{"Cache-Status": {before + ", edge; hit"}}) {
			t.Errorf("%q then our hit: not from the store", before)
		}
		if AnsweredFromStore(http.Header{"Cache-Status": {before, "edge; fwd=miss"}}) {
			t.Errorf("%q then our forward: from the store", before)
		}
	})
}
