package routing

import (
	"sync/atomic"
)

// Router holds the current view's ring and swaps it atomically on a view
// change. Readers take no lock: they load the snapshot and use it.
type Router struct {
	vnodes int
	ring   atomic.Pointer[Ring]
}

// NewRouter returns a router with an empty view.
func NewRouter(vnodes int) *Router {
	r := &Router{vnodes: vnodes}
	empty, _ := NewRing(nil, max(vnodes, 1))
	r.ring.Store(empty)
	return r
}

// SetView builds the ring for members and makes it current.
func (r *Router) SetView(members []Member) error {
	ring, err := NewRingFrom(r.ring.Load(), members, r.vnodes)
	if err != nil {
		return err
	}
	r.ring.Store(ring)
	return nil
}

// Ring returns the current snapshot.
func (r *Router) Ring() *Ring { return r.ring.Load() }
