package proxy

import (
	"strings"
	"sync/atomic"

	"github.com/edgecache/edge/rules"
)

// Site is what the front resolved a request's Host to, handed to the
// proxy with the request (Inbound.Site), so that nothing downstream looks
// the Host up again: the cache key's site prefix, the site's name (the
// cluster prices misses per site) and the node's own record of the site
// (its origin pool), which the proxy does not look into.
type Site struct {
	Name      string // as configured: "default" for the one-site shortcut (origin.url), whose keys carry no name
	KeyPrefix string // "name " before a named site's keys, "" for the shortcut: the site as keys carry it
	Node      any    // the node's record of the site
	// Rules are the site's cache rules (nil: none); a reload makes a new
	// Site, so a request keeps the rules it started with.
	Rules *rules.Set

	// results counts the site's requests by result (resultNames' order),
	// for the status page's per-site table: a Site of its own, or shared
	// with the Site it replaced in a reload (CarryCounts).
	results *[len(resultNames)]atomic.Uint64
}

// count counts one request of the site with result.
func (s *Site) count(result string) {
	if s == nil || s.results == nil {
		return
	}
	for i, n := range resultNames {
		if n == result {
			s.results[i].Add(1)
			return
		}
	}
}

// CarryCounts makes s count into from's counters: from is the site s
// replaces in a reload, so that its totals run on, requests still
// finishing on from included (when s copied from's counts instead, those
// were lost). Call it before s serves.
func (s *Site) CarryCounts(from *Site) { s.results = from.results }

// Results returns the site's requests by result since it was configured.
func (s *Site) Results() map[string]uint64 {
	out := make(map[string]uint64, len(resultNames))
	if s.results == nil {
		return out
	}
	for i, n := range resultNames {
		out[n] = s.results[i].Load()
	}
	return out
}

// KeyName is the site's name as its cache keys carry it: "" for the
// one-site shortcut, whose Name is "default" but whose keys carry none
// (proxy.KeySite of any of its keys). Compare a peer's Edge-Site, and key
// per-site figures, by this, not by Name.
func (s *Site) KeyName() string { return strings.TrimSuffix(s.KeyPrefix, " ") }

// NewSite returns the Site of a configured site; shortcut marks the
// one-site shortcut, whose keys carry no name.
func NewSite(name string, shortcut bool, node any) *Site {
	s := &Site{Name: name, Node: node, results: new([len(resultNames)]atomic.Uint64)}
	if !shortcut && name != "" {
		s.KeyPrefix = name + " "
	}
	return s
}
