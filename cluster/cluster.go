// Package cluster joins edge nodes into one cache. It owns membership (static
// peers or a DNS name), authenticated UDP heartbeats with a failure detector
// per peer, the view (self plus trusted peers) that drives the routing ring,
// the exchange of Bloom indicators, and the request plan: route a miss along
// its page's path, probe the peers worth asking with only-if-cached, climb
// the path with the Karger step at every cache, and fail over past dead hops
// to the origin. proxy sees it only as a proxy.Fetcher.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// Config configures a node's membership in the cluster.
type Config struct {
	NodeID       string
	Listen       string            // host:port: peer HTTP (TCP) and heartbeats (UDP)
	Peers        map[string]string // static peers: id → host:port
	DNS          string            // or a name re-resolved periodically; peers are named by address
	DNSPort      string            // port of the peers found by DNS
	DNSInterval  time.Duration
	Secret       []byte
	Period       time.Duration // heartbeat period Δ
	Detector     string
	DetectorArgs fdetect.Params
	// Shadows are detectors run beside Detector on the same heartbeats,
	// for comparison only (the fault lab): recorded, never acted on.
	Shadows   []ShadowDetector
	Selection Selection
	// ProbeFirstHop keeps the climb's first hop among the probe
	// candidates, as DESIGN.md §3 first had it. By default it is left out:
	// the climb asks it at once anyway, so a probe of it can only add a
	// round trip (measured in docs/cluster.md, "Two regions").
	ProbeFirstHop bool
	Mode          routing.Mode
	Placement     routing.Placement
	// RegionalHomes gives a page a home in each region (Region): the
	// first member of its rendezvous ranking in this node's region.
	RegionalHomes bool
	Arity         int // d
	Q             int // requests a cache forwards before it stores
	HotThreshold  int // hybrid: requests before a page spreads over its tree
	PeerTimeout   time.Duration
	Indicator     indicators.FilterConfig
	AdvertiseMax  time.Duration // T: advertise at least this often when keys changed
	KeyScheme     bool          // the cache key keeps the client's scheme (proxy.KeyScheme)
	Monitoring    Monitoring    // all-to-all or bounded-subset heartbeats (gossip.go)
	MonitorPeers  int           // k: neighbours per node in subset mode (0: DefaultMonitorPeers)
	// AutoSubsetAbove is the member count above which MonitorAuto switches
	// to subset (0: the package's AutoSubsetAbove). Tests lower it so that
	// the switch happens with a handful of nodes, not 25 in one process.
	AutoSubsetAbove int
	Region          string // this node's region label, sent in heartbeats
	// RegionCosts is the access cost between two regions (keyed by
	// RegionPair), used as c_j in place of a peer's measured RTT.
	RegionCosts map[[2]string]time.Duration
	// TLS, when set, is the client side of mutual TLS to peers (the
	// listener side is the node's); peer URLs then use https.
	TLS *tls.Config
	// SiteOf names the configured site that serves a host, for the miss
	// penalty M per site, when a fetch's front resolved none (the route
	// explorer); "" is the one-site shortcut. Nil: every host shares one M.
	SiteOf func(host string) string
}

// The cluster's own fixed sizes, each with its reason.
const (
	// counterCapacity is how many pages the q-rule and hotness counters
	// remember (an LRU): the working set of one node's ingress traffic;
	// a page forgotten is counted from zero again, which only delays its
	// copy by q requests.
	counterCapacity = 100000
	// peerIdleConns is the idle connections kept per peer: about the
	// concurrent misses one node sends another at a few thousand
	// requests per second, so a burst does not pay new handshakes.
	peerIdleConns = 64
	// peerIdleTimeout closes an idle peer connection after this, as
	// net/http's DefaultTransport does.
	peerIdleTimeout = 90 * time.Second
)

// DefaultConfig returns the defaults config.yaml documents, with their
// reasons there (config/config.go reads them from here). NodeID, Listen,
// Peers or DNS, and Secret have none: a cluster needs them named.
func DefaultConfig() Config {
	return Config{
		DNSInterval:  10 * time.Second,       // new pods join within this
		Period:       100 * time.Millisecond, // detection takes a few periods; N² × 10 packets/s at 100 ms
		Detector:     "ml",                   // the learned detector (docs/failure-detection.md)
		Selection:    SelectionFNALearned,    // asks negatively indicated homes when the miss penalty pays, never priced worse than fno (docs/indicators.md)
		Mode:         routing.ModeHybrid,     // a home while cold, a random tree once hot
		Placement:    routing.PlacementDistinct,
		Arity:        4,                      // the origin sees at most d·q fetches per page
		Q:            2,                      // the paper: a larger q only lowers the supported rate
		HotThreshold: 64,                     // measured best in docs/routing.md
		PeerTimeout:  500 * time.Millisecond, // a slow peer costs at most this before failover
		Indicator:    indicators.DefaultFilterConfig(100000),
		AdvertiseMax: 10 * time.Second, // T: a changed store is advertised at least this often
		Monitoring:   MonitorAuto,
		MonitorPeers: DefaultMonitorPeers,
	}
}

// Validate reports the first setting New cannot run with, naming it.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("cluster: NodeID is required")
	case len(c.Secret) == 0:
		return errors.New("cluster: Secret is required")
	case c.Period <= 0:
		return fmt.Errorf("cluster: Period %v: want a positive heartbeat period", c.Period)
	case c.PeerTimeout <= 0:
		return fmt.Errorf("cluster: PeerTimeout %v: want a positive timeout", c.PeerTimeout)
	case c.Arity < 2:
		return fmt.Errorf("cluster: Arity %d: want d ≥ 2", c.Arity)
	case c.Q < 1:
		return fmt.Errorf("cluster: Q %d: want q ≥ 1", c.Q)
	}
	if _, err := fdetect.New(c.Detector, int64(c.Period), c.DetectorArgs); err != nil {
		return fmt.Errorf("cluster: Detector: %w", err)
	}
	for _, sh := range c.Shadows {
		if _, err := fdetect.New(sh.Kind, int64(c.Period), sh.Args); err != nil {
			return fmt.Errorf("cluster: Shadows %q: %w", sh.Name, err)
		}
	}
	return nil
}

// Store is what the cluster needs of the node's cache (a *proxy.Store): to
// hear of each insertion (the indicator counts it) and to list the keys
// held (the indicator is rebuilt from them, and a warm restart advertises
// them at once).
type Store interface {
	OnInsert(f func(key string))
	Keys(match func(key string) bool) []string
}

// Peer is the state of one other node.
type Peer struct {
	ID      string
	Addr    string
	udp     *net.UDPAddr
	det     fdetect.Detector
	shadows []*shadow // Config.Shadows on this peer's heartbeats
	// rerouted counts requests whose home was this peer, sent elsewhere
	// during the current suspicion; reroutedAll in all, reroutedWrongly
	// those of suspicions that turned out wrong (reroute.go).
	rerouted, reroutedAll, reroutedWrongly uint64
	incarnation                            uint64
	trusted                                bool
	seen                                   bool
	lastRecv                               time.Time
	lastSend                               int64 // the peer's SendNs of its last heartbeat (for our echo)
	lastSeqIn                              uint64
	recvAt                                 int64 // when we received it
	rtt                                    float64
	epochSeen                              uint64
	replica                                *indicators.Replica
	suspicions                             uint64
	suspectedAt                            time.Time
	history                                []Transition
	waiting                                map[uint64]context.CancelFunc // requests to this peer awaiting headers
	pulledAt                               time.Time                     // when the replica last changed
	neighbour                              bool                          // this node heartbeats it and runs the detector on the link
	heard                                  bool                          // subset: heard directly since this node last suspected it
	live                                   liveness                      // its newest known liveness point (direct or gossiped)
	region                                 string                        // its cluster.region, from its heartbeats
	added                                  time.Time                     // when this node learned of it (never-reached warnings count from here)
	// Subset mode: when it became our neighbour, and whether we already
	// suspected it for staying silent since (silentGrace).
	neighbourSince time.Time
	judgedSilent   bool
	// Probes sent to it despite a negative indication, and how many hit
	// (atomics: counted as answers come, outside c.mu).
	negProbes, negHits atomic.Uint64
}

// RegionPair is the key of Config.RegionCosts: the two labels in order, so
// that a cost is the same both ways.
func RegionPair(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// accessCost is c_j before normalisation, in seconds: the configured cost
// between this node's region and p's if there is one, else p's measured
// RTT (0 while unknown). c.mu must be held.
func (c *Cluster) accessCost(p *Peer) float64 {
	if c.cfg.Region != "" && p.region != "" {
		if d, ok := c.cfg.RegionCosts[RegionPair(c.cfg.Region, p.region)]; ok {
			return d.Seconds()
		}
	}
	return p.rtt
}

// Transition is a change of a peer's state, for the status page.
type Transition struct {
	At      time.Time
	Trusted bool
}

// Cluster is one node's view of, and part in, the cluster.
type Cluster struct {
	cfg         Config
	log         *slog.Logger
	resumes     [len(resumeOutcomes)]atomic.Int64 // peer answers resumed from the origin, by outcome (resume.go)
	incarnation uint64
	router      *routing.Router
	// members is a ring over every known member, trusted or not, and
	// suspected how many peers this node suspects now: reroute.go counts
	// the requests a suspicion sends to another home.
	members    *routing.Router
	membersMu  sync.Mutex
	membersSig string
	suspected  atomic.Int64
	origin     proxy.Fetcher
	client     *http.Client
	scheme     string    // http, or https with cluster.tls
	peerAuth   *verifier // peer request authentication and replay cache
	metrics    *Metrics
	verifier   *wire.Verifier
	filter     *indicators.Filter
	store      Store
	counters   *routing.Counters // Karger step: (page, rank) at this cache
	hot        *routing.Counters // ingress: requests per page (hybrid's hot test)
	ingressQ   *routing.Counters // ingress: the q-rule for keeping a copy here

	mu        sync.Mutex
	peers     map[string]*Peer
	advFull   []byte
	advDelta  []byte
	advEpoch  uint64
	lastAdv   time.Time
	dirty     bool
	climbs    climbCosts // M's measurement, per site (penalty.go)
	stalled   time.Time
	local     atomic.Int64 // worst recent local scheduling delay (ns), for status
	unknownHB atomic.Uint64
	nextReq   uint64
	selfAddr  map[string]bool // our own addresses as DNS lists them, learned from our own heartbeats
	// Bounded-subset monitoring (gossip.go).
	subset  bool             // heartbeat the neighbours only and trust by gossiped liveness
	order   []string         // member ids, sorted (self included): the anti-entropy walk
	walk    int              // position of that walk
	rumors  map[string]int   // node id → heartbeats that will still carry its point
	selfVer uint64           // our liveness version: raised to refute a suspicion
	ringSig uint64           // ringSignature of the members the rings were last built over
	started time.Time        // when this node started, for eligible
	warned  *misconfigMemory // misconfiguration logged lately (misconfig.go)
	probeAt int              // the walk over members off the rings (targets)
}

// New validates cfg and returns a cluster member; Run starts it.
func New(cfg Config, origin proxy.Fetcher, store Store, m *Metrics, log *slog.Logger) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, err := indicators.NewFilter(cfg.Indicator)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{
		cfg: cfg, log: log, incarnation: uint64(time.Now().UnixNano()), started: time.Now(), warned: newMisconfigMemory(),
		router: routing.NewRouter(routing.DefaultVNodes), members: routing.NewRouter(routing.DefaultVNodes), origin: origin, metrics: m, store: store, filter: f,
		verifier: wire.NewVerifier(cfg.Secret, maxSkew),
		counters: routing.NewCounters(counterCapacity, cfg.Q),
		hot:      routing.NewCounters(counterCapacity, max(cfg.HotThreshold, 1)),
		ingressQ: routing.NewCounters(counterCapacity, cfg.Q),
		peers:    map[string]*Peer{},
		client: &http.Client{
			// A peer's 3xx is a stored response for the client, never a
			// hop for the ingress to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Transport: &http.Transport{
				Proxy: nil, MaxIdleConnsPerHost: peerIdleConns, IdleConnTimeout: peerIdleTimeout,
				DialContext: (&net.Dialer{Timeout: cfg.PeerTimeout}).DialContext, ResponseHeaderTimeout: 4 * cfg.PeerTimeout,
				// The client's own Accept-Encoding goes through signed; the
				// transport must not add one.
				DisableCompression: true,
				TLSClientConfig:    cfg.TLS,
			}},
		scheme:   "http",
		peerAuth: newVerifier(cfg.Secret),
	}
	if cfg.TLS != nil {
		c.scheme = "https"
	}
	for id, addr := range cfg.Peers {
		if id == cfg.NodeID {
			continue
		}
		c.addPeer(id, addr)
	}
	c.recomputeNeighbours()
	store.OnInsert(c.inserted)
	if len(store.Keys(func(string) bool { return true })) > 0 {
		// A warm restart (the disk tier kept pages): peers learn what we
		// hold from our first heartbeat, not after the next insertion.
		c.advertise()
	}
	for _, sh := range cfg.Shadows {
		m.ShadowSuspicions.WithLabelValues(sh.Name) // a series from the start, at 0
	}
	m.registerVerifier(c.verifier, c.unknownHB.Load)
	c.setView()
	return c, nil
}

func (c *Cluster) addPeer(id, addr string) {
	d, _ := fdetect.New(c.cfg.Detector, int64(c.cfg.Period), c.cfg.DetectorArgs)
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		c.log.Warn("peer address", "peer", id, "addr", addr, "err", err)
	}
	c.peers[id] = &Peer{ID: id, Addr: addr, udp: udp, det: d, shadows: c.newShadows(), replica: &indicators.Replica{}, added: time.Now()}
	c.metrics.peerUp(id, false)
}

// Router returns the routing view.
func (c *Cluster) Router() *routing.Router { return c.router }

// setView rebuilds the ring from self plus trusted peers.
func (c *Cluster) setView() {
	c.mu.Lock()
	members := []routing.Member{{ID: c.cfg.NodeID}}
	all := []string{c.cfg.NodeID}
	suspected := 0
	for _, p := range c.peers {
		if p.trusted {
			members = append(members, routing.Member{ID: p.ID})
		} else if p.seen && !c.subset {
			suspected++ // heard before, suspected since (reroute.go)
		}
		if c.identified(p) {
			all = append(all, p.ID)
		}
	}
	c.mu.Unlock()
	c.suspected.Store(int64(suspected))
	c.setMembers(all)
	start := time.Now()
	if err := c.router.SetView(members); err != nil {
		c.log.Error("view", "err", err)
	}
	c.metrics.ViewRebuild.Observe(time.Since(start).Seconds())
	c.metrics.ViewSize.Set(float64(len(members)))
	c.metrics.ViewChanges.Inc()
}

// Run serves heartbeats until ctx ends: send every period, receive, and
// check every peer's freshness point each half period.
func (c *Cluster) Run(ctx context.Context, conn wire.PacketConn) error {
	sentP, sentB := c.metrics.HeartbeatPackets.WithLabelValues("sent"), c.metrics.HeartbeatBytes.WithLabelValues("sent")
	recvP, recvB := c.metrics.HeartbeatPackets.WithLabelValues("received"), c.metrics.HeartbeatBytes.WithLabelValues("received")
	s := &wire.Sender{Node: c.cfg.NodeID, Incarnation: c.incarnation, Secret: c.cfg.Secret, Period: c.cfg.Period, Fill: c.fillHeartbeat,
		Sent: func(n int) { sentP.Inc(); sentB.Add(float64(n)) }}
	errc := make(chan error, 3)
	go func() { errc <- s.Run(ctx, conn, c.targets) }()
	go func() {
		errc <- wire.Receive(ctx, conn, c.verifier, c.received, func(n int) { recvP.Inc(); recvB.Add(float64(n)) }, c.heartbeatRejected)
	}()
	go func() { errc <- c.monitor(ctx) }()
	if c.cfg.DNS != "" {
		go c.resolveLoop(ctx)
	}
	var first error
	for range 3 {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Cluster) targets() map[string]*net.UDPAddr {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.subset && c.ringChanged(now) {
		c.recomputeNeighbours()
	}
	out := make(map[string]*net.UDPAddr, len(c.peers))
	var off []*Peer // members off the rings (suspected for long, or never heard)
	for id, p := range c.peers {
		// Besides the neighbours: peers not yet identified (a DNS address
		// whose node id we do not know), and peers that heartbeat us
		// although we do not heartbeat them, so that they identify us and
		// a one-sided neighbour relation stays symmetric.
		recent := p.seen && now.Sub(p.lastRecv) < 3*c.cfg.Period
		if !p.neighbour && c.identified(p) && !recent {
			if c.subset && !c.eligible(p, now) {
				off = append(off, p)
			}
			continue
		}
		if p.udp == nil {
			// Not resolvable at start (a container not up yet): try again.
			if udp, err := net.ResolveUDPAddr("udp", p.Addr); err == nil {
				p.udp = udp
			}
		}
		if p.udp != nil {
			out[id] = p.udp
		}
	}
	if c.subset && len(off) > 0 {
		// One member off our rings per period, in turn: a partition that
		// healed after both sides dropped each other from their rings is
		// noticed within len(off) periods.
		slices.SortFunc(off, func(a, b *Peer) int { return strings.Compare(a.ID, b.ID) })
		c.probeAt = (c.probeAt + 1) % len(off)
		if p := off[c.probeAt]; p.udp != nil {
			out[p.ID] = p.udp
		}
	}
	return out
}

// adoptByAddress renames a peer found by DNS (keyed by its address) to the
// node id its heartbeat carries, so every node builds its ring from the
// same ids. A heartbeat from ourselves (DNS lists our own address) removes
// that entry. c.mu must be held; the caller logs the adoption after
// releasing it.
func (c *Cluster) adoptByAddress(r wire.Received) *Peer {
	for key, p := range c.peers {
		if p.udp == nil || r.From == nil || !p.udp.IP.Equal(r.From.IP) || p.udp.Port != r.From.Port || key != p.Addr {
			continue
		}
		delete(c.peers, key)
		c.metrics.PeerUp.DeleteLabelValues(key)
		c.metrics.FDMargin.DeleteLabelValues(key)
		c.metrics.HeartbeatLoss.DeleteLabelValues(key)
		c.metrics.NegativeProbes.DeletePartialMatch(prometheus.Labels{"peer": key})
		c.metrics.IndicatorEstimates.DeletePartialMatch(prometheus.Labels{"peer": key})
		if r.Node == c.cfg.NodeID {
			if c.selfAddr == nil {
				c.selfAddr = map[string]bool{}
			}
			c.selfAddr[key] = true
			return nil
		}
		p.ID = r.Node
		c.peers[r.Node] = p
		c.recomputeNeighbours()
		return p
	}
	return nil
}

// fillHeartbeat adds our indicator state and the echo for target.
func (c *Cluster) fillHeartbeat(target string, h *wire.Heartbeat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.Epoch = c.advEpoch
	h.Region = c.cfg.Region
	h.FPR, h.FNR = c.filter.Estimates()
	if p := c.peers[target]; p != nil && p.lastSeqIn > 0 {
		h.EchoSeq, h.EchoSendNs = p.lastSeqIn, p.lastSend
		h.EchoHoldNs = time.Now().UnixNano() - p.recvAt
	}
	if c.subset {
		h.Ver = c.selfVer
		h.Rumors = c.pickRumors()
	}
}

// received handles an accepted heartbeat. It logs only after releasing
// c.mu: a log write can block (a full pipe, a slow journal), and the
// heartbeat sender needs c.mu, so a stuck stderr must not silence the node.
func (c *Cluster) received(r wire.Received) {
	if r.Node == c.cfg.NodeID && r.Incarnation != c.incarnation {
		// Our id, another incarnation than ours: a second node runs with
		// this node's id (our own heartbeats, looped back by a DNS name
		// that lists us, carry our incarnation).
		from := ""
		if r.From != nil {
			from = r.From.String()
		}
		c.warnOnce("conflict "+from, "another node sends heartbeats with this node's id: the two cannot both be on the ring",
			"node", r.Node, "from", from, "remedy", "give every node its own node_id")
	}
	var identified, restarted bool
	defer func() {
		if identified {
			c.log.Info("peer identified", "addr", r.From.String(), "node", r.Node)
		}
		if restarted {
			c.log.Info("peer restarted", "peer", r.Node)
		}
	}()
	c.mu.Lock()
	p := c.peers[r.Node]
	if p == nil && c.cfg.DNS != "" {
		p = c.adoptByAddress(r)
		identified = p != nil
	}
	if p == nil {
		c.mu.Unlock()
		c.unknownHB.Add(1)
		return
	}
	if r.Incarnation != p.incarnation {
		// A restart: a fresh detector, so the old history does not count.
		restarted = p.seen
		p.incarnation = r.Incarnation
		p.det, _ = fdetect.New(c.cfg.Detector, int64(c.cfg.Period), c.cfg.DetectorArgs)
		p.shadows = c.newShadows()
		p.epochSeen = 0
		p.replica = &indicators.Replica{}
	}
	p.det.Observe(r.Seq, r.RecvNs)
	observeShadows(p, r.Seq, r.RecvNs, time.Unix(0, r.RecvNs))
	p.seen, p.lastRecv, p.lastSeqIn, p.lastSend, p.recvAt = true, time.Unix(0, r.RecvNs), r.Seq, r.SendNs, r.RecvNs
	if rtt, ok := wire.RTT(r.Heartbeat, r.RecvNs); ok {
		s := rtt.Seconds()
		if p.rtt == 0 {
			p.rtt = s
		} else {
			p.rtt += 0.1 * (s - p.rtt)
		}
		c.metrics.PeerRTT.WithLabelValues(p.ID).Set(p.rtt)
	}
	p.replica.SetEstimates(r.FPR, r.FNR)
	p.region = r.Region
	needPull := r.Epoch > p.epochSeen
	p.heard = true
	viewChanged := c.learn(wire.Rumor{Node: r.Node, Incarnation: r.Incarnation, Ver: r.Ver})
	if c.subset && p.live.suspect && p.live.inc == r.Incarnation && c.rumors[p.ID] == 0 {
		// It is talking to us but has not refuted yet: tell it it is
		// suspected (it is a neighbour, so the next heartbeat reaches it).
		c.spread(p.ID)
	}
	if !c.subset {
		if !p.trusted {
			c.settleReroutes(p, restarted)
		}
		viewChanged = c.setTrust(p, true) || viewChanged
	}
	for _, rumor := range r.Rumors {
		c.metrics.Rumors.WithLabelValues(rumorKind(rumor.Suspect), "received").Inc()
		viewChanged = c.learn(rumor) || viewChanged
	}
	c.mu.Unlock()
	if viewChanged {
		c.setView()
	}
	if needPull {
		go c.pullIndicator(p, r.Epoch)
	}
}

func appendHistory(h []Transition, t Transition) []Transition {
	h = append(h, t)
	if len(h) > 20 {
		h = h[len(h)-20:]
	}
	return h
}

// monitor suspects peers whose freshness point passed. If this process
// itself stalled (a GC or VM pause longer than the check interval), it
// suspects nobody for that round: the silence was ours.
func (c *Cluster) monitor(ctx context.Context) error {
	tick := c.cfg.Period / 4
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	// Our own delays count for a few periods: a heartbeat held up in our
	// socket buffer arrives late by that much, and the next one may too.
	watch := newSchedWatch(4 * c.cfg.Period)
	rounds := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			// The time the round runs, not the tick's scheduled time
			// (which t.C carries since Go 1.23): a late round is the lag.
			now := time.Now()
			lag := now.Sub(last)
			last = now
			local := watch.observe(now, lag-tick)
			c.local.Store(int64(local))
			c.metrics.LocalDelay.Set(local.Seconds())
			if lag > 3*tick {
				c.metrics.LocalStalls.Inc()
				c.mu.Lock()
				c.stalled = now
				c.mu.Unlock()
				continue
			}
			c.check(now, local)
			if rounds++; rounds%64 == 0 {
				c.checkUnreached(now)
			}
		}
	}
}

// check suspects the peers whose freshness point, moved on by local (how
// late this process itself has been running lately), has passed.
func (c *Cluster) check(now time.Time, local time.Duration) {
	changed := false
	var suspected []suspicion // logged after c.mu is released (see received)
	c.mu.Lock()
	grace := !c.stalled.IsZero() && now.Sub(c.stalled) < 2*c.cfg.Period
	for _, p := range c.peers {
		if m, ok := p.det.(fdetect.Margined); ok {
			c.metrics.FDMargin.WithLabelValues(p.ID).Set(float64(m.Margin()) / 1e9)
		}
		if la, ok := p.det.(*fdetect.LossAware); ok {
			c.metrics.HeartbeatLoss.WithLabelValues(p.ID).Set(la.Loss())
		}
		e := p.replica.Exclusion()
		he := p.replica.HomeExclusion()
		for name, v := range map[string]float64{"fpr": e.FPR, "fnr": e.FNR, "pi": e.Pi, "nu": e.Nu, "q": e.Q, "home_nu": he.Nu, "home_q": he.Q, "nu_calibration": p.replica.Calibration()} {
			c.metrics.IndicatorEstimates.WithLabelValues(p.ID, name).Set(v)
		}
		c.metrics.ReplicaEpoch.WithLabelValues(p.ID).Set(float64(p.replica.Epoch()))
		if !p.pulledAt.IsZero() {
			c.metrics.ReplicaAge.WithLabelValues(p.ID).Set(now.Sub(p.pulledAt).Seconds())
		}
		if p.seen && !grace {
			c.checkShadows(p, now, c.localShift(p, local))
		}
		if !p.trusted || grace {
			continue
		}
		neverHeard := c.subset && p.neighbour && !p.heard && !p.judgedSilent && p.live.known && !p.live.suspect &&
			now.Sub(p.neighbourSince) > c.silentGrace()
		if !p.seen && !neverHeard {
			continue
		}
		if c.subset && !neverHeard && (!p.neighbour || !p.heard || !p.live.known || p.live.suspect) {
			// Not ours to judge, or already judged: only a neighbour heard
			// since our last suspicion of it may be suspected.
			continue
		}
		if neverHeard || c.silent(p, now, local) {
			p.judgedSilent = true
			if c.subset {
				p.heard = false
				p.live.suspect = true
				c.metrics.Rumors.WithLabelValues("suspect", "applied").Inc()
				c.spread(p.ID)
			}
			c.setTrust(p, false)
			silentFor := now.Sub(p.neighbourSince)
			if p.seen && !neverHeard {
				silentFor = now.Sub(p.lastRecv)
				c.metrics.DetectionTime.Observe(silentFor.Seconds())
			}
			suspected = append(suspected, suspicion{p.ID, silentFor})
			changed = true
		}
	}
	c.mu.Unlock()
	for _, s := range suspected {
		c.log.Warn("peer suspected", "self", c.cfg.NodeID, "peer", s.peer, "silent_for", s.silent.Round(time.Millisecond), "local_delay", local.Round(time.Millisecond))
	}
	if changed {
		c.setView()
	}
}

// suspicion is a peer suspected in one check, for the log.
type suspicion struct {
	peer   string
	silent time.Duration
}

// silent reports whether p's freshness point has passed at now, allowing
// for this process's own delays: local, the worst recent scheduling delay,
// and a stall of ours after p's last heartbeat, during which we could not
// hear it (its silence then counts from the end of the stall). c.mu is held.
func (c *Cluster) silent(p *Peer, now time.Time, local time.Duration) bool {
	return fdetect.Suspect(p.det, now.Add(-c.localShift(p, local)).UnixNano())
}

// localShift is how far p's freshness points move on for this process's
// own delays (see silent). c.mu is held.
func (c *Cluster) localShift(p *Peer, local time.Duration) time.Duration {
	shift := local
	if !c.stalled.IsZero() && p.lastRecv.Before(c.stalled) {
		shift = max(shift, c.stalled.Sub(p.lastRecv))
	}
	return shift
}

// resolveLoop re-resolves the DNS name and adds peers by address.
func (c *Cluster) resolveLoop(ctx context.Context) {
	t := time.NewTicker(max(c.cfg.DNSInterval, time.Second))
	defer t.Stop()
	for {
		addrs, err := net.DefaultResolver.LookupHost(ctx, c.cfg.DNS)
		if err == nil {
			self, _, _ := net.SplitHostPort(c.cfg.Listen)
			c.mu.Lock()
			for _, a := range addrs {
				if a == self {
					continue
				}
				addr := net.JoinHostPort(a, c.cfg.DNSPort)
				known := false
				for _, p := range c.peers {
					known = known || p.Addr == addr
				}
				if !known && !c.selfAddr[addr] {
					c.addPeer(addr, addr)
				}
			}
			c.mu.Unlock()
		} else {
			c.log.Warn("dns", "name", c.cfg.DNS, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// LocalDelay is this process's worst recent scheduling delay, which the
// monitor adds to every freshness point before suspecting.
func (c *Cluster) LocalDelay() time.Duration { return time.Duration(c.local.Load()) }

// MonitoringState says how this node watches its peers, for the status page.
type MonitoringState struct {
	Mode      string `json:"mode"`      // all or subset (auto resolved)
	Monitored int    `json:"monitored"` // peers it heartbeats
	Members   int    `json:"members"`   // known members, self included
}

// Monitoring returns how this node watches its peers.
func (c *Cluster) Monitoring() MonitoringState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := MonitoringState{Mode: "all", Members: len(c.order)}
	if c.subset {
		st.Mode = "subset"
	}
	for _, p := range c.peers {
		if p.neighbour {
			st.Monitored++
		}
	}
	return st
}

// PeerState is a read-only snapshot of a peer for status and metrics.
type PeerState struct {
	ID           string  `json:"id"`
	Addr         string  `json:"addr"`
	Trusted      bool    `json:"trusted"`
	Monitored    bool    `json:"monitored"` // this node heartbeats it (else its state is gossiped)
	Region       string  `json:"region,omitempty"`
	LastSeenAgoS float64 `json:"last_heartbeat_ago_s"`
	RTTms        float64 `json:"rtt_ms"`
	MarginMs     float64 `json:"fd_margin_ms"`
	LossRatio    float64 `json:"heartbeat_loss"` // estimated by the loss-aware margin
	Suspicions   uint64  `json:"suspicions"`
	// Rerouted are requests whose page's home was this peer, sent to the
	// next home while this node suspected it; ReroutedWrongly those of
	// suspicions that turned out wrong (the peer was heard again from the
	// same process).
	Rerouted        uint64               `json:"rerouted_requests"`
	ReroutedWrongly uint64               `json:"rerouted_requests_wrongly"`
	Epoch           uint64               `json:"indicator_epoch"`
	ReplicaAgeS     float64              `json:"indicator_age_s"`
	Exclusion       indicators.Exclusion `json:"estimates"`
	// HomeExclusion is the estimates over the pages homed at the peer
	// (fna-home, fna-learned), NegativeProbes and NegativeHits the probes
	// sent despite a negative indication and how many hit, and
	// Calibration the ratio of those hits to the hits the derived ν
	// predicted for the peer's own pages (1 before any).
	HomeExclusion  indicators.Exclusion `json:"home_estimates"`
	NegativeProbes uint64               `json:"negative_probes"`
	NegativeHits   uint64               `json:"negative_probe_hits"`
	Calibration    float64              `json:"nu_calibration"`
	History        []Transition         `json:"history"`
	// Shadows are the transitions of each shadow detector (Config.Shadows).
	Shadows map[string][]Transition `json:"shadows,omitempty"`
}

// Peers returns a snapshot of every peer, sorted by id.
func (c *Cluster) Peers() []PeerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PeerState, 0, len(c.peers))
	for _, p := range c.peers {
		s := PeerState{ID: p.ID, Addr: p.Addr, Trusted: p.trusted, Monitored: p.neighbour, Region: p.region, RTTms: p.rtt * 1000, Suspicions: p.suspicions,
			Rerouted: p.reroutedAll, ReroutedWrongly: p.reroutedWrongly,
			Epoch: p.replica.Epoch(), Exclusion: p.replica.Exclusion(), HomeExclusion: p.replica.HomeExclusion(),
			NegativeProbes: p.negProbes.Load(), NegativeHits: p.negHits.Load(), Calibration: p.replica.Calibration(), History: slices.Clone(p.history), Shadows: shadowHistories(p)}
		if p.seen {
			s.LastSeenAgoS = time.Since(p.lastRecv).Seconds()
		}
		if !p.pulledAt.IsZero() {
			s.ReplicaAgeS = time.Since(p.pulledAt).Seconds()
		}
		if m, ok := p.det.(fdetect.Margined); ok {
			s.MarginMs = float64(m.Margin()) / 1e6
		}
		if la, ok := p.det.(*fdetect.LossAware); ok {
			s.LossRatio = la.Loss()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PeerState) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out
}

// costs returns c_j (the access cost, accessCost, normalised so the
// cheapest trusted peer's is 1) for a peer. c.mu must be held.
func (c *Cluster) costs(p *Peer, minCost float64) float64 {
	if ac := c.accessCost(p); minCost > 0 && ac > 0 {
		return math.Max(1, ac/minCost)
	}
	return 1
}

// defaultMissPenalty is M before any climb was measured, in units of the
// cheapest peer's cost: a peer is a LAN hop and the origin is far.
const defaultMissPenalty = 100.0

// missPenalty returns M for site in the unit of c_j (the climb latency
// over the cheapest trusted peer's access cost), and the climb latency (s)
// it came from. c.mu must be held.
func (c *Cluster) missPenalty(site string, minCost float64) (m, climbS float64) {
	climbS, _ = c.climbs.forSite(site)
	if climbS > 0 && minCost > 0 {
		return math.Max(1, climbS/minCost), climbS
	}
	return defaultMissPenalty, climbS
}
