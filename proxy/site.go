package proxy

import "context"

// Site is what the front resolved a request's Host to, carried in the
// request's context from then on, so that nothing downstream looks the
// Host up again: the cache key's site prefix, the site's name (the
// cluster prices misses per site) and the node's own record of the site
// (its origin pool), which the proxy does not look into.
type Site struct {
	Name      string // "" for the one-site shortcut (every host)
	KeyPrefix string // "name " before a named site's keys, "" for the shortcut
	Node      any    // the node's record of the site
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

type siteKey struct{}

// WithSite returns ctx carrying s.
func WithSite(ctx context.Context, s *Site) context.Context {
	return context.WithValue(ctx, siteKey{}, s)
}

// SiteFrom returns the site the front resolved for the request of ctx, or
// nil (a request that did not pass a front: purge, tests).
func SiteFrom(ctx context.Context) *Site {
	s, _ := ctx.Value(siteKey{}).(*Site)
	return s
}
