package proxy

import (
	"net/http"
	"reflect"
	"testing"
)

func TestParseCacheControl(t *testing.T) {
	cases := []struct {
		in   []string
		want CacheControl
	}{
		{[]string{"max-age=60"}, CacheControl{MaxAge: 60}},
		{[]string{"MAX-AGE=60, Public"}, CacheControl{MaxAge: 60, Public: true}},
		{[]string{"max-age=60", "s-maxage=10"}, CacheControl{MaxAge: 60, SMaxAge: 10}},
		{[]string{`max-age="60"`}, CacheControl{MaxAge: 60}},
		{[]string{"max-age=abc"}, CacheControl{Invalid: true}},
		{[]string{"max-age=-1"}, CacheControl{Invalid: true}},
		{[]string{"max-age="}, CacheControl{Invalid: true}},
		{[]string{"max-age"}, CacheControl{Invalid: true}},
		{[]string{"max-age=1.5"}, CacheControl{Invalid: true}},
		{[]string{"max-age=99999999999999999999"}, CacheControl{MaxAge: maxDeltaSeconds}},
		{[]string{"max-age=60, max-age=60"}, CacheControl{MaxAge: 60}},
		{[]string{"max-age=60, max-age=10"}, CacheControl{MaxAge: 60, Invalid: true}},
		{[]string{"no-cache"}, CacheControl{NoCache: true}},
		{[]string{`no-cache="Set-Cookie"`}, CacheControl{NoCacheFields: true, Fields: []string{"Set-Cookie"}}},
		{[]string{`private="X-A, X-B", max-age=5`}, CacheControl{PrivateFields: true, MaxAge: 5, Fields: []string{"X-A", "X-B"}}},
		{[]string{`no-cache=x-account, private="set-cookie"`}, CacheControl{NoCacheFields: true, PrivateFields: true, Fields: []string{"X-Account", "Set-Cookie"}}},
		{[]string{`no-cache="a, b c"`}, CacheControl{NoCacheFields: true, Fields: []string{"A"}, FieldsUnread: true}},
		{[]string{`no-cache=" , "`}, CacheControl{NoCacheFields: true, FieldsUnread: true}},
		{[]string{`no-cache="X-Account`}, CacheControl{NoCacheFields: true, FieldsUnread: true, NoCache: true}}, // read whole as junk too
		{[]string{`max-age=60, ext="v" private`}, CacheControl{MaxAge: 60, Private: true}},
		{[]string{`max-age=60, ext="v, private`}, CacheControl{MaxAge: 60, Private: true}},
		{[]string{`no-cache=""`}, CacheControl{NoCacheFields: true, FieldsUnread: true}},
		{[]string{"no-store , must-revalidate"}, CacheControl{NoStore: true, MustReval: true}},
		{[]string{"max-stale"}, CacheControl{MaxStale: maxDeltaSeconds}},
		{[]string{"max-stale=5, min-fresh=3, only-if-cached"}, CacheControl{MaxStale: 5, MinFresh: 3, OnlyIfCached: true}},
		{[]string{"stale-while-revalidate=30, stale-if-error=60"}, CacheControl{StaleWhile: 30, StaleIfError: 60}},
		{[]string{`foo="a,b", max-age=7`}, CacheControl{MaxAge: 7}},
		{[]string{`foo="unterminated, max-age=7`}, CacheControl{}},
		{[]string{",,, ,max-age=3,,"}, CacheControl{MaxAge: 3}},
		{[]string{"proxy-revalidate, immutable, no-transform"}, CacheControl{ProxyReval: true, Immutable: true, NoTransform: true}},
		{[]string{""}, CacheControl{}},
		// Directives joined by something other than a comma: the words
		// private, no-store and no-cache in them count, nothing else does.
		{[]string{"max-age=60, private; no-store"}, CacheControl{MaxAge: 60, Private: true, NoStore: true}},
		{[]string{"no-store;"}, CacheControl{NoStore: true}},
		{[]string{"private no-store"}, CacheControl{Private: true, NoStore: true}},
		{[]string{`"private"`}, CacheControl{Private: true}},
		{[]string{"max-age=60; private"}, CacheControl{Private: true, Invalid: true}},
		{[]string{"public;"}, CacheControl{}},
		// A field read as stale gives no stale window.
		{[]string{"max-age=60, max-age=10, stale-while-revalidate=30, stale-if-error=60"}, CacheControl{MaxAge: 60, Invalid: true}},
		{[]string{"max-age=60, x-private-ish/1"}, CacheControl{MaxAge: 60}},
	}
	for _, tc := range cases {
		h := http.Header{"Cache-Control": tc.in}
		got := ParseCacheControl(h, "Cache-Control")
		want := tc.want
		for _, p := range []*int{&want.MaxAge, &want.SMaxAge, &want.MaxStale, &want.MinFresh, &want.StaleWhile, &want.StaleIfError} {
			if *p == 0 {
				*p = unset
			}
		}
		want.Present = got.Present // checked separately
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got  %+v\n want %+v", tc.in, got, want)
		}
	}
}

// FuzzCacheControl checks that no input makes the parser panic or produce
// a negative delta.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"max-age=60", `no-cache="a,b", private`, `x="\"", max-age=1`, "max-stale", "s-maxage=99999999999999999999", `"`, "=,=", "max-age=\"1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cc := ParseCacheControl(http.Header{"Cache-Control": {s}}, "Cache-Control")
		for _, v := range []int{cc.MaxAge, cc.SMaxAge, cc.MaxStale, cc.MinFresh, cc.StaleWhile, cc.StaleIfError} {
			if v < unset || v > maxDeltaSeconds {
				t.Fatalf("%q: delta out of range: %+v", s, cc)
			}
		}
	})
}
