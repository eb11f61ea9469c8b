// Package cluster joins edge nodes into one cache. It owns membership
// (hashicorp/memberlist, joined through static peers or a DNS name),
// authenticated UDP heartbeats with a failure detector per monitored peer,
// the view (self plus trusted members) that drives the routing ring,
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// Config configures a node's membership in the cluster.
type Config struct {
	NodeID      string
	Listen      string            // host:port: peer HTTP (TCP), heartbeats (UDP) and membership gossip (both)
	Peers       map[string]string // static peers: id → host:port (members from the start, and seeds)
	DNS         string            // or a name whose addresses are seeds (re-resolved every DNSInterval once joined)
	DNSPort     string            // port of the peers found by DNS
	DNSInterval time.Duration
	// Advertise is the host:port other nodes reach this one at, when it
	// differs from Listen (NAT, or Listen on every interface); "" derives it.
	Advertise string
	// ProbeInterval and SuspicionMult tune memberlist's failure detection
	// (membership.go); 0 takes DefaultProbeInterval and DefaultSuspicionMult.
	ProbeInterval time.Duration
	SuspicionMult int
	// StateDir keeps what must outlive a restart: the purges peers are
	// owed (owedstate.go). "": in memory only.
	StateDir string
	// ForgetDepartedAfter is how long a peer that left the membership
	// stays in this node's peer table (status page, per-peer metric
	// series) before it is forgotten (forget.go). Configured peers are
	// never forgotten.
	ForgetDepartedAfter time.Duration
	// GossipDial opens membership streams to a peer's cluster port; nil
	// dials TCP. Tests give an in-memory one (with wire.MemNetwork).
	GossipDial   func(ctx context.Context, addr string) (net.Conn, error)
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
	// FirstHopWithProbes asks the climb's first hop only-if-cached beside
	// the probes the ingress waits for before climbing (fetch.go). Left
	// out, a page the first hop (the region's home) holds waits for a
	// farther positively indicated peer's answer: in two regions, 20 ms
	// across against 0.5 ms within. Not with ProbeFirstHop.
	FirstHopWithProbes bool
	// StaleWhileClimbing serves a stale copy a probe found (within its
	// stale-while-revalidate window) if it answers again before the climb
	// does, instead of only when the climb fails (stalefallback.go).
	StaleWhileClimbing bool
	// NegativeProbesBesideClimb starts the climb once the positively
	// indicated peers missed, racing the negative probes' answers
	// (beside.go), instead of waiting for every probe first.
	NegativeProbesBesideClimb bool
	// SharedSilenceHold holds a peer's suspicion while no other peer's
	// heartbeat comes on time either (sharedsilence.go).
	SharedSilenceHold bool
	// SharedSilenceLossless takes as evidence only a heartbeat that came
	// on time right after its predecessor (none lost in between).
	SharedSilenceLossless bool
	// NetworkLossMargin widens every link's loss-aware margin to the loss
	// most links show at once (networkloss.go).
	NetworkLossMargin bool
	// NetworkLossOnset also reads the network's loss from the links' last
	// few due heartbeats, so a burst's first moments count (networkloss.go).
	NetworkLossOnset bool
	// ConfirmProbe asks a silent peer directly before suspecting it, and
	// suspects it only if no answer comes (confirm.go).
	ConfirmProbe bool
	Mode         routing.Mode
	Placement    routing.Placement
	// RegionalHomes gives a page a home in each region (Region): the
	// first member of its rendezvous ranking in this node's region.
	RegionalHomes bool
	Arity         int // d
	Q             int // requests a cache forwards before it stores
	HotThreshold  int // hybrid: requests before a page spreads over its tree
	PeerTimeout   time.Duration
	// PeerWholeBytes: at the ingress, a peer's answer up to this size is
	// read whole before its header goes to the client, so that one that
	// fails or crawls mid-body is replaced with nothing sent (whole.go).
	// 0 streams every answer.
	PeerWholeBytes int64
	Indicator      indicators.FilterConfig
	AdvertiseMax   time.Duration // T: advertise at least this often when keys changed
	KeyScheme      bool          // the cache key keeps the client's scheme (proxy.KeyScheme)
	Monitoring     Monitoring    // all-to-all or bounded-subset heartbeats (monitoring.go)
	MonitorPeers   int           // k: neighbours per node in subset mode (0: DefaultMonitorPeers)
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
	// SiteOf names the configured site that serves a host as keys carry
	// it, for the miss penalty M per site, when a fetch's front resolved
	// none (the route explorer); "" is the one-site shortcut (whose
	// proxy.Site.Name is "default"). Nil: every host shares one M.
	SiteOf func(host string) string
	// runQueueBlind leaves the Go runtime's run-queue latency out of this
	// node's own delay (stall.go), keeping the monitor's ticker lag. Only
	// tests in virtual time (testing/synctest) set it: the runtime's
	// latencies are the real process's, while a bubble's clock moves only
	// when every goroutine waits, so a busy machine's real delays would
	// move freshness points in virtual time.
	runQueueBlind bool
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
		Selection:    SelectionFNARate,       // asks negatively indicated homes when their probes' realised hit rate pays for them, never priced worse than fno (docs/indicators.md, "fna-rate")
		Mode:         routing.ModeHybrid,     // a home while cold, a random tree once hot
		Placement:    routing.PlacementDistinct,
		Arity:        4,                      // the origin sees at most d·q fetches per page
		Q:            2,                      // the paper: a larger q only lowers the supported rate
		HotThreshold: 64,                     // measured best in docs/routing.md
		PeerTimeout:  500 * time.Millisecond, // a slow peer costs at most this before failover
		// Most pages: a web page's HTML, CSS and scripts (the web07 trace's
		// mean is 44 KB); memory per concurrent peer miss stays small.
		PeerWholeBytes: 128 << 10,
		Indicator:      indicators.DefaultFilterConfig(100000),
		AdvertiseMax:   10 * time.Second, // T: a changed store is advertised at least this often
		Monitoring:     MonitorAuto,
		MonitorPeers:   DefaultMonitorPeers,
		ProbeInterval:  DefaultProbeInterval,
		SuspicionMult:  DefaultSuspicionMult,
		// Long enough for an operator paged about a departure to find it
		// on the status page, and for a few scrapes to record the peer's
		// last values; short enough that a fleet replacing nodes every few
		// minutes keeps a table (and about a dozen series per peer) the
		// size of the nodes that left in that time.
		ForgetDepartedAfter: 10 * time.Minute,
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
	case c.PeerWholeBytes < 0:
		return fmt.Errorf("cluster: PeerWholeBytes %d: want 0 (stream every answer) or a size", c.PeerWholeBytes)
	case c.Arity < 2:
		return fmt.Errorf("cluster: Arity %d: want d ≥ 2", c.Arity)
	case c.Q < 1:
		return fmt.Errorf("cluster: Q %d: want q ≥ 1", c.Q)
	case c.ProbeInterval < 0:
		return fmt.Errorf("cluster: ProbeInterval %v: want a positive interval", c.ProbeInterval)
	case c.SuspicionMult < 0:
		return fmt.Errorf("cluster: SuspicionMult %d: want at least 1", c.SuspicionMult)
	case c.ForgetDepartedAfter < 0:
		return fmt.Errorf("cluster: ForgetDepartedAfter %v: want a positive duration", c.ForgetDepartedAfter)
	}
	if !wire.ValidID(c.NodeID) {
		return fmt.Errorf("cluster: NodeID %q: want 1 to %d bytes", c.NodeID, wire.MaxIDLen)
	}
	for id := range c.Peers {
		if !wire.ValidID(id) {
			return fmt.Errorf("cluster: peer id %q: want 1 to %d bytes (heartbeats name it)", id, wire.MaxIDLen)
		}
	}
	if c.Region != "" && !ValidRegion(c.Region) {
		return fmt.Errorf("cluster: Region %q: want up to %d lower-case letters, digits, . _ -, starting with a letter or digit", c.Region, wire.MaxRegionLen)
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
	// requests open to it when this node suspected it: ended (before
	// their header) or left streaming (openPeerRequest.suspect)
	suspectEnded, suspectStreaming uint64
	incarnation                    uint64
	trusted                        bool
	seen                           bool
	lastRecv                       time.Time
	lastSend                       int64 // the peer's SendNs of its last heartbeat (for our echo)
	lastSeqIn                      uint64
	recvAt                         int64 // when we received it
	rtt                            float64
	epochSeen                      uint64
	replica                        *indicators.Replica
	suspicions                     uint64
	suspectedAt                    time.Time
	history                        []Transition
	waiting                        map[uint64]*openPeerRequest // requests to this peer not yet ended (fetch.go send)
	pulledAt                       time.Time                   // when the replica last changed
	member                         bool                        // in the membership (configured, or alive in memberlist)
	leftAt                         time.Time                   // when it last left the membership (forget.go)
	// saidGoodbye: it last left the membership while this node still
	// trusted it, as a node that says goodbye at its stop does (its
	// heartbeats were still coming); a crash or a partition is suspected
	// by the detector long before memberlist agrees it is dead. Only such
	// a peer is no longer expected (edge_peer_member 0).
	saidGoodbye          bool
	returnedAt           time.Time // when it was learnt, first trusted, restarted or trusted again after an absence (returned.go)
	wasTrusted           bool      // trusted at least once
	configured           bool      // named in cluster.peers: its address there is the path to it
	configuredByIP       bool      // configured by IP address, not host name (membership takes its path: transport.go)
	configuredAddr       string    // its address in cluster.peers (Addr follows a move: followMove)
	advertisedConfigured bool      // it has advertised exactly configuredAddr: no relay in between
	advertised           string    // the address memberlist last reported it at
	movedTo              string    // another address it advertises since: a move, once shown (followMove)
	moveChecking         bool      // a checkMove of movedTo is under way
	moveCheckedAt        time.Time // when movedTo was last checked (moveRecheck)
	moveGen              uint64    // bumped by every change of the above: a check's result counts only for its own
	memberAt             time.Time // when memberlist last reported it alive
	metaInc              uint64    // the incarnation in its memberlist metadata
	neighbour            bool      // on this node's monitoring rings (every member with all-to-all)
	monitored            bool      // this node heartbeats it and runs the detector on the link
	routedAt             time.Time // when this node last sent it a request
	watchedAt            time.Time // when it last sent a heartbeat saying it monitors us
	heard                bool      // heard directly since it became monitored
	region               string    // its cluster.region, from its heartbeats or metadata
	added                time.Time // when this node learned of it (never-reached warnings count from here)
	// When it became monitored, and whether we already suspected it for
	// staying silent since (silentGrace).
	monitoredSince time.Time
	judgedSilent   bool
	// held: silent past its freshness point, its suspicion held because no
	// other peer's heartbeat came on time either (sharedsilence.go).
	held bool
	// The newest heartbeat of its current incarnation (sequence, arrival):
	// the base of the on-time test (sharedsilence.go).
	newestSeq uint64
	newestAt  time.Time
	heldFor   time.Time // the last heartbeat before the silence last counted as held
	// Its quick loss estimate and the newest sequence it counted
	// (networkloss.go), and the last heartbeat before the silence whose
	// suspicion the network's loss last deferred.
	quickLoss   float64
	lossSeq     uint64
	deferredFor time.Time
	// Which of the 64 heartbeats up to lossSeq arrived (bit i: lossSeq−i),
	// from recvFrom on (the first after an outage), and when lossSeq did:
	// the onset estimate's window (networkloss.go).
	recvBits uint64
	recvFrom uint64
	lossAt   time.Time
	// This node's latest heartbeats to it (a ring), how many of them its
	// latest echo showed lost, and when that echo came (networkloss.go).
	sent       [sentRing]sentBeat
	sentNext   int
	echoLost   int
	echoLostAt time.Time
	// Its deadline timer (armDeadline) and when it was set to fire.
	timer    *time.Timer
	deadline time.Time
	// Probes sent to it despite a negative indication, and how many hit
	// (atomics: counted as answers come, outside c.mu).
	negProbes, negHits atomic.Uint64
	// Its confirmation probe (confirm.go): the nonces of the asks in
	// flight (0: none) and when they were sent and expire, the periods
	// answered probes moved its freshness point on in this silence and
	// how many answered; and the answers this node gave its asks in the
	// period from answersFrom.
	probeNonces             [probeCopies]uint64
	probeSentAt, probeUntil time.Time
	probeShift              time.Duration
	probeRounds             int
	answersFrom             time.Time
	answersGiven            int
	// Its newest probe's asks seen by this node (incarnation, send time,
	// nonces answered): an ask's replay check (mayAnswer).
	askInc    uint64
	askSendNs int64
	askSeen   []uint64
	// The freshness point its probe in flight was sent for, and its
	// latest round trips (echoes and answered probes), whose least says
	// whether a probe can be answered in time (confirm.go).
	probeFor   time.Time
	rttSamples [rttSamples]time.Duration
	rttNext    int
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
	cfg    Config
	copies copyHold                    // while a purge goes round, no peer's page it names is kept (purgehold.go)
	owed   owedPurges                  // purges peers did not take, delivered when they are back (purgeowed.go)
	pulled atomic.Pointer[PullSummary] // the start's asking for what peers owe it (owedpull.go)
	// rounds counts purges under way here (sent round, or taken from a
	// peer), which may owe purges when they end: Close waits for them.
	rounds roundGate
	// life ends at Close: deliveries begun outside a request
	// (deliverOwedNow) do not outlive the node.
	life    context.Context
	endLife context.CancelFunc
	// firstJoin closes when this node has first joined the membership
	// (membership.go): a start asks the peers it learnt then (owedpull.go).
	firstJoin     chan struct{}
	firstJoinOnce sync.Once
	// owedAsks are peers heard again after a silence, to be asked for
	// what they owe this node (owedpull.go).
	owedAsks    chan owedAsk
	purgeIDs    purgeIDs   // ids of the purges taken from peers, so a repeat is not run again
	purgeNamer  PurgeNamer // which pages a purge names (SetPurgeNamer); nil: every page
	log         *slog.Logger
	resumes     [len(resumeOutcomes)]atomic.Int64      // peer answers resumed from the origin, by outcome (resume.go)
	wholes      [len(wholeOutcomes)]atomic.Int64       // peer answers read whole before the header, by outcome (whole.go)
	budget      BufferBudget                           // charged by peer answers' read-ahead (whole.go); nil: none
	calPools    map[string]*indicators.CalibrationPool // fna-learned's negative-probe outcomes per peer region, each replica's prior (poolFor); guarded by mu
	incarnation uint64
	router      *routing.Router
	// members is a ring over every known member, trusted or not, and
	// suspected how many peers this node suspects now: reroute.go counts
	// the requests a suspicion sends to another home.
	members    *routing.Router
	membersMu  sync.Mutex
	membersSig string
	suspected  atomic.Int64
	// viewMu makes setView whole: it reads the peers under mu, then
	// installs the count, the members' ring and the routing view outside
	// it, and two calls at once (a suspicion and a membership event) could
	// install in the other order from how they read, leaving a view older
	// than the peers' state in place until the next change (routing to a
	// suspected peer, or around a trusted one). Found by reading, while
	// a flaky test was looked into (its cause was the test's own).
	viewMu    sync.Mutex
	origin    proxy.Fetcher
	client    *http.Client
	purgeTLS  *http.Client // client and peerHTTP with a purge's longer header wait
	purgeHTTP *peerClient
	scheme    string      // http, or https with cluster.tls
	peerHTTP  *peerClient // plain-HTTP peer requests on the caller's goroutine (peerclient.go)
	peerAuth  *verifier   // peer request authentication and replay cache
	metrics   *Metrics
	verifier  *wire.Verifier
	filter    *indicators.Filter
	store     Store
	counters  *routing.Counters // Karger step: (page, rank) at this cache
	hot       *routing.Counters // ingress: requests per page (hybrid's hot test)
	ingressQ  *routing.Counters // ingress: the q-rule for keeping a copy here

	// advMu runs advertise one at a time; advertising is set while the
	// monitor's advertisement (advertiseIfDue) runs.
	advMu       sync.Mutex
	advertising atomic.Bool
	// dirty: the store changed (a key in or out) since the last
	// advertisement read its keys. Atomic: the store's removal hook sets
	// it under the store's lock, where taking c.mu could invert an order.
	dirty atomic.Bool

	mu       sync.Mutex
	peers    map[string]*Peer
	advFull  []byte
	advDelta []byte
	advEpoch uint64
	lastAdv  time.Time
	climbs   climbCosts // M's measurement, per site (penalty.go)
	stalled  time.Time
	// The shared-silence hold (sharedsilence.go): when the last heartbeat
	// came on time from any peer, and when heartbeats came on time again
	// after a silence every peer shared.
	onTimeAt, recoveredAt time.Time
	silenceFrom           time.Time // the last on-time heartbeat before the last shared silence
	evidenceAt            time.Time // the last heartbeat that showed the network delivers (arrivedOnTime)
	silence               silenceCounts
	netDeferred           atomic.Uint64 // suspicions the network's loss deferred (networkloss.go)
	onsetDeferred         atomic.Uint64 // those the onset estimate alone deferred
	races                 probeRaces    // negative probes beside the climb, by winner (beside.go)
	staleOwed             refreshOwed   // pages whose early stale copy's climb refreshed nothing here (stalefallback.go)
	raceAbove             float64       // raceAbove, a field so that tests can race every negative
	exportedAt            time.Time     // when the per-peer gauges were last set (check)
	stopped               bool          // Run ended: deadline timers do nothing
	local                 atomic.Int64  // worst recent local scheduling delay (ns), for status
	unknownHB             atomic.Uint64
	nextReq               uint64
	// Bounded-subset monitoring (monitoring.go).
	subset      bool             // heartbeat the neighbours and the peers routed to only
	memberCount int              // members, self included
	started     time.Time        // when this node started
	warned      *misconfigMemory // misconfiguration logged lately (misconfig.go)
	// Membership (membership.go, transport.go, keyring.go).
	transport    *sharedTransport
	keyring      *memberlist.Keyring
	mlReady      atomic.Pointer[membership] // the running memberlist, once Run started it (status)
	metaEpoch    atomic.Uint64              // the indicator epoch our metadata announces
	runCtx       context.Context            // Run's, while it runs (guarded by mu): what a checkMove runs within
	moveChecks   sync.WaitGroup             // checkMoves under way: Run waits for them
	viewWanted   chan struct{}              // membership asks for a ring rebuild (viewLoop)
	refuteWanted chan struct{}              // heartbeats returned after a silence (refuteLoop)
	mlView       memberView                 // memberlist's members, from its events (membership.go)
	refutes      atomic.Uint64              // refutations sent (status page)
	refuteAfter  time.Duration              // refuteSilence, computed once
	// The confirmation probe (confirm.go): the heartbeat socket, set by
	// Run, and the counts.
	probeConn wire.PacketConn
	confirm   confirmStats
}

// peerTLSClient is net/http's client to peers over mutual TLS
// (cluster.tls), waiting headerWait for an answer's header.
func peerTLSClient(cfg Config, headerWait time.Duration) *http.Client {
	return &http.Client{
		// A peer's 3xx is a stored response for the client, never a
		// hop for the ingress to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			Proxy: nil, MaxIdleConnsPerHost: peerIdleConns, IdleConnTimeout: peerIdleTimeout,
			DialContext: (&net.Dialer{Timeout: cfg.PeerTimeout}).DialContext, ResponseHeaderTimeout: headerWait,
			// The client's own Accept-Encoding goes through signed; the
			// transport must not add one.
			DisableCompression: true,
			TLSClientConfig:    cfg.TLS,
		}}
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
		verifier: wire.NewVerifier(cfg.Secret, maxSkew, cfg.NodeID),
		counters: routing.NewCounters(counterCapacity, cfg.Q),
		hot:      routing.NewCounters(counterCapacity, max(cfg.HotThreshold, 1)),
		ingressQ: routing.NewCounters(counterCapacity, cfg.Q),
		peers:    map[string]*Peer{},
		client:   peerTLSClient(cfg, 4*cfg.PeerTimeout),
		peerHTTP: newPeerClient(cfg.PeerTimeout, 4*cfg.PeerTimeout),
		// A purge's answer may come as late as a round waits for it
		// (purgeowed.go): a peer that took it slowly is not owed it.
		purgeTLS:     peerTLSClient(cfg, lateFactor*fanOutBound(cfg.PeerTimeout)),
		purgeHTTP:    newPeerClient(cfg.PeerTimeout, lateFactor*fanOutBound(cfg.PeerTimeout)),
		scheme:       "http",
		peerAuth:     newVerifier(cfg.Secret, cfg.NodeID),
		transport:    newSharedTransport(cfg.GossipDial, m),
		viewWanted:   make(chan struct{}, 1),
		firstJoin:    make(chan struct{}),
		owedAsks:     make(chan owedAsk, 256), // a 100-node start brings 99 joins within seconds
		refuteWanted: make(chan struct{}, 1),
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.refuteAfter = c.refuteSilence()
	c.raceAbove = raceAbove
	if c.keyring, err = memberlist.NewKeyring(nil, gossipKey(cfg.Secret)); err != nil {
		return nil, fmt.Errorf("cluster: keyring: %w", err)
	}
	if cfg.TLS != nil {
		c.scheme = "https"
	}
	if cfg.StateDir != "" {
		// Before the peers: each one in the table is marked known, and
		// what it is owed keeps it out of the first routing view.
		if err := c.owed.loadOwed(cfg.StateDir, time.Now()); err != nil {
			return nil, err
		}
	}
	for id, addr := range cfg.Peers {
		if id == cfg.NodeID {
			continue
		}
		c.addPeer(id, addr)
		c.peers[id].member = true // the configuration says so, until memberlist says it died
		c.peers[id].configured = true
		c.metrics.peerMember(c.peers[id])
		if host, _, err := net.SplitHostPort(addr); err == nil && net.ParseIP(host) != nil {
			c.peers[id].configuredByIP = true
			c.peers[id].configuredAddr = addr
		}
	}
	c.recomputeNeighbours()
	c.updateMonitored(time.Now())
	store.OnInsert(c.inserted)
	if rs, ok := store.(interface{ OnRemove(func(string)) }); ok {
		rs.OnRemove(c.removed)
	}
	if len(store.Keys(func(string) bool { return true })) > 0 {
		// A warm restart (the disk tier kept pages): peers learn what we
		// hold from our first heartbeat, not after the next insertion.
		c.advertise()
	}
	for _, sh := range cfg.Shadows {
		m.ShadowSuspicions.WithLabelValues(sh.Name) // a series from the start, at 0
	}
	m.registerVerifier(c.verifier, c.unknownHB.Load)
	m.registerMembership(c.membershipState)
	m.registerOwed(c.owed.count)
	c.setView()
	return c, nil
}

func (c *Cluster) addPeer(id, addr string) {
	d, _ := fdetect.New(c.cfg.Detector, int64(c.cfg.Period), c.cfg.DetectorArgs)
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		c.log.Warn("peer address", "peer", id, "addr", addr, "err", err)
	}
	now := time.Now()
	c.peers[id] = &Peer{ID: id, Addr: addr, udp: udp, det: d, shadows: c.newShadows(), replica: c.newReplica(""), added: now, returnedAt: now}
	c.owed.known(id) // in the table again: its owed purges are kept as long as it is
	c.metrics.peerUp(id, false)
}

// Router returns the routing view.
func (c *Cluster) Router() *routing.Router { return c.router }

// setView rebuilds the ring from self plus trusted members.
func (c *Cluster) setView() {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	c.mu.Lock()
	members := []routing.Member{{ID: c.cfg.NodeID}}
	all := []string{c.cfg.NodeID}
	suspected := 0
	for _, p := range c.peers {
		if !p.member {
			continue
		}
		all = append(all, p.ID)
		if p.trusted {
			// A peer owed purges stays out of this node's routing view
			// until it has them: asked for a page it should have purged,
			// it would hand it back (a review's
			// TestTheOwingNodeDoesNotCopyAPurgedPageFromTheReturningPeer).
			if c.owed.owedTo(p.ID) == 0 {
				members = append(members, routing.Member{ID: p.ID})
			}
		} else if p.seen {
			suspected++ // heard before, suspected since (reroute.go)
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

// Run serves heartbeats and membership until ctx ends: send every period,
// receive, check every monitored peer's freshness point four times a
// period, and run memberlist on the same socket (membership.go).
func (c *Cluster) Run(ctx context.Context, conn wire.PacketConn) error {
	sentP, sentB := c.metrics.HeartbeatPackets.WithLabelValues("sent"), c.metrics.HeartbeatBytes.WithLabelValues("sent")
	recvP, recvB := c.metrics.HeartbeatPackets.WithLabelValues("received"), c.metrics.HeartbeatBytes.WithLabelValues("received")
	s := &wire.Sender{Node: c.cfg.NodeID, Incarnation: c.incarnation, Secret: c.cfg.Secret, Period: c.cfg.Period, Fill: c.fillHeartbeat,
		Refused: func(target string, err error) {
			c.warnOnce("encode "+target, "no heartbeat can be sent to this peer", "peer", target, "err", err)
		},
		Sent: func(n int) { sentP.Inc(); sentB.Add(float64(n)) }}
	c.transport.setConn(conn)
	defer func() { _ = c.transport.Shutdown() }()
	c.mu.Lock()
	c.probeConn = conn
	c.mu.Unlock()
	// The first part to fail (membership that cannot start, a socket
	// error) stops the others, so that Run returns it at once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	c.runCtx = ctx
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.runCtx = nil // no check starts after this
		c.mu.Unlock()
		cancel()
		c.moveChecks.Wait() // their dials end with ctx
	}()
	errc := make(chan error, 5)
	go func() { errc <- s.Run(ctx, conn, c.targets) }()
	go func() {
		errc <- wire.ReceiveShared(ctx, conn, c.verifier, c.received, func(n int) { recvP.Inc(); recvB.Add(float64(n)) }, c.heartbeatRejected, c.transport.offer)
	}()
	go func() { errc <- c.monitor(ctx) }()
	go func() { errc <- c.runMembership(ctx) }()
	go func() { c.askLoop(ctx); errc <- nil }() // peers heard again after a silence, asked for what they owe (owedpull.go)
	var first error
	for range 5 {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// targets are the peers to heartbeat this period: the monitored ones, and
// those that monitor us although we do not monitor them (a node routing
// to us), so that their detectors are fed.
func (c *Cluster) targets() map[string]*net.UDPAddr {
	c.mu.Lock()
	now := time.Now()
	viewChanged := c.updateMonitored(now)
	out := make(map[string]*net.UDPAddr, len(c.peers))
	for id, p := range c.peers {
		watched := now.Sub(p.watchedAt) < 3*c.cfg.Period
		if !p.monitored && !watched {
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
	c.mu.Unlock()
	if viewChanged {
		c.setView()
	}
	return out
}

// fillHeartbeat adds our indicator state and the echo for target.
func (c *Cluster) fillHeartbeat(target string, h *wire.Heartbeat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.Epoch = c.advEpoch
	h.Region = c.cfg.Region
	h.FPR, h.FNR = c.filter.Estimates()
	p := c.peers[target]
	if p == nil {
		return
	}
	h.Monitors = p.monitored
	if p.lastSeqIn > 0 {
		h.EchoSeq, h.EchoSendNs = p.lastSeqIn, p.lastSend
		// Not below 0 if the wall clock stepped back since: the peer
		// refuses a negative hold (wire.Encode would not send it).
		h.EchoHoldNs = max(0, time.Now().UnixNano()-p.recvAt)
	}
	p.noteSent(h.Seq, h.SendNs)
}

// received handles an accepted heartbeat. It logs only after releasing
// c.mu: a log write can block (a full pipe, a slow journal), and the
// heartbeat sender needs c.mu, so a stuck stderr must not silence the node.
func (c *Cluster) received(r wire.Received) {
	c.checkIDConflict(r.Heartbeat, r.From)
	if r.Probe != wire.NotProbe {
		c.probeReceived(r)
		return
	}
	var restarted bool
	var held []suspicion // suspicions the on-time heartbeat released, reported after c.mu
	defer func() {
		if len(held) > 0 {
			c.reportSuspicions(held, c.LocalDelay())
		}
		if restarted {
			c.log.Info("peer restarted", "peer", r.Node)
		}
	}()
	p := c.lockPeer(r.Node)
	if p == nil {
		return
	}
	recv := time.Unix(0, r.RecvNs)
	onTime := r.Incarnation == p.incarnation && c.arrivedOnTime(p, r.Seq, recv)
	if r.Incarnation != p.incarnation {
		// A restart: a fresh detector, so the old history does not count.
		restarted = p.seen
		if restarted {
			p.returnedAt = time.Now() // its disk tier may hold pages purged while it was down (returned.go)
		}
		p.incarnation = r.Incarnation
		p.newestSeq, p.newestAt = 0, time.Time{}
		p.quickLoss, p.lossSeq = 0, 0
		p.recvBits, p.recvFrom, p.lossAt = 0, 0, time.Time{}
		p.echoLost, p.echoLostAt = 0, time.Time{}
		p.sent, p.sentNext = [sentRing]sentBeat{}, 0
		p.det, _ = fdetect.New(c.cfg.Detector, int64(c.cfg.Period), c.cfg.DetectorArgs)
		p.shadows = c.newShadows()
		p.epochSeen = 0
		c.replaceReplica(p)
	}
	if !restarted && p.seen && p.member && time.Unix(0, r.RecvNs).Sub(p.lastRecv) >= c.refuteAfter {
		// The link to p was down (or one of us did not run) long enough
		// for p's memberlist to suspect this node, and the few gossips of
		// that may all have gone while it was: refute now (refuteLoop)
		// rather than be declared dead later. Each side of a cut does
		// this, since each may suspect the other: refuting only when
		// most peers fell silent together (this node the island) left the
		// island's suspicions of the others to kill them
		// (TestFlappingNodeIsNotDeclaredDead counts every removal).
		c.wantRefute()
		// And p may owe this node purges it missed meanwhile: asked
		// now, not when p trusts it again (owedpull.go).
		c.wantOwedFrom(p.ID, askAfterSilence)
	}
	p.det.Observe(r.Seq, r.RecvNs)
	c.probeHeartbeat(p)
	c.noteQuickLoss(p, r.Seq, recv)
	c.noteEcho(p, r.Heartbeat, recv)
	observeShadows(p, r.Seq, r.RecvNs, time.Unix(0, r.RecvNs))
	p.seen, p.lastRecv, p.lastSeqIn, p.lastSend, p.recvAt = true, recv, r.Seq, r.SendNs, r.RecvNs
	p.held = false
	if r.Monitors {
		p.watchedAt = p.lastRecv
	}
	if rtt, ok := wire.RTT(r.Heartbeat, r.RecvNs); ok {
		s := rtt.Seconds()
		if p.rtt == 0 {
			p.rtt = s
		} else {
			p.rtt += 0.1 * (s - p.rtt)
		}
		p.noteRTT(rtt)
		c.metrics.PeerRTT.WithLabelValues(p.ID).Set(p.rtt)
	}
	p.replica.SetEstimates(r.FPR, r.FNR)
	if r.Region == "" || ValidRegion(r.Region) {
		c.setRegion(p, r.Region)
	} else {
		// The heartbeat is authenticated, so this is another build or a
		// broken member; its region would become a map key and a metric
		// label (membership metadata refuses the same).
		c.warnOnce("region "+p.ID, "a peer's heartbeats carry a region that is not a region label: it is ignored",
			"peer", p.ID, "remedy", "run the same edge release on every node, with a valid cluster.region")
	}
	// A departed peer's indicator is not pulled: it is not asked for
	// pages, and a pull in flight when it is forgotten would count it
	// again in a series nothing deletes (a review's test).
	needPull := p.member && r.Epoch > p.epochSeen
	p.heard = true
	viewChanged := false
	// A heartbeat's source shows where p answers (heartbeats are signed,
	// and a replay is refused, before they get here): at the address it
	// advertises, a move to follow; at its configured address while this
	// node follows it elsewhere, a return (a review's
	// TestS23AFollowedMoveIsUndoneWhenThePeerAnswersAtItsConfiguredAddress).
	var movedFrom, backFrom string
	if p.configuredByIP && r.From != nil {
		switch from := r.From.String(); {
		case p.movedTo != "" && from == p.movedTo:
			movedFrom = c.followMove(p)
		case p.Addr != p.configuredAddr && from == p.configuredAddr:
			backFrom = c.returnToConfigured(p)
		}
	}
	var suspectedFor time.Duration // > 0: this heartbeat ends a suspicion, logged as its start was
	if p.member && (p.monitored || !p.trusted) {
		// A heartbeat clears this node's suspicion at once; an unmonitored
		// peer is trusted by membership, which a heartbeat confirms.
		if !p.trusted {
			c.settleReroutes(p, restarted)
			if !p.suspectedAt.IsZero() {
				suspectedFor = max(recv.Sub(p.suspectedAt), time.Nanosecond)
			}
		}
		viewChanged = c.setTrust(p, true)
	}
	c.armDeadline(p, recv)
	if onTime {
		held = c.rejudgeHeld(p, recv)
	}
	c.mu.Unlock()
	if movedFrom != "" {
		c.warnMove(r.Node, movedFrom, r.From.String())
	}
	if backFrom != "" {
		c.warnOnce("back "+r.Node, "a peer this node followed to another address answers at its configured address again: reached there",
			"peer", r.Node, "from", backFrom, "to", r.From.String())
	}
	if suspectedFor > 0 {
		// Without it the log read as if a suspected peer stayed down (an
		// operator's walk-through: two "peer suspected" lines on a busy
		// machine, every peer up on the metrics).
		c.log.Info("peer trusted again", "self", c.cfg.NodeID, "peer", r.Node, "suspected_for", suspectedFor.Round(time.Millisecond))
	}
	if viewChanged {
		c.setView()
	}
	if needPull {
		go c.pullIndicator(p, r.Epoch)
	}
}

// lockPeer locks c.mu and returns the peer that sent an accepted packet,
// or, for a node that is not a member (yet: membership comes from
// memberlist and the configuration, not from heartbeats), counts the
// packet and returns nil with c.mu released.
func (c *Cluster) lockPeer(node string) *Peer {
	c.mu.Lock()
	p := c.peers[node]
	if p == nil {
		c.mu.Unlock()
		c.unknownHB.Add(1)
	}
	return p
}

func appendHistory(h []Transition, t Transition) []Transition {
	h = append(h, t)
	if len(h) > 20 {
		h = h[len(h)-20:]
	}
	return h
}

// monitor runs the periodic part of failure detection: it measures this
// process's own scheduling delay (a stall of ours must not be blamed on a
// peer), refreshes the gauges, and sweeps every peer as a safety net. A
// suspicion itself comes from each monitored peer's deadline timer
// (armDeadline), which fires at the peer's freshness point only if no
// heartbeat moved it on: an idle node wakes at the ticker's rate, not four
// times a period for every check. With shadow detectors (the fault lab)
// the ticker runs four times a period, since shadows are polled.
func (c *Cluster) monitor(ctx context.Context) error {
	tick := c.cfg.Period
	if len(c.cfg.Shadows) > 0 {
		tick = c.cfg.Period / 4
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	defer c.stopDeadlines()
	last := time.Now()
	// Our own delays count for a few periods: a heartbeat held up in our
	// socket buffer arrives late by that much, and the next one may too.
	watch := newSchedWatch(4*c.cfg.Period, !c.cfg.runQueueBlind)
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
			if lag > tick+c.stallAfter() {
				c.noteStall(now)
				continue
			}
			c.check(now, local)
			c.advertiseIfDue(now)
			c.redeliverPurges(ctx, now)
			if rounds++; rounds%max(1, int(6400*time.Millisecond/tick)) == 0 {
				c.checkUnreached(now)
				c.forgetDeparted(now)
			}
		}
	}
}

// stallAfter is how late this process may run (a ticker round, a deadline
// timer) before it counts as its own stall: three quarters of a period,
// what the four-checks-a-period loop allowed (three of its ticks).
func (c *Cluster) stallAfter() time.Duration { return 3 * c.cfg.Period / 4 }

// noteStall records that this process stalled at now: for two periods
// after it nobody is suspected, so that the heartbeats that waited in our
// socket buffer are read first.
func (c *Cluster) noteStall(now time.Time) {
	c.metrics.LocalStalls.Inc()
	c.mu.Lock()
	c.stalled = now
	c.mu.Unlock()
}

// inGrace reports whether now is within two periods of our last stall.
// c.mu must be held.
func (c *Cluster) inGrace(now time.Time) bool {
	return !c.stalled.IsZero() && now.Sub(c.stalled) < 2*c.cfg.Period
}

// check sweeps every peer: shadows are polled, and a monitored peer whose
// freshness point, moved on by local (how late this process itself has
// been running lately), has passed is suspected (its deadline timer
// normally got there first).
func (c *Cluster) check(now time.Time, local time.Duration) {
	var suspected []suspicion // logged after c.mu is released (see received)
	c.mu.Lock()
	grace := c.inGrace(now)
	if now.Sub(c.exportedAt) >= gaugeInterval {
		c.exportedAt = now
		c.exportPeerGauges(now)
	}
	for _, p := range c.peers {
		if p.seen && !grace && !c.holds(p, now) {
			// A held suspicion is held for the shadows too: the hold is
			// the node's, not a detector's, so they compare alike.
			c.checkShadows(p, now, c.localShift(p, now, local))
		}
		if s, ok := c.judge(p, now, local, grace); ok {
			suspected = append(suspected, s)
		}
	}
	c.mu.Unlock()
	c.reportSuspicions(suspected, local)
}

// judge suspects p if it is monitored, trusted, and its freshness point
// (or, never heard since it became monitored, its silentGrace) passed.
// c.mu must be held.
func (c *Cluster) judge(p *Peer, now time.Time, local time.Duration, grace bool) (suspicion, bool) {
	p.held = false // held again below if it still is
	if !p.trusted || grace || !p.monitored {
		return suspicion{}, false
	}
	// A peer that became monitored trusted (by membership) and has not
	// been heard since is given silentGrace, once.
	neverHeard := !p.heard && !p.judgedSilent && now.Sub(p.monitoredSince) > c.silentGrace()
	if !p.heard && !neverHeard {
		return suspicion{}, false
	}
	if !neverHeard && !c.silent(p, now, local) {
		c.noteDeferred(p, now, local)
		return suspicion{}, false
	}
	if !neverHeard && c.holds(p, now) {
		p.held = true
		if !p.heldFor.Equal(p.lastRecv) { // counted once per silence
			p.heldFor = p.lastRecv
			c.countHeld()
		}
		return suspicion{}, false
	}
	if !neverHeard && c.awaitConfirm(p, now, local) {
		return suspicion{}, false
	}
	p.judgedSilent = true
	c.setTrust(p, false)
	silentFor := now.Sub(p.monitoredSince)
	if p.seen && !neverHeard {
		silentFor = now.Sub(p.lastRecv)
		c.metrics.DetectionTime.Observe(silentFor.Seconds())
	}
	return suspicion{p.ID, silentFor}, true
}

// reportSuspicions logs the suspicions of one round and rebuilds the view.
func (c *Cluster) reportSuspicions(s []suspicion, local time.Duration) {
	for _, x := range s {
		c.log.Warn("peer suspected", "self", c.cfg.NodeID, "peer", x.peer, "silent_for", x.silent.Round(time.Millisecond), "local_delay", local.Round(time.Millisecond))
	}
	if len(s) > 0 {
		c.setView()
	}
}

// maxDeadline bounds how far ahead a deadline timer is set (a detector
// still learning may name a far freshness point): the ticker's sweep
// covers the rest.
const maxDeadline = time.Minute

// armDeadline sets p's timer to the moment judge could first suspect it:
// its freshness point moved on by this process's recent delay, or the end
// of its silentGrace. c.mu must be held.
func (c *Cluster) armDeadline(p *Peer, now time.Time) {
	if !p.monitored || !p.trusted {
		return
	}
	local := time.Duration(c.local.Load())
	at := p.monitoredSince.Add(c.silentGrace())
	if p.heard {
		at = c.freshnessPoint(p, now, local)
	}
	if p.held {
		// Re-judged when a heartbeat comes on time (rejudgeHeld), or when
		// the hold ends.
		at = p.lastRecv.Add(c.cfg.Period + c.holdCap())
	}
	if !p.held && p.probeUntil.After(now) {
		// A probe waits for its answer, which would move the point on
		// (confirm.go). Past its wait, the point as it is: judge then
		// counts the probe unanswered. Held, the hold's time: a probe
		// that expired while held must not re-arm the timer at once.
		at = p.probeUntil
	}
	if end := c.stalled.Add(2 * c.cfg.Period); c.inGrace(now) && at.Before(end) {
		at = end
	}
	// A millisecond past the point: the detectors suspect strictly after
	// it, and a timer that fired exactly on it would be set again for now.
	d := min(max(at.Sub(now)+time.Millisecond, time.Millisecond), maxDeadline)
	p.deadline = now.Add(d)
	if p.timer == nil {
		p.timer = time.AfterFunc(d, func() { c.fire(p) })
		return
	}
	p.timer.Reset(d)
}

// fire is p's deadline timer. A timer that runs much later than it was
// set for means this process stalled (a pause, SIGSTOP): that is noted
// as our stall, not p's silence.
func (c *Cluster) fire(p *Peer) {
	now := time.Now()
	local := time.Duration(c.local.Load())
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	late := now.Sub(p.deadline)
	if late > c.stallAfter() {
		c.mu.Unlock()
		c.noteStall(now)
		c.mu.Lock()
	} else {
		local = max(local, late)
	}
	s, ok := c.judge(p, now, local, c.inGrace(now))
	if !ok {
		c.armDeadline(p, now) // moved on by a heartbeat, our delay, or a grace
	}
	c.mu.Unlock()
	if ok {
		c.reportSuspicions([]suspicion{s}, local)
	}
}

// stopDeadlines stops every deadline timer as the cluster stops.
func (c *Cluster) stopDeadlines() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for _, p := range c.peers {
		if p.timer != nil {
			p.timer.Stop()
		}
	}
}

// gaugeInterval is how often the per-peer gauges (detector margin, loss,
// indicator estimates and replica age) are refreshed: a scrape every few
// seconds reads them, and refreshing them at every check (four times a
// period, for every peer) was measured as most of an idle node's CPU at
// 25 nodes.
const gaugeInterval = time.Second

// exportPeerGauges sets every peer's gauges. c.mu must be held.
func (c *Cluster) exportPeerGauges(now time.Time) {
	c.metrics.NetworkLoss.Set(c.networkLoss(now))
	c.exportPools()
	for _, p := range c.peers {
		if m, ok := p.det.(fdetect.Margined); ok {
			c.metrics.FDMargin.WithLabelValues(p.ID).Set(float64(m.Margin()) / 1e9)
		}
		if la, ok := p.det.(*fdetect.LossAware); ok {
			c.metrics.HeartbeatLoss.WithLabelValues(p.ID).Set(la.LostShare())
		}
		e := p.replica.Exclusion()
		he := p.replica.HomeExclusion()
		rate, outcomes := p.replica.NegativeHitRate()
		for _, g := range [...]struct {
			name string
			v    float64
		}{{"fpr", e.FPR}, {"fnr", e.FNR}, {"pi", e.Pi}, {"nu", e.Nu}, {"q", e.Q}, {"home_nu", he.Nu}, {"home_q", he.Q}, {"nu_calibration", p.replica.Calibration()}, {"home_negative_hit_rate", rate}, {"home_negative_outcomes", outcomes}} {
			c.metrics.IndicatorEstimates.WithLabelValues(p.ID, g.name).Set(g.v)
		}
		c.metrics.ReplicaEpoch.WithLabelValues(p.ID).Set(float64(p.replica.Epoch()))
		if !p.pulledAt.IsZero() {
			c.metrics.ReplicaAge.WithLabelValues(p.ID).Set(now.Sub(p.pulledAt).Seconds())
		}
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
	return fdetect.Suspect(p.det, now.Add(-c.localShift(p, now, local)).UnixNano())
}

// localShift is how far p's freshness points move on for this process's
// own delays (see silent), and for the loss most links show at once
// (networkloss.go). c.mu is held.
func (c *Cluster) localShift(p *Peer, now time.Time, local time.Duration) time.Duration {
	return c.ownShift(p, local) + c.networkLossShift(p, now) + p.probeShift
}

// freshnessPoint is p's freshness point moved on by localShift: where
// judge could first suspect it. c.mu is held.
func (c *Cluster) freshnessPoint(p *Peer, now time.Time, local time.Duration) time.Time {
	return time.Unix(0, p.det.Freshness()).Add(c.localShift(p, now, local))
}

// ownShift is localShift without the network's loss: this process's own
// delays and stalls, and the end of a silence every peer shared. c.mu is
// held.
func (c *Cluster) ownShift(p *Peer, local time.Duration) time.Duration {
	shift := local
	if !c.stalled.IsZero() && p.lastRecv.Before(c.stalled) {
		shift = max(shift, c.stalled.Sub(p.lastRecv))
	}
	return max(shift, c.recoveryShift(p))
}

// LocalDelay is this process's worst recent scheduling delay, which the
// monitor adds to every freshness point before suspecting.
func (c *Cluster) LocalDelay() time.Duration { return time.Duration(c.local.Load()) }

// MonitoringState says how this node watches its peers, for the status page.
type MonitoringState struct {
	Mode      string `json:"mode"`      // all or subset (auto resolved)
	Monitored int    `json:"monitored"` // peers it heartbeats
	Members   int    `json:"members"`   // members, self included
	// Membership is memberlist's view: running, its members (alive,
	// suspect, dead or left as it counts them), its health score (0 is
	// healthy; Lifeguard raises it when this node misses its own probes),
	// and the encryption keys installed.
	Membership MembershipState `json:"membership"`
}

// Monitoring returns how this node watches its peers.
func (c *Cluster) Monitoring() MonitoringState {
	st := MonitoringState{Mode: "all", Membership: c.membershipState()}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Members = c.memberCount
	if c.subset {
		st.Mode = "subset"
	}
	for _, p := range c.peers {
		if p.monitored {
			st.Monitored++
		}
	}
	return st
}

// PeerState is a read-only snapshot of a peer for status and metrics.
type PeerState struct {
	ID           string  `json:"id"`
	Addr         string  `json:"addr"`
	Member       bool    `json:"member"`    // in the membership (the ring): configured, or alive in memberlist
	Trusted      bool    `json:"trusted"`   // in this node's routing view
	Monitored    bool    `json:"monitored"` // this node heartbeats it (else trusted by membership)
	Region       string  `json:"region,omitempty"`
	LastSeenAgoS float64 `json:"last_heartbeat_ago_s"`
	RTTms        float64 `json:"rtt_ms"`
	MarginMs     float64 `json:"fd_margin_ms"`
	LossRatio    float64 `json:"heartbeat_loss"` // estimated by the loss-aware margin
	Suspicions   uint64  `json:"suspicions"`
	// OwedPurges are the purges it did not take when they went round,
	// delivered when this node trusts it again (purgeowed.go).
	OwedPurges int `json:"owed_purges"`
	// Rerouted are requests whose page's home was this peer, sent to the
	// next home while this node suspected it; ReroutedWrongly those of
	// suspicions that turned out wrong (the peer was heard again from the
	// same process).
	Rerouted        uint64 `json:"rerouted_requests"`
	ReroutedWrongly uint64 `json:"rerouted_requests_wrongly"`
	// SuspectEnded and SuspectStreaming are the requests open to it when
	// this node suspected it: ended before their header (failed over), or
	// left streaming while their bytes flowed.
	SuspectEnded     uint64               `json:"suspected_requests_ended"`
	SuspectStreaming uint64               `json:"suspected_requests_streaming"`
	Epoch            uint64               `json:"indicator_epoch"`
	ReplicaAgeS      float64              `json:"indicator_age_s,omitempty"` // absent: no indicator pulled from the peer yet (it has advertised none)
	Exclusion        indicators.Exclusion `json:"estimates"`
	// HomeExclusion is the estimates over the pages homed at the peer
	// (fna-home, fna-learned), NegativeProbes and NegativeHits the probes
	// sent despite a negative indication and how many hit, and
	// Calibration the ratio of those hits to the hits the derived ν
	// predicted for the peer's own pages (1 before any).
	HomeExclusion  indicators.Exclusion `json:"home_estimates"`
	NegativeProbes uint64               `json:"negative_probes"`
	NegativeHits   uint64               `json:"negative_probe_hits"`
	Calibration    float64              `json:"nu_calibration"`
	// NegativeHitRate is fna-rate's estimate: the hit rate of the recent
	// negative probes for the peer's own pages (faded, over about
	// NegativeOutcomes of them).
	NegativeHitRate  float64      `json:"home_negative_hit_rate"`
	NegativeOutcomes float64      `json:"home_negative_outcomes"`
	History          []Transition `json:"history"`
	// Shadows are the transitions of each shadow detector (Config.Shadows).
	Shadows map[string][]Transition `json:"shadows,omitempty"`
}

// Peers returns a snapshot of every peer, sorted by id.
func (c *Cluster) Peers() []PeerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PeerState, 0, len(c.peers))
	for _, p := range c.peers {
		s := PeerState{ID: p.ID, Addr: p.Addr, Member: p.member, Trusted: p.trusted, Monitored: p.monitored, Region: p.region, RTTms: p.rtt * 1000, Suspicions: p.suspicions,
			Rerouted: p.reroutedAll, ReroutedWrongly: p.reroutedWrongly, SuspectEnded: p.suspectEnded, SuspectStreaming: p.suspectStreaming,
			Epoch: p.replica.Epoch(), Exclusion: p.replica.Exclusion(), HomeExclusion: p.replica.HomeExclusion(),
			NegativeProbes: p.negProbes.Load(), NegativeHits: p.negHits.Load(), Calibration: p.replica.Calibration(), History: slices.Clone(p.history), Shadows: shadowHistories(p)}
		s.NegativeHitRate, s.NegativeOutcomes = p.replica.NegativeHitRate()
		s.OwedPurges = c.owed.owedTo(p.ID)
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
			s.LossRatio = la.LostShare()
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

// newReplica returns an empty indicator replica for a peer of region that
// learns with the region's other replicas. c.mu must be held.
func (c *Cluster) newReplica(region string) *indicators.Replica {
	r := &indicators.Replica{}
	r.SharePool(c.poolFor(region))
	return r
}

// replaceReplica gives a restarted peer a new replica: what the old one
// held, its calibration share in the pool included, describes the old
// process. c.mu must be held.
func (c *Cluster) replaceReplica(p *Peer) {
	p.replica.SharePool(nil)
	p.replica = &indicators.Replica{}
	if p.member { // a departed peer's stays out of the region's prior (memberDown)
		p.replica.SharePool(c.poolFor(p.region))
	}
}

// poolFor returns region's calibration pool. One per region, not one per
// node: the ring spreads pages over a region's peers alike, so what the
// negatives of one showed speaks for the others, while another region's
// need not (a crowd may lag into one region and not into another), and a
// pool over both would keep this node from trying the region whose
// negatives pay. c.mu must be held.
func (c *Cluster) poolFor(region string) *indicators.CalibrationPool {
	if c.calPools == nil {
		c.calPools = map[string]*indicators.CalibrationPool{}
	}
	pool := c.calPools[region]
	if pool == nil {
		pool = &indicators.CalibrationPool{}
		c.calPools[region] = pool
	}
	return pool
}

// setRegion records the region a peer reports and moves its replica to that
// region's pool. c.mu must be held.
func (c *Cluster) setRegion(p *Peer, region string) {
	if p.region == region {
		return
	}
	p.region = region
	if p.member { // a departed peer's stays out of the region's prior (memberDown)
		p.replica.SharePool(c.poolFor(region))
	}
}

// exportPools drops the pools of regions no peer is in any more (a renamed
// region) with their metric series, and, with fna-learned, sets the
// others' gauges: the label set is bounded by the peers' regions. (A
// departed member's replica has left its pool already: memberDown.) c.mu
// must be held.
func (c *Cluster) exportPools() {
	inUse := map[string]bool{}
	for _, p := range c.peers {
		inUse[p.region] = true
	}
	for region := range c.calPools {
		if !inUse[region] {
			delete(c.calPools, region)
			c.metrics.PooledCalibration.DeleteLabelValues(region)
		}
	}
	// Every home-aware policy keeps the calibration (the same outcomes
	// feed fna-learned's and fna-rate's estimates), so the series exists
	// whichever prices the probes; dashboard panel 35 shows it.
	if !c.cfg.Selection.HomeAware() {
		return
	}
	for region, pool := range c.calPools {
		c.metrics.PooledCalibration.WithLabelValues(region).Set(pool.Kappa())
	}
}
