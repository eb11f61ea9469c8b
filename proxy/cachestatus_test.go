package proxy

import (
	"net/http"
	"net/http/httptest"
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
// this cache's own hit after it reads as from the store, a forward as not,
// and it is stale only with its own stale detail.
func FuzzAnsweredFromStore(f *testing.F) {
	f.Add("H; hit")
	f.Add("X; fwd=uri-miss, Y;")
	f.Add(";;,,")
	f.Fuzz(func(t *testing.T, before string) {
		h := http.Header{"Cache-Status": {before}}
		if AnsweredStaleFromStore(h) && !AnsweredFromStore(h) {
			t.Errorf("%q: stale from the store but not from the store", before)
		}
		if AnsweredStaleFromStore(http.Header{"Cache-Status": {before + ", edge; hit"}}) {
			t.Errorf("%q then our fresh hit: stale", before)
		}
		if !AnsweredStaleFromStore(http.Header{"Cache-Status": {before, "edge; hit; detail=stale-while-revalidate"}}) {
			t.Errorf("%q then our stale hit: not stale", before)
		}
		if !AnsweredFromStore(http.Header{"Cache-Status": {before + ", edge; hit"}}) {
			t.Errorf("%q then our hit: not from the store", before)
		}
		if AnsweredFromStore(http.Header{"Cache-Status": {before, "edge; fwd=miss"}}) {
			t.Errorf("%q then our forward: from the store", before)
		}
	})
}

// TestPurgeScopeNamesWhatPurgeRemoves: the keys PurgeScope names are the
// ones Purge removes, slices with their object; a tag names the answers
// that carry it.
func TestPurgeScopeNamesWhatPurgeRemoves(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {}, nil)
	key := func(path string) string {
		return h.requestKey(httptest.NewRequest("GET", "http://example.com"+path, nil))
	}
	for _, c := range []struct {
		p      PurgeRequest
		names  []string
		leaves []string
	}{
		{PurgeRequest{URL: "http://example.com/a?x=1"}, []string{key("/a?x=1"), sliceKey(key("/a?x=1"), 2)}, []string{key("/a?x=12"), key("/a"), key("/b")}},
		{PurgeRequest{Prefix: "/img/"}, []string{key("/img/1.png"), sliceKey(key("/img/big"), 0)}, []string{key("/imgs/1.png"), key("/")}},
		{PurgeRequest{Prefix: "http://example.com/img/"}, []string{key("/img/1.png")}, []string{key("/im"), key("/css/a")}},
	} {
		scope := h.PurgeScope(c.p)
		if scope == nil {
			t.Fatalf("%+v: no scope", c.p)
		}
		for _, k := range c.names {
			if !scope(k, nil) {
				t.Errorf("%+v does not name %q", c.p, k)
			}
		}
		for _, k := range c.leaves {
			if scope(k, nil) {
				t.Errorf("%+v names %q", c.p, k)
			}
		}
	}
	tag := h.PurgeScope(PurgeRequest{Tag: "t"})
	for _, c := range []struct {
		hdr  http.Header
		want bool
	}{
		{http.Header{"Surrogate-Key": {"a t b"}}, true},
		{http.Header{"Cache-Tag": {"a,t"}}, true},
		{http.Header{"Surrogate-Key": {"tt a"}}, false},
		{http.Header{}, false},
	} {
		if got := tag(key("/a"), c.hdr); got != c.want {
			t.Errorf("tag t, %v: %v, want %v", c.hdr, got, c.want)
		}
	}
	if h.PurgeScope(PurgeRequest{}) != nil {
		t.Error("an invalid purge names keys")
	}
}

// TestAnsweredStaleFromStore: only the answering cache's own hit with a
// stale detail reads as stale; a fresh hit, an upstream's stale hit before
// this cache's fresh one, a forward and malformed members do not.
func TestAnsweredStaleFromStore(t *testing.T) {
	for _, c := range []struct {
		fields []string
		want   bool
	}{
		{[]string{"X; hit; detail=stale-while-revalidate"}, true},
		{[]string{"X; hit; detail=stale"}, true},
		{[]string{"X;hit;detail=stale"}, true},
		{[]string{"X; hit"}, false},
		{[]string{"H; hit; detail=stale, X; hit"}, false},
		{[]string{"X; fwd=stale; fwd-status=500; detail=origin-error"}, false},
		{[]string{"X; hit; detail=staleness"}, false},
		{[]string{"X; hit; detail="}, false},
		{[]string{"X; detail=stale"}, false},
		{nil, false},
	} {
		h := http.Header{}
		for _, f := range c.fields {
			h.Add("Cache-Status", f)
		}
		if got := AnsweredStaleFromStore(h); got != c.want {
			t.Errorf("%q: %v, want %v", c.fields, got, c.want)
		}
	}
}
