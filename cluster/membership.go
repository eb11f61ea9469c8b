package cluster

// Membership is hashicorp/memberlist (behind Consul, Nomad and Serf): who
// is in the cluster, their metadata (region, incarnation, indicator
// epoch), joins through seeds (cluster.peers, or every address behind
// cluster.dns), and the cluster-wide, agreed decision that a node is dead
// (SWIM with indirect probes and Lifeguard's suspicion timeouts). The
// ring and trees are built over its members, so they change only when
// membership does and every node computes the same homes.
//
// Routing suspicion stays edge's own (fdetect on direct heartbeats,
// cluster.go): a suspicion takes a peer out of this node's routing view
// only, until its next heartbeat. A false local suspicion costs a few
// requests a reroute; memberlist's death is slower and agreed.
//
// The transport shares the cluster port (transport.go); the cluster
// secret is memberlist's encryption key (a keyring: keys can be added,
// made primary and removed at run time, keyring.go).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/edgecache/edge/cluster/wire"
)

// Membership timing, each with its reason.
const (
	// DefaultProbeInterval is memberlist's probe period, its LAN default.
	// A dead node is declared dead everywhere after about SuspicionMult ×
	// log10(n) of these (measured: 3.8 s at 25 nodes, 9.7 s at 100). At
	// 500 ms, 100 processes on 2 cores never converged: probes timed out
	// on the loaded machine and nodes were declared dead and rejoined
	// over and over (scripts/membership, docs/cluster.md).
	DefaultProbeInterval = time.Second
	// DefaultSuspicionMult is memberlist's LAN default: with Lifeguard's
	// confirmations a suspicion ends early when others agree.
	DefaultSuspicionMult = 4
	// pushPullInterval is how often a node exchanges its whole state
	// with a random member (memberlist scales it up beyond 32 nodes).
	// memberlist's LAN default is 30 s; a node that joined while others
	// were joining (the seed did not know them yet, and their broadcasts
	// went before it was a member) learns of them only then, so a
	// cluster started at once took up to 30 s to converge. At 5 s it costs
	// each node one exchange of about 100 bytes per member every 5 s.
	pushPullInterval = 5 * time.Second
	// joinInterval is how often seeds that are not members are tried
	// again: a node started before its seeds joins within this.
	joinInterval = 2 * time.Second
	// seedUnreachedAfter is how long a seed may stay unreached before it
	// is logged with a remedy.
	seedUnreachedAfter = 30 * time.Second
	// deadReclaim lets a node that died come back under its name from
	// another address (a rescheduled pod) this soon.
	deadReclaim = 5 * time.Second
	// leaveTimeout bounds the goodbye broadcast at shutdown.
	leaveTimeout = time.Second
)

// Node metadata (memberlist's Node.Meta, at most 512 bytes): "EM" version
// (2) | regionLen(1) region | incarnation(8) | indicator epoch(8) |
// stamp(8). Version 1, without the stamp, is still read.
const (
	metaMagic     = "EM"
	metaVersion   = 2
	metaFixed     = 2 + 1 + 1 + 8 + 8 + 8
	metaV1        = 1
	metaFixedV1   = metaFixed - 8
	metaStampSize = 8
)

// nodeMeta is what a node tells every member about itself.
type nodeMeta struct {
	Region      string
	Incarnation uint64 // changes on every restart
	Epoch       uint64 // indicator epoch: pull a new advertisement when it grows
	// Stamp is when the node made this metadata (Unix ns, its clock; 0
	// from a version 1 node): how a member not in the view tells a node's
	// announcement from a replay of an old one (freshAlive).
	Stamp int64
}

// encode writes version 2, or version 1 without a stamp (Stamp 0): what
// a node sends while a member of an earlier release, which reads only
// version 1, is in its view (NodeMeta).
func (m nodeMeta) encode() []byte {
	b := make([]byte, 0, metaFixed+len(m.Region))
	b = append(b, metaMagic...)
	if m.Stamp == 0 {
		b = append(b, metaV1, byte(len(m.Region)))
	} else {
		b = append(b, metaVersion, byte(len(m.Region)))
	}
	b = append(b, m.Region...)
	b = binary.BigEndian.AppendUint64(b, m.Incarnation)
	b = binary.BigEndian.AppendUint64(b, m.Epoch)
	if m.Stamp == 0 {
		return b
	}
	return binary.BigEndian.AppendUint64(b, uint64(m.Stamp))
}

// decodeMeta parses a member's metadata; a node of another version or a
// corrupt packet is refused with the reason.
func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	fixed := metaFixed
	switch {
	case len(b) < metaFixedV1:
		return m, fmt.Errorf("metadata of %d bytes, want at least %d", len(b), metaFixedV1)
	case string(b[:2]) != metaMagic:
		return m, errors.New("metadata is not an edge node's")
	case b[2] == metaV1:
		fixed = metaFixedV1
	case b[2] != metaVersion:
		return m, fmt.Errorf("metadata version %d, want %d", b[2], metaVersion)
	}
	n := int(b[3])
	if n > wire.MaxRegionLen || len(b) != fixed+n {
		return m, fmt.Errorf("metadata of %d bytes with a region of %d", len(b), n)
	}
	m.Region = string(b[4 : 4+n])
	if m.Region != "" && !ValidRegion(m.Region) {
		return m, fmt.Errorf("region %q is not a region label", m.Region)
	}
	m.Incarnation = binary.BigEndian.Uint64(b[4+n:])
	m.Epoch = binary.BigEndian.Uint64(b[12+n:])
	if fixed == metaFixed {
		m.Stamp = int64(binary.BigEndian.Uint64(b[20+n:]))
	}
	return m, nil
}

// Freshness of membership announcements. memberlist seals gossip with
// the cluster key (AES-GCM) but has no replay protection: a stranger on
// the path who copied a node's join stream could send it again, unchanged,
// after the node left and memberlist had dropped it (GossipToTheDeadTime,
// 30 s), and the node was a member again, on the ring and the status page,
// until probes declared it dead (a review's
// TestAReplayedJoinStreamIsRefusedOnceMemberlistForgotTheNode). Every node now stamps its
// metadata and announces it again every metaRefresh; an alive message for
// a node not in this node's view is taken only with metadata younger than
// metaFreshness. A node in the view needs no stamp: memberlist's
// incarnations already order its messages, and memberlist ignores a dead
// node's old incarnations for gossipToTheDead, longer than metaFreshness
// and the clock skew together, so no gap is left between the two.
const (
	// metaRefresh: each alive message is gossiped about 4·⌈log10(n+1)⌉
	// times, so the refreshes of n nodes cost every node about
	// 12·n/metaRefresh small sends a second at 100 nodes: 20 at 60 s
	// (measured at 30 s: 6.7 membership packets a second per node where
	// the release before sent 1.8; docs/cluster.md).
	metaRefresh = 60 * time.Second
	// metaFreshness covers a refresh, the clock skew heartbeats allow
	// (maxSkew) and ten seconds for gossip and push/pull to carry it.
	metaFreshness = metaRefresh + maxSkew + 10*time.Second
	// gossipToTheDead is memberlist's GossipToTheDeadTime (30 s by
	// default): how long it keeps a dead node, and ignores its old
	// incarnations, before forgetting it.
	gossipToTheDead = metaFreshness + maxSkew + 5*time.Second
)

// freshAlive reports why an alive message for a node not in the view is
// refused, or nil: its metadata older than metaFreshness is a replay (or
// its clock is behind by more than heartbeats allow).
func (c *Cluster) freshAlive(n *memberlist.Node, now time.Time) error {
	if n.Name == c.cfg.NodeID || c.mlView.has(n.Name) {
		return nil
	}
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		return nil // refused with its reason by memberUp
	}
	if meta.Stamp == 0 {
		// Version 1. A node of an earlier release (it reads no more:
		// DMax below metaVersion) is taken, or no rolling upgrade could
		// start. A node of this release sends version 1 only while a
		// member of an earlier release is in its view; once none is in
		// this node's either, an unstamped announcement of it is a
		// replay of one made during an upgrade (a review's
		// TestS23AReplayedVersion1AnnouncementIsRefusedOnceEveryMemberReadsVersion2).
		if n.DMax >= metaVersion && c.mlView.allRead(metaVersion) {
			c.metrics.GossipRejected.WithLabelValues("stale").Inc()
			return fmt.Errorf("%s: its metadata carries no stamp, and no member of an earlier release is in the view (a replay): %w", n.Name, errStaleAlive)
		}
		return nil
	}
	if age := now.Sub(time.Unix(0, meta.Stamp)); age > metaFreshness {
		c.metrics.GossipRejected.WithLabelValues("stale").Inc()
		return fmt.Errorf("%s: its metadata is %s old (a replay, or its clock is behind): %w", n.Name, age.Round(time.Second), errStaleAlive)
	} else if age < -maxSkew {
		// A stamp from the future stays "fresh" for as long as it is
		// ahead, so a node whose clock ran ahead could have its join
		// replayed for that long after it left (a hostile review); its
		// heartbeats are refused on the same bound.
		c.metrics.GossipRejected.WithLabelValues("stale").Inc()
		return fmt.Errorf("%s: its metadata is stamped %s ahead of this node's clock (at most %s allowed; synchronise the clocks): %w", n.Name, (-age).Round(time.Second), maxSkew, errStaleAlive)
	}
	return nil
}

// errStaleAlive marks freshAlive's refusals in memberlist's log line.
var errStaleAlive = errors.New("stale announcement")

// ValidRegion reports whether s is a region label: 1 to
// wire.MaxRegionLen lower-case letters, digits, '.', '_' and '-',
// starting with a letter or digit. cluster.region, cluster.region_costs
// and membership metadata all hold to it.
func ValidRegion(s string) bool {
	if s == "" || len(s) > wire.MaxRegionLen {
		return false
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
			return false
		}
	}
	return true
}

// membership is the running memberlist and what the cluster keeps of it.
type membership struct {
	ml      *memberlist.Memberlist
	joined  atomic.Bool          // the startup membership was logged
	seedsAt map[string]time.Time // seed address → when first tried, unreached since
	// The addresses behind cluster.dns, and when they were resolved
	// (used only by runMembership's goroutine).
	dnsSeeds []string
	dnsAt    time.Time
	// When the configured peers' host names were last re-resolved.
	peersAt time.Time
}

// mlDelegate answers memberlist's callbacks. They run under memberlist's
// own locks: they take c.mu only briefly and never call memberlist back.
type mlDelegate struct{ c *Cluster }

func (d mlDelegate) NodeMeta(limit int) []byte {
	m := nodeMeta{Region: d.c.cfg.Region, Incarnation: d.c.incarnation, Epoch: d.c.metaEpoch.Load()}
	if d.c.mlView.allRead(metaVersion) {
		m.Stamp = time.Now().UnixNano()
	}
	b := m.encode()
	if len(b) > limit {
		return nil
	}
	return b
}
func (mlDelegate) NotifyMsg([]byte)                           {}
func (mlDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (mlDelegate) LocalState(join bool) []byte                { return nil }
func (mlDelegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyAlive refuses replayed announcements (freshAlive).
func (d mlDelegate) NotifyAlive(n *memberlist.Node) error { return d.c.freshAlive(n, time.Now()) }

func (d mlDelegate) NotifyJoin(n *memberlist.Node) {
	d.c.mlView.set(n)
	d.c.memberUp(n, "join")
}

func (d mlDelegate) NotifyUpdate(n *memberlist.Node) {
	old, had := d.c.mlView.get(n.Name)
	d.c.mlView.set(n)
	if had && old.addr == n.Address() && sameButStamp(old.meta, n.Meta) {
		// A refresh (publishMeta): nothing memberUp reads changed, and
		// taking c.mu for it under memberlist's lock, for every member
		// every metaRefresh, is work the probes wait behind.
		return
	}
	d.c.memberUp(n, "update")
}

// sameButStamp reports whether two metadata differ at most in their stamp.
func sameButStamp(a, b []byte) bool {
	ma, errA := decodeMeta(a)
	mb, errB := decodeMeta(b)
	if errA != nil || errB != nil {
		return false
	}
	ma.Stamp, mb.Stamp = 0, 0
	return ma == mb
}

func (d mlDelegate) NotifyLeave(n *memberlist.Node) {
	d.c.mlView.remove(n.Name)
	d.c.memberDown(n)
}

// memberView is memberlist's members (alive or suspect, this node
// included) as its events report them. memberlist's Members() hands out
// pointers to the nodes it rewrites under its own lock (every alive
// message with a new incarnation sets a node's address fields again), so
// reading them outside its callbacks is a data race; its callbacks run
// under that lock, and copy what they are given here.
type memberView struct {
	mu      sync.Mutex
	members map[string]viewMember
}

type viewMember struct {
	addr string
	meta []byte
	// reads is the highest metadata version the member reads: memberlist's
	// delegate protocol maximum (DMax), 0 from a release before version 2.
	reads uint8
}

func (v *memberView) set(n *memberlist.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.members == nil {
		v.members = map[string]viewMember{}
	}
	v.members[n.Name] = viewMember{addr: n.Address(), meta: bytes.Clone(n.Meta), reads: n.DMax}
}

// allRead reports whether every member in the view reads metadata of
// version: a rolling upgrade from a release that reads only version 1
// keeps sending version 1 until the last such member is gone (a review's
// TestS22AnUpgradedNodesMetadataIsReadByThePreviousRelease). This node's
// own entry counts too, and says yes (NodeMeta is asked before it is in).
func (v *memberView) allRead(version uint8) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, m := range v.members {
		if m.reads < version {
			return false
		}
	}
	return true
}

func (v *memberView) get(name string) (viewMember, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m, ok := v.members[name]
	return m, ok
}

func (v *memberView) has(name string) bool {
	_, ok := v.get(name)
	return ok
}

func (v *memberView) remove(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.members, name)
}

// snapshot is a copy of the members by name.
func (v *memberView) snapshot() map[string]viewMember {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.members)
}

func (d mlDelegate) NotifyConflict(existing, other *memberlist.Node) {
	d.c.metrics.MembershipEvents.WithLabelValues("conflict").Inc()
	d.c.warnOnce("conflict "+other.Address(), "another node joins with this cluster member's node id from another address: the two cannot both be members",
		"node", existing.Name, "member", existing.Address(), "other", other.Address(), "remedy", "give every node its own node_id")
}

// memberUp records a member memberlist reports alive (joined, or its
// metadata changed).
func (c *Cluster) memberUp(n *memberlist.Node, event string) {
	if n.Name == c.cfg.NodeID {
		return
	}
	if !wire.ValidID(n.Name) {
		// No heartbeat can name it (wire.MaxIDLen); left out of the ring.
		c.metrics.MembershipEvents.WithLabelValues("refused").Inc()
		c.warnOnce("id "+n.Address(), "a member's name is longer than a node id may be, and is left out of the ring",
			"node", n.Name, "addr", n.Address(), "remedy", fmt.Sprintf("node_id: at most %d bytes", wire.MaxIDLen))
		return
	}
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		c.metrics.MembershipEvents.WithLabelValues("refused").Inc()
		c.warnOnce("meta "+n.Address(), "a member's metadata is not understood: it is not an edge node of this version, and is left out of the ring",
			"node", n.Name, "addr", n.Address(), "err", err, "remedy", "run the same edge release on every node of one cluster")
		return
	}
	c.metrics.MembershipEvents.WithLabelValues(event).Inc()
	addr := n.Address()
	var pull uint64
	c.mu.Lock()
	p := c.peers[n.Name]
	learnt := p == nil
	if p == nil {
		c.addPeer(n.Name, addr)
		p = c.peers[n.Name]
	} else if p.Addr != addr && !p.configured {
		// A member found through membership moves with it (a restart on
		// a new address). A configured peer keeps the operator's
		// address: it may be a relay, tunnel or proxy in front of the
		// address the peer advertises, and heartbeats and peer requests
		// must take the path the operator chose.
		p.reachAt(addr)
	}
	if p.configured && p.configuredByIP {
		// A peer configured by host name is not redirected: its name is
		// how it moves (a rescheduled pod), and memberlist follows a move
		// by the address the node advertises, where a path fixed to what
		// the name resolved to would keep probing its old address.
		p.advertised = addr
		switch {
		case addr == p.configuredAddr:
			p.advertisedConfigured = true
			p.forgetMove()
			if p.Addr != addr { // back where cluster.peers says it is
				p.reachAt(addr)
			}
		case !p.advertisedConfigured:
			// It never advertised its configured address: a relay,
			// tunnel or proxy stands in front of it, the path the
			// operator chose.
		case addr == p.Addr:
			p.movedTo = "" // followed already
		case p.movedTo == addr && (p.moveChecking || time.Since(p.moveCheckedAt) < moveRecheck):
			// Checked lately: every metadata update (an epoch a second)
			// dialled it again (a review's
			// TestS23AnUnconfirmedMoveIsNotRedialledOnEveryMetadataUpdate).
		default:
			// It advertised its configured address itself before, so no
			// relay stood in front of it; now it advertises another. It
			// may have moved (restarted on another port or host, the
			// others' cluster.peers not updated: every probe then went to
			// the old address, and it was declared dead, refuted and
			// joined again for good, a review's
			// TestS21ConfiguredPeerMovedToANewPortIsReportedNotFlapped),
			// or it may advertise an address this node cannot reach (a
			// NAT's, cluster.advertise) while still answering at the
			// configured one (a second review's
			// TestS22ConfiguredPeerThatAdvertisesAnUnreachableAddressKeepsItsConfiguredPath).
			// So it is followed only once shown: a heartbeat from the new
			// address (received), or the new address answering a
			// connection where the configured one does not (checkMove).
			p.movedTo = addr
			c.startMoveCheck(p)
		}
		c.transport.setPath(n.Name, addr, p.udpString())
	}
	changed := !p.member
	p.member, p.memberAt, p.saidGoodbye = true, time.Now(), false
	c.metrics.peerMember(p)
	c.setRegion(p, meta.Region)
	p.replica.SharePool(c.poolFor(p.region)) // back in its region's pool if it had left (memberDown)
	if meta.Incarnation != p.metaInc {
		if p.metaInc != 0 {
			// A restart: what we held of its indicator describes the old process.
			c.replaceReplica(p)
			p.epochSeen = 0
			// Its disk tier may hold pages purged while it was down; an
			// unmonitored peer's restart shows only here (a review's
			// TestAnUnmonitoredPeerThatRestartedIsMarkedReturned).
			p.returnedAt = time.Now()
		}
		p.metaInc = meta.Incarnation
	}
	if !p.monitored && meta.Epoch > p.epochSeen {
		pull = meta.Epoch // monitored peers' epochs come with their heartbeats
	}
	if changed {
		if !p.monitored {
			c.setTrust(p, true)
		}
		c.recomputeNeighbours()
	}
	c.mu.Unlock()
	if changed {
		c.log.Info("member joined", "self", c.cfg.NodeID, "peer", n.Name, "addr", addr, "region", meta.Region)
		c.requestView()
	}
	if pull > 0 {
		go c.pullIndicator(p, pull)
	}
	if (learnt || changed) && c.pulled.Load() != nil {
		// It may owe this node purges this node could not ask it for: a
		// peer learnt by gossip after the start's asking, or one back
		// from an agreed death (each side of a long partition declares
		// the other dead, and the heartbeat path asks only members).
		c.wantOwedFrom(n.Name, askJoined)
	}
	if (learnt || changed) && c.owed.owedTo(n.Name) > 0 {
		// And this node may owe it purges: delivered now, not when it
		// is trusted again. Its own ask may have come before this node
		// knew it again and been answered "nothing" (both sides forgot
		// each other in a long partition: a review's
		// TestOwedReviewAJoinAskBeforeTheOtherSideLearntTheAskerIsNotLost).
		go c.deliverOwedNow(n.Name)
	}
}

// memberDown records memberlist's agreed decision that a member is dead
// (or left): it leaves the ring everywhere.
func (c *Cluster) memberDown(n *memberlist.Node) {
	if n.Name == c.cfg.NodeID {
		return
	}
	c.metrics.MembershipEvents.WithLabelValues("leave").Inc()
	c.mu.Lock()
	p := c.peers[n.Name]
	changed := p != nil && p.member
	if p != nil {
		// A check under way, or one to come, speaks of the peer as it was.
		p.forgetMove()
	}
	if changed {
		p.member = false
		p.leftAt = time.Now()
		p.saidGoodbye = p.trusted
		c.metrics.peerMember(p)
		c.setTrust(p, false)
		c.recomputeNeighbours()
		p.replica.SharePool(nil) // its outcomes would stay in the region's prior, frozen
	}
	c.mu.Unlock()
	if changed {
		c.log.Info("member left", "self", c.cfg.NodeID, "peer", n.Name, "addr", n.Address())
		c.requestView()
	}
}

// moveCheckTimeout bounds each connection checkMove opens, and
// moveRecheck is how long a checked address is not dialled again while
// the peer keeps advertising it (a NAT's address it cannot be reached at).
const (
	moveCheckTimeout = 2 * time.Second
	moveRecheck      = time.Minute
)

// startMoveCheck runs checkMove of p.movedTo, within Run: a check is
// waited for when Run returns and started only while it runs (a review's
// TestS23MoveCheckDoesNotOutliveRun). c.mu must be held.
func (c *Cluster) startMoveCheck(p *Peer) {
	p.moveGen++
	ctx := c.runCtx
	if ctx == nil || ctx.Err() != nil {
		p.moveChecking = false
		return
	}
	p.moveChecking, p.moveCheckedAt = true, time.Now()
	id, configured, to, gen := p.ID, p.configuredAddr, p.movedTo, p.moveGen
	c.moveChecks.Add(1)
	go func() {
		defer c.moveChecks.Done()
		c.checkMove(ctx, id, configured, to, gen)
	}()
}

// checkMove tells a move from an address this node cannot reach: a peer
// configured at configured advertises to; if a connection to to's cluster
// port opens and one to configured does not, the peer moved, and is
// followed, unless anything changed meanwhile (gen).
func (c *Cluster) checkMove(ctx context.Context, id, configured, to string, gen uint64) {
	answers := func(addr string) bool {
		ctx, cancel := context.WithTimeout(ctx, moveCheckTimeout)
		defer cancel()
		dial := c.cfg.GossipDial
		if dial == nil {
			var d net.Dialer
			dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
		}
		conn, err := dial(ctx, addr)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	moved := answers(to) && !answers(configured)
	c.mu.Lock()
	p := c.peers[id]
	from := ""
	if p != nil && p.moveGen == gen {
		p.moveChecking = false
		if moved && ctx.Err() == nil {
			from = c.followMove(p)
		}
	}
	c.mu.Unlock()
	if from != "" {
		c.warnMove(id, from, to)
	}
}

// followMove takes p to the address it moved to (p.movedTo): heartbeats,
// peer requests and membership traffic go there from now on. It returns
// the address p was reached at before, for warnMove. c.mu must be held.
func (c *Cluster) followMove(p *Peer) (from string) {
	from, to := p.Addr, p.movedTo
	p.reachAt(to)
	p.forgetMove()
	c.transport.setPath(p.ID, to, to) // the same: no redirection
	return from
}

// returnToConfigured takes p, followed elsewhere, back to its configured
// address, and membership traffic for the address it advertises there
// too (the path the operator chose). It returns the address p was reached
// at before. c.mu must be held.
func (c *Cluster) returnToConfigured(p *Peer) (from string) {
	from = p.Addr
	p.reachAt(p.configuredAddr)
	p.forgetMove()
	if p.advertised != "" {
		c.transport.setPath(p.ID, p.advertised, p.udpString())
	}
	return from
}

// reachAt sends p's heartbeats and peer requests to addr from now on.
// c.mu must be held.
func (p *Peer) reachAt(addr string) {
	p.Addr = addr
	p.udp, _ = net.ResolveUDPAddr("udp", addr)
}

// forgetMove drops a move seen but not followed (or just followed), and
// makes any check of it under way count for nothing. c.mu must be held.
func (p *Peer) forgetMove() {
	p.movedTo, p.moveChecking = "", false
	p.moveGen++
}

// warnMove says once that a peer configured by address moved.
func (c *Cluster) warnMove(id, from, to string) {
	c.warnOnce("moved "+id, "a peer configured by address moved: it advertises another address, and answers there, so this node follows it",
		"peer", id, "from", from, "to", to, "remedy", "update this node's cluster.peers entry for it")
}

// viewCoalesce is the least time between two ring rebuilds asked for by
// membership events: when 100 nodes start at once every node hears 99
// joins in a few seconds, and rebuilding the rings for each inside
// memberlist's callback (which holds its lock) was measured as most of a
// node's CPU, delaying its probe answers until others declared it dead.
const viewCoalesce = 50 * time.Millisecond

// requestView asks viewLoop for a ring rebuild; requests made while one is
// pending are one rebuild.
func (c *Cluster) requestView() {
	select {
	case c.viewWanted <- struct{}{}:
	default:
	}
}

// viewLoop rebuilds the rings on request, at most once per viewCoalesce.
func (c *Cluster) viewLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.viewWanted:
		}
		c.setView()
		select {
		case <-ctx.Done():
			return
		case <-time.After(viewCoalesce):
		}
	}
}

// runMembership runs memberlist on the cluster port until ctx ends, then
// says goodbye so that the others need not wait for a death.
func (c *Cluster) runMembership(ctx context.Context) error {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.cfg.NodeID
	mc.Transport = c.transport
	d := mlDelegate{c}
	mc.Delegate, mc.Events, mc.Conflict, mc.Alive = d, d, d, d
	// What this node reads, told to every member in memberlist's version
	// fields (allRead); the version it speaks stays 0, so memberlist's own
	// check of delegate versions passes beside a release that says 0 to all.
	mc.DelegateProtocolMax = metaVersion
	mc.Keyring = c.keyring
	mc.ProbeInterval, mc.SuspicionMult = c.probeInterval(), DefaultSuspicionMult
	if c.cfg.SuspicionMult > 0 {
		mc.SuspicionMult = c.cfg.SuspicionMult
	}
	mc.ProbeTimeout = c.probeTimeout()
	mc.DeadNodeReclaimTime = deadReclaim
	mc.GossipToTheDeadTime = gossipToTheDead
	mc.PushPullInterval = pushPullInterval
	mc.TCPTimeout = max(2*time.Second, 4*c.cfg.PeerTimeout)
	mc.Logger = log.New(mlLogWriter{c}, "", 0)
	if c.cfg.Advertise != "" {
		host, port, err := net.SplitHostPort(c.cfg.Advertise)
		if err != nil {
			return fmt.Errorf("cluster: Advertise: %w", err)
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("cluster: Advertise port %q: %w", port, err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = host, n
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("cluster: membership: %w", err)
	}
	m := &membership{ml: ml, seedsAt: map[string]time.Time{}}
	c.mlReady.Store(m)
	go c.publishMeta(ctx, m)
	go c.refuteLoop(ctx, m)
	go c.viewLoop(ctx)
	t := time.NewTicker(joinInterval)
	defer t.Stop()
	for {
		c.joinSeeds(ctx, m)
		if time.Since(m.peersAt) >= c.cfg.DNSInterval {
			m.peersAt = time.Now()
			c.refreshPeerAddrs(ctx)
		}
		select {
		case <-ctx.Done():
			_ = ml.Leave(leaveTimeout)
			return ml.Shutdown()
		case <-t.C:
		}
	}
}

// seeds are the addresses to join through: the static peers' and every
// address behind cluster.dns, as IP:port (memberlist names members by
// address, so a seed given by host name is resolved to be recognised as a
// member). A static peer that is a member under its node id is no seed:
// its configured address may be a relay or proxy in front of the address
// it advertises, which would never match. The DNS name is re-resolved
// every cluster.dns_interval, or at every round until this node has joined.
func (c *Cluster) seeds(ctx context.Context, m *membership, memberIDs map[string]bool) []string {
	var out []string
	for id, addr := range c.cfg.Peers {
		if id != c.cfg.NodeID && !memberIDs[id] {
			out = append(out, c.resolveSeed(ctx, addr)...)
		}
	}
	if c.cfg.DNS != "" {
		if !m.joined.Load() || time.Since(m.dnsAt) >= c.cfg.DNSInterval {
			rctx, cancel := context.WithTimeout(ctx, joinInterval)
			addrs, err := net.DefaultResolver.LookupHost(rctx, c.cfg.DNS)
			cancel()
			if err != nil {
				c.warnOnce("dns "+c.cfg.DNS, "the cluster's DNS name does not resolve", "name", c.cfg.DNS, "err", err,
					"remedy", "check cluster.dns (a headless service's name) and the resolver")
			} else {
				m.dnsAt, m.dnsSeeds = time.Now(), nil
				for _, a := range addrs {
					m.dnsSeeds = append(m.dnsSeeds, net.JoinHostPort(a, c.cfg.DNSPort))
				}
			}
		}
		out = append(out, m.dnsSeeds...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// refreshPeerAddrs re-resolves the configured peers named by host name.
// A configured peer keeps its configured address whatever memberlist says
// (memberUp), so a peer that moves behind its name (a rescheduled pod, a
// replaced host) is followed through DNS: its heartbeats went to the old
// address for good when the name was resolved only once.
func (c *Cluster) refreshPeerAddrs(ctx context.Context) {
	for id, addr := range c.cfg.Peers {
		host, _, err := net.SplitHostPort(addr)
		if id == c.cfg.NodeID || err != nil || net.ParseIP(host) != nil {
			continue
		}
		resolved := c.resolveSeed(ctx, addr)
		if resolved[0] == addr {
			continue // the name does not resolve now: keep what we had
		}
		udp, err := net.ResolveUDPAddr("udp", resolved[0])
		if err != nil {
			continue
		}
		c.mu.Lock()
		if p := c.peers[id]; p != nil && (p.udp == nil || !p.udp.IP.Equal(udp.IP) || p.udp.Port != udp.Port) {
			if p.udp != nil && slices.ContainsFunc(resolved, func(a string) bool { return a == p.udp.String() }) {
				c.mu.Unlock()
				continue // still one of the name's addresses
			}
			c.log.Info("a configured peer's name resolves to a new address", "peer", id, "name", addr, "addr", udp.String())
			p.udp = udp
		}
		c.mu.Unlock()
	}
}

// resolveSeed returns addr with its host resolved to IP addresses (addr
// itself if it names an IP, or if the name does not resolve now).
func (c *Cluster) resolveSeed(ctx context.Context, addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) != nil {
		return []string{addr}
	}
	rctx, cancel := context.WithTimeout(ctx, joinInterval)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(rctx, host)
	if err != nil || len(ips) == 0 {
		return []string{addr}
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out
}

// joinSeeds joins through the seeds that are not members (a few at a
// time: one is enough to learn everyone), logs the startup membership
// once, and logs a seed unreached for seedUnreachedAfter.
func (c *Cluster) joinSeeds(ctx context.Context, m *membership) {
	view := c.mlView.snapshot()
	self := view[c.cfg.NodeID].addr
	members, memberIDs := map[string]bool{}, map[string]bool{}
	for name, n := range view {
		members[n.addr], memberIDs[name] = true, true
	}
	var pending []string
	for _, s := range c.seeds(ctx, m, memberIDs) {
		if s == self || members[s] {
			continue
		}
		if _, ok := m.seedsAt[s]; !ok {
			m.seedsAt[s] = time.Now()
		}
		pending = append(pending, s)
	}
	for s := range m.seedsAt {
		if !slices.Contains(pending, s) {
			delete(m.seedsAt, s) // a member now, or no longer a seed: not unreached
		}
	}
	rand.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
	// Before the first join every seed is tried, so a node learns the
	// cluster from whichever answers; later, a few.
	if m.joined.Load() && len(pending) > 3 {
		pending = pending[:3]
	}
	if len(pending) > 0 {
		n, err := m.ml.Join(pending)
		c.metrics.MembershipJoins.WithLabelValues(joinOutcome(n, err)).Inc()
	}
	now := time.Now()
	for s, since := range m.seedsAt {
		if now.Sub(since) >= seedUnreachedAfter {
			c.warnOnce("seed "+s, "a seed has not been reached since this node started trying",
				"seed", s, "for", now.Sub(since).Round(time.Second).String(),
				"remedy", "check the address in cluster.peers or behind cluster.dns, that the node runs, the firewall (UDP and TCP on the cluster port) and cluster.secret")
		}
	}
	if m.joined.Load() {
		c.reconcileMembers()
	}
	if !m.joined.Load() && (len(pending) == 0 || m.ml.NumMembers() > 1 || len(c.cfg.Peers) == 0 && c.cfg.DNS == "") {
		m.joined.Store(true)
		c.firstJoinOnce.Do(func() { close(c.firstJoin) }) // CollectOwed may wait for it
		var names []string
		for name, n := range c.mlView.snapshot() {
			names = append(names, name+"="+n.addr)
		}
		slices.Sort(names)
		c.log.Info("cluster membership", "self", c.cfg.NodeID, "members", len(names), "nodes", strings.Join(names, ","))
	}
}

// reconcileMembers takes out of the ring the configured peers memberlist
// does not know (a static peer that never started would otherwise stay
// a member for good). It runs once this node has joined: before that,
// the configuration is the best guess every node shares. A peer that
// became a member after the snapshot was taken is left alone.
func (c *Cluster) reconcileMembers() {
	at := time.Now()
	known := c.mlView.snapshot()
	var gone []string
	c.mu.Lock()
	for id, p := range c.peers {
		if _, ok := known[id]; p.member && !ok && p.memberAt.Before(at) {
			p.member = false
			p.leftAt = at
			p.saidGoodbye = p.trusted
			c.metrics.peerMember(p)
			c.setTrust(p, false)
			p.replica.SharePool(nil)
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		c.recomputeNeighbours()
	}
	c.mu.Unlock()
	if len(gone) > 0 {
		slices.Sort(gone)
		c.log.Info("configured peers not in the membership leave the ring", "self", c.cfg.NodeID, "peers", strings.Join(gone, ","))
		c.requestView()
	}
}

func joinOutcome(n int, err error) string {
	switch {
	case err == nil:
		return "ok"
	case n > 0:
		return "partial"
	}
	return "failed"
}

// publishMeta re-announces this node's metadata when its indicator epoch
// changes, at most once a second, and every metaRefresh in any case, so
// that what members relay of it stays fresh (freshAlive); memberlist
// gossips it to everyone.
func (c *Cluster) publishMeta(ctx context.Context, m *membership) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var sent uint64
	sentAt := time.Now() // memberlist announced it at its start
	sentStamped := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		stamped := c.mlView.allRead(metaVersion) // a member of an earlier release came or went
		if e := c.metaEpoch.Load(); e != sent || stamped != sentStamped || time.Since(sentAt) >= metaRefresh {
			// Sent whatever UpdateNode says: its only error is a timeout
			// waiting for the broadcast's last retransmission, and the
			// message is queued all the same. Retrying at once on it (as
			// this loop did) made every node of a busy 100-node cluster
			// announce itself every second, each retry restarting the
			// last one's retransmissions: the gossip that carried them
			// crowded out probes and heartbeats (measured: 2,359 local
			// suspicions in a soak where the release before had 2).
			if err := m.ml.UpdateNode(joinInterval); err != nil {
				c.log.Debug("membership: metadata announced, not yet carried everywhere", "err", err)
			}
			sent, sentAt, sentStamped = e, time.Now(), stamped
		}
	}
}

// probeInterval is memberlist's probe period (cluster.probe_interval or
// DefaultProbeInterval).
func (c *Cluster) probeInterval() time.Duration {
	if c.cfg.ProbeInterval > 0 {
		return c.cfg.ProbeInterval
	}
	return DefaultProbeInterval
}

// probeTimeout is how long memberlist waits for a probe's ack: its LAN
// default of 500 ms, or half a shorter probe period.
func (c *Cluster) probeTimeout() time.Duration {
	return min(memberlist.DefaultLANConfig().ProbeTimeout, c.probeInterval()/2)
}

// refuteSilence is how long a peer's heartbeats must have been missing
// for this node to refute a suspicion it may not have heard of: as long
// as a probe of ours can go unanswered (less and memberlist cannot have
// suspected us over it), and never under four heartbeat periods (a late
// heartbeat or two is no cut). New keeps it (Cluster.refuteAfter): every
// heartbeat is compared with it, and memberlist's default configuration
// costs a host-name lookup each time it is made.
func (c *Cluster) refuteSilence() time.Duration {
	return max(c.probeTimeout(), 4*c.cfg.Period)
}

// wantRefute asks refuteLoop to refute; requests made while one is
// pending are one refutation.
func (c *Cluster) wantRefute() {
	select {
	case c.refuteWanted <- struct{}{}:
	default:
	}
}

// refuteEvery is the least time between two refutations: one probe
// period, as memberlist cannot newly suspect a node faster than it probes.
// A node whose heartbeats come back after a cut, from one peer or from
// many at once, refutes twice (refutesPerSilence): at the first
// heartbeat, and once more a second later.
const refuteEvery = time.Second

// refutesPerSilence is how many refutations one silence's end sets off,
// refuteEvery apart. An alive message is gossiped only 4 × ⌈log10(n+1)⌉
// times, and memberlist v0.7.0's queue lost some outright (the false
// deaths of TestFlappingNodeIsNotDeclaredDead; mended in
// third_party/memberlist): a second, a second later, is still inside any
// heal long enough to matter, and costs one small broadcast per node per
// heal.
const refutesPerSilence = 2

// refuteQueued is how long refuteLoop lets UpdateNode wait for its
// broadcast: not at all, in effect (a zero timeout waits for ever).
const refuteQueued = time.Millisecond

// refuteLoop announces this node alive with a new incarnation
// (memberlist's UpdateNode, the message memberlist's own refutation
// sends) when heartbeats return after a silence (received). memberlist
// refutes a suspicion only when it hears of it, and it gossips a
// suspicion 4 × ⌈log10(n+1)⌉ times (4 at five nodes), within a few
// hundred milliseconds: when the suspicion begins shortly before a cut
// heals, every one of those goes into the cut, and its probes carry it to
// the suspect only once per round (every n probe periods). The suspect
// then never refutes, and is declared dead by every member, reachable all
// along, when the suspicion timeout runs out (docs/chaos/flap-death-
// 2026-12-02.md: 2 of 37 flapping runs in the fault lab). A new
// incarnation overrides a suspicion wherever it is held; where there is
// none it changes little (memberlist reports an update of the metadata,
// which memberUp takes as it takes the refreshes of publishMeta).
func (c *Cluster) refuteLoop(ctx context.Context, m *membership) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.refuteWanted:
		}
		// UpdateNode queues the alive message, then waits for its last
		// retransmission; its only error is that wait running out, and the
		// message is queued all the same. The wait is not waited here: its
		// notice is lost when the broadcast ends (or a newer announcement
		// of this node replaces it) before the wait begins, as memberlist
		// does not block to give it, and never came when memberlist's
		// queue lost the message (third_party/README.md). Waiting the whole
		// timeout held the next refutation back with it, into the next cut
		// in the flap test.
		for i := range refutesPerSilence {
			if i > 0 && !sleepCtx(ctx, refuteEvery) {
				return
			}
			_ = m.ml.UpdateNode(refuteQueued)
			c.metrics.MembershipEvents.WithLabelValues("refute").Inc()
			c.refutes.Add(1)
		}
		// Requests made up to now are answered by the refutation just
		// queued.
		select {
		case <-c.refuteWanted:
		default:
		}
		if !sleepCtx(ctx, refuteEvery) {
			return
		}
	}
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// mlLogWriter turns memberlist's log lines into slog records: debug,
// except the lines that mean a misconfiguration, which are logged once
// per source with the remedy and counted.
type mlLogWriter struct{ c *Cluster }

func (w mlLogWriter) Write(b []byte) (int, error) {
	line := string(bytes.TrimSpace(b))
	msg := line
	if i := strings.Index(line, "memberlist: "); i >= 0 {
		msg = line[i+len("memberlist: "):]
	}
	from := ""
	if i := strings.LastIndex(msg, "from="); i >= 0 {
		from = msg[i+len("from="):]
	} else if i := strings.Index(msg, "failed to join "); i >= 0 {
		// A join's refusal names the seed this way, without from= (a
		// review: "from=" was logged empty, and every seed that refused
		// shared one warning).
		from, _, _ = strings.Cut(msg[i+len("failed to join "):], ": ")
	}
	if host, _, err := net.SplitHostPort(from); err == nil {
		from = host
	}
	lower := strings.ToLower(msg)
	var key, text, remedy string
	field := "from" // what the source in the warning is
	switch {
	case strings.Contains(msg, errStaleAlive.Error()):
		// Counted by freshAlive; the node is named, not the sender, which
		// memberlist does not say.
		_, rest, _ := strings.Cut(msg, "'")
		node, _, _ := strings.Cut(rest, "'")
		key, from, field = "gossip stale", node, "node"
		text, remedy = "an announcement of a node that is not a member was refused as old: a replay of captured membership traffic, or the node's clock is behind",
			"if that node runs, check its clock (NTP): members take its announcements only while they are younger than "+metaFreshness.String()
	case strings.Contains(lower, "not encrypted") || strings.Contains(lower, "unencrypted"):
		w.c.metrics.GossipRejected.WithLabelValues("plain").Inc()
		key, text, remedy = "gossip plain", "unencrypted membership traffic from this address was refused", "every node needs a cluster.secret"
	case strings.Contains(lower, "decrypt"):
		w.c.metrics.GossipRejected.WithLabelValues("key").Inc()
		key, text, remedy = "gossip key", "membership packets from this address cannot be decrypted: its cluster.secret differs from this node's",
			"give every node the same cluster.secret (or install the new one on every node first: POST /cluster/keys)"
	default:
		w.c.log.Debug("membership", "memberlist", msg)
		return len(b), nil
	}
	// Sources are bounded per cause, as for heartbeats: spoofed packets
	// from many addresses must not fill the memory of what was logged.
	if !w.c.warned.fresh(key+" "+from, time.Now()) && w.c.countCause(key) > sourcesPerCause {
		return len(b), nil
	}
	w.c.warnOnce(key+" "+from, text, field, from, "remedy", remedy)
	return len(b), nil
}

// MembershipState is memberlist's view, for the status page.
type MembershipState struct {
	Running bool `json:"running"`
	Alive   int  `json:"alive"` // alive or suspect, self included
	Health  int  `json:"health_score"`
	// Refutes counts this node's announcements of itself after its
	// peers' heartbeats came back from a silence (refuteLoop).
	Refutes uint64 `json:"refutes"`
	// Members are memberlist's members (alive or suspect).
	Members []MemberState `json:"members,omitempty"`
	Keys    []KeyState    `json:"keys"`
}

// MemberState is one member as memberlist sees it: alive or suspect (its
// Members() leaves the dead and left out, and does not say which of the
// two: memberlist keeps a member's state in a field it does not export).
type MemberState struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Region string `json:"region,omitempty"`
}

func (c *Cluster) membershipState() MembershipState {
	st := MembershipState{Keys: c.Keys(), Refutes: c.refutes.Load()}
	m := c.mlReady.Load()
	if m == nil {
		return st
	}
	st.Running, st.Alive, st.Health = true, m.ml.NumMembers(), m.ml.GetHealthScore()
	return st
}

// MembershipDetail is membershipState with every member listed (the
// status page; the metrics need only the counts).
func (c *Cluster) MembershipDetail() MembershipState {
	st := c.membershipState()
	m := c.mlReady.Load()
	if m == nil {
		return st
	}
	for name, n := range c.mlView.snapshot() {
		ms := MemberState{ID: name, Addr: n.addr}
		if meta, err := decodeMeta(n.meta); err == nil {
			ms.Region = meta.Region
		}
		st.Members = append(st.Members, ms)
	}
	slices.SortFunc(st.Members, func(a, b MemberState) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// udpString is the peer's resolved address ("" when it did not resolve).
func (p *Peer) udpString() string {
	if p.udp == nil {
		return ""
	}
	return p.udp.String()
}
