package proxy

import (
	"fmt"
	"strings"
	"testing"
)

// TestS71HitForPassMemoryBytesAreBounded: the hit-for-pass memory
// (h.passes) is bounded to 10,000 keys, but a key is the URL key plus
// fieldKey, which spells out every keyed request field's name in clear
// (only the values are hashed). A client requesting a page the origin
// answers no-store, each time with one unknown field whose name fills
// the request header limit (limits.max_header_bytes, 32 KiB by default),
// makes every remembered key about that long: 10,000 keys of 32 KiB are
// about 320 MiB per memory (and as much again in h.large), charged to no
// budget. A key's size should not depend on the client's field names
// beyond a small constant (hash the names too, or bound the memory in
// bytes).
func TestS71HitForPassMemoryBytesAreBounded(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "no-store"}, body: "personal"})
	const requests, nameLen = 100, 16 << 10
	for i := range requests {
		name := fmt.Sprintf("X-%04d-%s", i, strings.Repeat("a", nameLen))
		if w := p.do("GET", "/account", map[string]string{name: "1"}); w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	keys := p.h.passes.Keys()
	total := 0
	for _, k := range keys {
		total += len(k)
	}
	t.Logf("hit-for-pass memory: %d keys, %d bytes of keys (%d per key)", len(keys), total, total/max(len(keys), 1))
	if len(keys) == 0 {
		t.Fatal("nothing remembered: the scenario did not happen")
	}
	if per := total / len(keys); per > 1024 {
		t.Errorf("a remembered pass key holds %d bytes of client field names: 10,000 such keys hold %d MiB, bounded by nothing but the key count", per, per*10000>>20)
	}
}
