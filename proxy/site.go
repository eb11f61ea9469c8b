package proxy

import "github.com/edgecache/edge/rules"

// Site is what the front resolved a request's Host to, handed to the
// proxy with the request (Inbound.Site), so that nothing downstream looks
// the Host up again: the cache key's site prefix, the site's name (the
// cluster prices misses per site) and the node's own record of the site
// (its origin pool), which the proxy does not look into.
type Site struct {
	Name      string // "" for the one-site shortcut (every host)
	KeyPrefix string // "name " before a named site's keys, "" for the shortcut
	Node      any    // the node's record of the site
	// Rules are the site's cache rules (nil: none); a reload makes a new
	// Site, so a request keeps the rules it started with.
	Rules *rules.Set
}

// NewSite returns the Site of a configured site; shortcut marks the
// one-site shortcut, whose keys carry no name.
func NewSite(name string, shortcut bool, node any) *Site {
	s := &Site{Name: name, Node: node}
	if !shortcut && name != "" {
		s.KeyPrefix = name + " "
	}
	return s
}
