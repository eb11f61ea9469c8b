package proxy

import (
	"errors"
	"sync"
)

// flights runs one fetch per key among the requests that ask for it at
// once, as singleflight does, under the wait order (waitorder.go): a
// range slice's fetch, and the probe of an object's first slice, may climb
// to a peer whose own flight for the same slice climbs back here, and
// with singleflight the two waited on each other until the peer header
// timeout (a hostile review's TestSliceFlightsDoNotWaitOnEachOther: 3
// rounds of 12 at 2.2 s). A peer's climb shares a flight only if the
// flight waits on no peer or is older than the climb's fill; otherwise it
// fetches apart.
type flights struct {
	mu     sync.Mutex
	m      map[string]*flight
	purges *purgeLog // the handler's; nil: every purge names every key
}

type flight struct {
	done    chan struct{}
	at      fillWait
	purges  uint64 // the handler's purge count when it started
	waiters int    // callers sharing it (under flights.mu)
	val     any
	err     error
}

// do runs fn for key once among the callers that may wait on each other:
// a caller placed at w shares the flight under way if joinableBy allows,
// else runs fn by itself (apart reports that). A flight led here stands at
// w. shared reports that the result came from another caller's fn.
// purges is the handler's purge count now: a flight started before a
// later purge that names key is not shared (it may fetch what was
// purged), as with fills, and the new flight takes its place.
//
// A leader refused an upstream slot (errOverload: its client's bound, or
// none free at that instant) was refused, not its waiters: each waiter
// asks once more, and leads or joins whoever leads now, as a fill's waiter
// does (fetchAndServe). The flight is gone before its waiters wake. Before,
// a reader that joined such a slice fetch got the leader's 503, and a whole
// GET reading its own stream was cut (reviews'
// TestAJoinerOfARefusedSliceFetchFetchesItself,
// TestS40StreamReaderThatJoinsARefusedSliceFlightIsNotCut).
func (g *flights) do(key string, w fillWait, purges uint64, fn func() (any, error)) (v any, shared, apart bool, err error) {
	v, shared, apart, err = g.once(key, w, purges, fn)
	if shared && errors.Is(err, errOverload) {
		v, shared, apart, err = g.once(key, w, purges, fn)
	}
	return v, shared, apart, err
}

// once is do without the second ask.
func (g *flights) once(key string, w fillWait, purges uint64, fn func() (any, error)) (v any, shared, apart bool, err error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = make(map[string]*flight)
	}
	// A flight newer than the caller's count (a purge came between the
	// caller reading it and here) is after the purge too: shared.
	if f, ok := g.m[key]; ok && !g.purges.touched(f.purges, purges, key, nil) {
		if f.joinableBy(w) {
			f.waiters++
			g.mu.Unlock()
			<-f.done
			return f.val, true, false, f.err
		}
		g.mu.Unlock()
		v, err = fn()
		return v, false, true, err
	}
	f := &flight{done: make(chan struct{}), at: w, purges: purges}
	g.m[key] = f // replacing one from before a purge, which ends unshared
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if g.m[key] == f {
			delete(g.m, key)
		}
		g.mu.Unlock()
		close(f.done)
	}()
	f.err = errFlightAbandoned // what the waiters see if fn panics
	f.val, f.err = fn()
	return f.val, false, false, f.err
}

var errFlightAbandoned = errors.New("proxy: a shared fetch ended without a result")

// joinableBy is fill.joinableBy for a flight, which has no header apart
// from its result.
func (f *flight) joinableBy(w fillWait) bool {
	return !w.climb || f.at.direct || f.at.order.Before(w.order)
}
