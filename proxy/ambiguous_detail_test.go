package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestAnAmbiguousPathSaysWhyItPassed: a path origins read in more than
// one way (//, dot segments, ;) passes under a site with rules, and its
// Cache-Status says detail=ambiguous-path; a bypass the operator wrote
// still says detail=rule. An operator's walk-through read detail=rule for
// a path no rule of the config named.
func TestAnAmbiguousPathSaysWhyItPassed(t *testing.T) {
	src := `
- {name: admin, match: {path: /admin/}, bypass: true}
- {name: pages, default_ttl: 5m}
`
	p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
		_, _ = writeString(w, "page")
	}, nil)
	for _, c := range []struct{ target, detail string }{
		{"//static/a.css", "detail=ambiguous-path"},
		{"/static/../p/11", "detail=ambiguous-path"},
		{"/admin/users", "detail=rule"},
	} {
		w := p.get(c.target)
		if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "fwd=bypass") || !strings.Contains(cs, c.detail) {
			t.Errorf("%s: Cache-Status %q, want a bypass with %s", c.target, cs, c.detail)
		}
	}
}
