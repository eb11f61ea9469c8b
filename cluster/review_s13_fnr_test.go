package cluster

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/routing"
)

// s13Store is a Store whose insertions the test makes; Keys takes delay
// (a large store's read) and counts its calls in reads.
type s13Store struct {
	mu    sync.Mutex
	keys  []string
	on    func(string)
	gone  func(string)
	delay time.Duration
	reads int
}

func (s *s13Store) OnInsert(f func(string)) { s.mu.Lock(); s.on = f; s.mu.Unlock() }
func (s *s13Store) OnRemove(f func(string)) { s.mu.Lock(); s.gone = f; s.mu.Unlock() }

// removeAll empties the store, telling the removal hook of each key under
// the store's lock, as proxy.Store does.
func (s *s13Store) removeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if s.gone != nil {
			s.gone(k)
		}
	}
	s.keys = nil
}

func (s *s13Store) Keys(match func(string) bool) []string {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	var out []string
	for _, k := range s.keys {
		if match(k) {
			out = append(out, k)
		}
	}
	return out
}

func (s *s13Store) add(k string) {
	s.mu.Lock()
	s.keys = append(s.keys, k)
	on := s.on
	s.mu.Unlock()
	if on != nil {
		on(k)
	}
}

// TestS13FNRAdvertiseMaxWithoutInsertions — a defect this review found,
// now mended (the monitor advertises a changed store once T has passed,
// cluster/indicator.go advertiseIfDue). What it was:
// indicators.advertise_max (T) is
// documented as "advertise at least this often when the store changed"
// (config/config.go, docs/cluster.md "It advertises every update_interval
// insertions or advertise_max"). The cluster sets c.dirty on every
// insertion but nothing ever reads it: T is only checked inside the next
// insertion (cluster/indicator.go inserted). A node whose insertions stop
// (a load run that ended, a quiet site) never advertises the keys it took
// since its last advertisement: its peers keep the stale replica for ever
// and read its last fnr estimate (0.89-0.9974 in the demo after `edge
// load`) for ever, with ν derived from it. Live: after the demo's load the
// three nodes stayed at epoch 2 for minutes; one request that stored a
// page on edge-1 moved it to epoch 3 and its fnr to 0 at once.
func TestS13FNRAdvertiseMaxWithoutInsertions(t *testing.T) {
	conn := listenUDP(t, "127.0.0.1:0")
	self := conn.LocalAddr().String()
	network := networkOf(t)
	cfg := Config{
		NodeID: "s13", Listen: self, Peers: map[string]string{"s13": self}, Secret: []byte("s13-secret"), Period: 50 * time.Millisecond,
		Detector: "ml", Selection: SelectionFNARate, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 200 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(100000),
		ProbeInterval: testProbeInterval, SuspicionMult: DefaultSuspicionMult,
		GossipDial:   func(_ context.Context, to string) (net.Conn, error) { return network.DialStream(self, to) },
		AdvertiseMax: 100 * time.Millisecond,
	}
	store := &s13Store{}
	c, err := New(cfg, nopFetcher{}, store, NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	network.HandleStreams(self, func(s net.Conn) {
		if other, ok := c.transport.sortStream(s); ok {
			_ = other.Close()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, conn) }()
	defer func() { cancel(); <-done }()

	const held = 61
	for i := range held { // the first advertises at once (lastAdv is zero), the rest come within T
		store.add("http://h/p/" + strconv.Itoa(i))
	}
	// No more insertions. Within a few T the changed store must be
	// advertised: the filter peers pull (c.advFull, announced as
	// c.advEpoch in heartbeats) then holds every key the store holds.
	missing := func() (int, uint64) {
		c.mu.Lock()
		full, epoch := c.advFull, c.advEpoch
		c.mu.Unlock()
		var r indicators.Replica
		if full == nil || r.Apply(full) != nil {
			return held, epoch
		}
		n := 0
		for i := range held {
			if !r.Test([]byte("http://h/p/" + strconv.Itoa(i))) {
				n++
			}
		}
		return n, epoch
	}
	wait := 10 * cfg.AdvertiseMax
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		time.Sleep(25 * time.Millisecond)
		if n, _ := missing(); n == 0 {
			return
		}
	}
	n, epoch := missing()
	_, fnr := c.filter.Estimates()
	t.Fatalf("store unchanged for %v (T = %v) and its last insertions never advertised: heartbeats announce epoch %d, whose filter misses %d of the %d keys held; the node reports fnr %.4f",
		wait, cfg.AdvertiseMax, epoch, n, held, fnr)
}
