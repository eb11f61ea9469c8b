// Package wire is the cluster's heartbeat packet and its UDP transport:
// the authenticated (HMAC-SHA256) encoding with replay, skew, version and
// incarnation checks and a counted reason for every rejection, the sender
// and receiver loops, and the RTT estimate from echoed send times. The
// failure detectors that consume arrivals are in package fdetect.
package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/edgecache/edge/internal/reject"
)

// Heartbeat is what a node tells a peer every period. It also carries the
// node's indicator epoch and estimates (so peers know when to pull a new
// advertisement) and an echo of the last heartbeat it got from that peer,
// from which the peer measures the round-trip time.
type Heartbeat struct {
	Node string // sender id
	// To is the receiver's id. The MAC covers it, so a packet copied off
	// the wire on its way to one node is refused by every other
	// (RejectReceiver): the peers' HTTP requests name their receiver
	// (Edge-To) for the same reason.
	To          string
	Incarnation uint64 // changes on every restart of the sender
	Seq         uint64 // per incarnation, +1 per period
	SendNs      int64  // sender's wall clock, Unix ns
	Epoch       uint64 // sender's indicator epoch
	FPR, FNR    float64
	EchoSeq     uint64 // the receiver's last heartbeat seen by the sender (0: none)
	EchoSendNs  int64  // its SendNs, echoed back
	EchoHoldNs  int64  // how long the sender held it before this send
	// Monitors says the sender runs a failure detector on the receiver
	// and needs its heartbeats back: a receiver that does not monitor the
	// sender answers it while this is set, and only then (two nodes
	// answering each other's answers would heartbeat forever).
	Monitors bool
	// Region is the sender's cluster.region label ("" if none), from which
	// peers price access to it with a configured cost per region pair.
	Region string
	// Probe marks a confirmation probe or its answer, not a scheduled
	// heartbeat (cluster/confirm.go): a node about to suspect a silent
	// peer asks it directly, and the peer answers at once. Seq then
	// carries the asker's nonce (the answer echoes it), so probes take no
	// sequence number from the heartbeats the detectors learn from, and
	// the verifier keeps them out of its replay window: a replayed answer
	// names a nonce nobody waits for, a replayed question only earns an
	// answer (rate-limited by the answerer).
	Probe ProbeKind
}

// ProbeKind says whether a packet is a heartbeat, a confirmation probe or
// a probe's answer.
type ProbeKind uint8

// The kinds of packet (flag bits 1 and 2; both set is malformed).
const (
	NotProbe    ProbeKind = 0
	ProbeAsk    ProbeKind = 1
	ProbeAnswer ProbeKind = 2
)

// MaxRegionLen bounds a region label.
const MaxRegionLen = 32

// MaxIDLen bounds a node id (the sender's and the receiver's).
const MaxIDLen = 64

// ValidID reports whether id can name a heartbeat's sender or receiver.
func ValidID(id string) bool { return len(id) >= 1 && len(id) <= MaxIDLen }

// Wire format (big-endian): "EHB" version(1) | idLen(1) id | toLen(1) to |
// incarnation seq
// send epoch(8 each) | fpr fnr (float64) | echoSeq echoSend echoHold (8 each) |
// flags(1: bit 0 Monitors, bit 1 a probe, bit 2 a probe's answer) |
// regionLen(1) region | HMAC-SHA256 over
// everything before it (32).
//
// Version 4 added the receiver (to): a version 3 packet named only its
// sender, so one sent to n2 verified at n3 as well, and anyone who could
// copy it could replay it to another node within the skew window (a
// hostile review, 2026-12-07). Nodes of versions 3 and 4 refuse each
// other's packets as another version (the log names it): upgrade a
// cluster as a whole. Versions 1 and 2 carried liveness rumors, which
// membership (memberlist) replaced. The probe bits came within version 3.
const (
	hbMagic      = "EHB"
	hbVersion    = 4
	maxIDLen     = MaxIDLen
	hbFixed      = 3 + 1 + 1 + 1 + 8*4 + 8*2 + 8*3 + 1 + 1
	macLen       = sha256.Size
	flagMonitors = 1
	flagAsk      = 2
	flagAnswer   = 4
	knownFlags   = flagMonitors | flagAsk | flagAnswer
	// MaxPacket bounds a heartbeat datagram.
	MaxPacket = hbFixed + 2*maxIDLen + MaxRegionLen + macLen
)

// Encode serialises and authenticates h with the cluster secret. It
// refuses what Decode would refuse, so a heartbeat that leaves is one the
// peer can read.
func (h Heartbeat) Encode(secret []byte) ([]byte, error) {
	if len(h.Node) == 0 || len(h.Node) > maxIDLen {
		return nil, fmt.Errorf("wire: node id of %d bytes, want 1..%d", len(h.Node), maxIDLen)
	}
	if len(h.To) == 0 || len(h.To) > maxIDLen {
		return nil, fmt.Errorf("wire: receiver id of %d bytes, want 1..%d", len(h.To), maxIDLen)
	}
	if len(h.Region) > MaxRegionLen {
		return nil, fmt.Errorf("wire: region of %d bytes, want at most %d", len(h.Region), MaxRegionLen)
	}
	if !validFields(h) {
		return nil, fmt.Errorf("wire: fpr %v, fnr %v (want 0..1), echo hold %d ns (want ≥ 0)", h.FPR, h.FNR, h.EchoHoldNs)
	}
	b := make([]byte, 0, MaxPacket)
	b = append(b, hbMagic...)
	b = append(b, hbVersion, byte(len(h.Node)))
	b = append(b, h.Node...)
	b = append(b, byte(len(h.To)))
	b = append(b, h.To...)
	for _, v := range []uint64{h.Incarnation, h.Seq, uint64(h.SendNs), h.Epoch, math.Float64bits(h.FPR), math.Float64bits(h.FNR), h.EchoSeq, uint64(h.EchoSendNs), uint64(h.EchoHoldNs)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	flags := byte(0)
	if h.Monitors {
		flags |= flagMonitors
	}
	switch h.Probe {
	case NotProbe:
	case ProbeAsk:
		flags |= flagAsk
	case ProbeAnswer:
		flags |= flagAnswer
	default:
		return nil, fmt.Errorf("wire: probe kind %d, want 0..2", h.Probe)
	}
	b = append(b, flags, byte(len(h.Region)))
	b = append(b, h.Region...)
	mac := hmac.New(sha256.New, secret)
	mac.Write(b)
	return mac.Sum(b), nil
}

// RejectReason says why a heartbeat was refused; each has a counter.
type RejectReason = reject.Reason

// Reasons a heartbeat is rejected.
const (
	RejectShort       RejectReason = "short"
	RejectMagic       RejectReason = "magic"
	RejectVersion     RejectReason = "version"
	RejectMAC         RejectReason = "mac"
	RejectSkew        RejectReason = "skew"
	RejectReplay      RejectReason = "replay"
	RejectIncarnation RejectReason = "old_incarnation"
	RejectMalformed   RejectReason = "malformed"
	// RejectReceiver: an authentic heartbeat addressed to another node
	// (a copy replayed here, or a peer list that gives another node's id
	// this node's address).
	RejectReceiver RejectReason = "receiver"
)

// RejectReasons lists every reason, for metrics.
var RejectReasons = []RejectReason{RejectShort, RejectMagic, RejectVersion, RejectMAC, RejectSkew, RejectReplay, RejectIncarnation, RejectMalformed, RejectReceiver}

func rejectHB(r RejectReason) error { return reject.New("heartbeat", r, "") }

// ReasonOf returns the reason of a rejection error.
func ReasonOf(err error) (RejectReason, bool) { return reject.ReasonOf(err) }

// Decode parses and authenticates a datagram. It checks the MAC before
// looking at any field beyond the length, so an unauthenticated sender
// learns nothing from the answer (there is none) or the timing.
func Decode(b, secret []byte) (Heartbeat, error) {
	var h Heartbeat
	if len(b) < hbFixed+2+macLen { // ids of a byte each
		return h, rejectHB(RejectShort)
	}
	if string(b[:3]) != hbMagic {
		return h, rejectHB(RejectMagic)
	}
	if b[3] != hbVersion {
		return h, rejectHB(RejectVersion)
	}
	n := int(b[4])
	if n == 0 || n > maxIDLen || len(b) < hbFixed+n+macLen || len(b) > MaxPacket {
		return h, rejectHB(RejectMalformed)
	}
	tn := int(b[5+n]) // in bounds: hbFixed counts the byte
	if tn == 0 || tn > maxIDLen || len(b) < hbFixed+n+tn+macLen {
		return h, rejectHB(RejectMalformed)
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return h, rejectHB(RejectMAC)
	}
	h.Node = string(b[5 : 5+n])
	h.To = string(b[6+n : 6+n+tn])
	p := body[6+n+tn:]
	u := func() uint64 { v := binary.BigEndian.Uint64(p); p = p[8:]; return v }
	h.Incarnation, h.Seq, h.SendNs, h.Epoch = u(), u(), int64(u()), u()
	h.FPR, h.FNR = math.Float64frombits(u()), math.Float64frombits(u())
	h.EchoSeq, h.EchoSendNs, h.EchoHoldNs = u(), int64(u()), int64(u())
	if !validFields(h) {
		return h, rejectHB(RejectMalformed)
	}
	monitors, probe, region, err := decodeTail(p)
	if err != nil {
		return Heartbeat{}, err
	}
	h.Monitors, h.Probe, h.Region = monitors, probe, region
	return h, nil
}

// validFields reports whether h's estimates are probabilities and its
// echo hold is not negative: what Decode refuses and Encode will not send.
func validFields(h Heartbeat) bool {
	return h.FPR >= 0 && h.FPR <= 1 && h.FNR >= 0 && h.FNR <= 1 && h.EchoHoldNs >= 0
}

// decodeTail checks the tail after the fixed fields (after the MAC
// check): flags with no unknown bit and at most one probe kind, and a
// region that fills the rest.
func decodeTail(p []byte) (monitors bool, probe ProbeKind, region string, err error) {
	if len(p) < 2 || p[0]&^knownFlags != 0 {
		return false, 0, "", rejectHB(RejectMalformed)
	}
	switch p[0] & (flagAsk | flagAnswer) {
	case flagAsk:
		probe = ProbeAsk
	case flagAnswer:
		probe = ProbeAnswer
	case flagAsk | flagAnswer:
		return false, 0, "", rejectHB(RejectMalformed)
	}
	rl := int(p[1])
	if rl > MaxRegionLen || len(p) != 2+rl {
		return false, 0, "", rejectHB(RejectMalformed)
	}
	return p[0]&flagMonitors != 0, probe, string(p[2:]), nil
}

// Verifier authenticates heartbeats and rejects replays, skewed clocks
// and heartbeats addressed to another node, counting each reason. Safe
// for concurrent use.
type Verifier struct {
	secret  []byte
	maxSkew time.Duration
	self    string // the receiver heartbeats must name; "" takes any
	mu      sync.Mutex
	peers   map[string]*replayWindow
	counts  map[RejectReason]uint64
}

// replayWindow is the anti-replay state of one peer: its incarnation, the
// highest sequence number seen and a 64-entry bitmap of those below it,
// and when its last heartbeat was accepted (local clock).
type replayWindow struct {
	incarnation uint64
	highest     uint64
	bitmap      uint64
	lastNs      int64
}

// NewVerifier returns a verifier for the cluster secret at the node self:
// heartbeats addressed to another node, or whose send time differs from
// the local clock by more than maxSkew, are refused. self "" takes
// heartbeats addressed to any node, for a recorder that acts on nothing
// it reads (edge fd record); a node always names itself.
func NewVerifier(secret []byte, maxSkew time.Duration, self string) *Verifier {
	return &Verifier{secret: secret, maxSkew: maxSkew, self: self, peers: map[string]*replayWindow{}, counts: map[RejectReason]uint64{}}
}

// Misaddressed is the error of an authentic heartbeat addressed to
// another node than the verifier's (RejectReceiver). It carries the
// heartbeat, so the receiver can tell its own looped back, or another
// node using its id, from a peer list that gives another id its address.
type Misaddressed struct {
	Heartbeat
	err error
}

func (m *Misaddressed) Error() string { return m.err.Error() }
func (m *Misaddressed) Unwrap() error { return m.err }

// Forget drops node's replay window (the node left the cluster and is
// forgotten): a heartbeat of it from before is older than maxSkew by then,
// and refused on that; one after starts a new window.
func (v *Verifier) Forget(node string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.peers, node)
}

// Verify decodes b received at local time now (Unix ns). A heartbeat of a
// newer incarnation resets the peer's window (it restarted); so does one
// of an older incarnation once the window has heard nothing for twice
// maxSkew (staleIncarnation).
func (v *Verifier) Verify(b []byte, now int64) (Heartbeat, error) {
	h, err := Decode(b, v.secret)
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		r, _ := ReasonOf(err)
		v.counts[r]++
		return h, err
	}
	if d := time.Duration(now - h.SendNs); d > v.maxSkew || d < -v.maxSkew {
		v.counts[RejectSkew]++
		side := "behind"
		if d < 0 {
			side = "ahead of"
		}
		return h, reject.New("heartbeat", RejectSkew, "sent at a time %v %s this node's clock (at most %v either way)", d.Abs().Round(time.Millisecond), side, v.maxSkew)
	}
	// After the skew check: an old capture addressed elsewhere is refused
	// as old, and only a recent one reaches the id-conflict check
	// (a review replayed a day-old heartbeat of this node's previous
	// incarnation, over and over).
	if v.self != "" && h.To != v.self {
		v.counts[RejectReceiver]++
		return Heartbeat{}, &Misaddressed{Heartbeat: h, err: reject.New("heartbeat", RejectReceiver, "from node %q, addressed to node %q, received by %q", h.Node, h.To, v.self)}
	}
	w := v.peers[h.Node]
	if h.Probe != NotProbe {
		// Outside the replay window (Heartbeat.Probe): Seq is a nonce.
		// An older incarnation's probe is refused like its heartbeats;
		// a newer one's does not reset the window (its heartbeats will).
		if w != nil && h.Incarnation < w.incarnation && !v.staleIncarnation(w, now) {
			v.counts[RejectIncarnation]++
			return h, rejectHB(RejectIncarnation)
		}
		return h, nil
	}
	switch {
	case w == nil || h.Incarnation > w.incarnation || h.Incarnation < w.incarnation && v.staleIncarnation(w, now):
		v.peers[h.Node] = &replayWindow{incarnation: h.Incarnation, highest: h.Seq, bitmap: 1, lastNs: now}
		return h, nil
	case h.Incarnation < w.incarnation:
		v.counts[RejectIncarnation]++
		return h, rejectHB(RejectIncarnation)
	}
	switch {
	case h.Seq > w.highest:
		shift := h.Seq - w.highest
		if shift >= 64 {
			w.bitmap = 1
		} else {
			w.bitmap = w.bitmap<<shift | 1
		}
		w.highest = h.Seq
	case w.highest-h.Seq >= 64:
		v.counts[RejectReplay]++
		return h, rejectHB(RejectReplay)
	default:
		bit := uint64(1) << (w.highest - h.Seq)
		if w.bitmap&bit != 0 {
			v.counts[RejectReplay]++
			return h, rejectHB(RejectReplay)
		}
		w.bitmap |= bit
	}
	w.lastNs = max(w.lastNs, now)
	return h, nil
}

// staleIncarnation reports whether w's incarnation has been silent long
// enough that an older one may take over: twice maxSkew. An incarnation
// is the sender's clock at its start, so without this one packet naming
// a far higher incarnation (a member's forgery) or a restart whose clock
// is behind its previous start would lock the node's real heartbeats
// out until it was forgotten (a hostile review, 2026-12-07). Twice
// maxSkew keeps replays out: a packet of the older incarnation, sent
// before the newer one's first packet was received, carries a send time
// that the skew check refuses by then, for any sender whose clock is
// within maxSkew of this node's (one further off is refused anyway).
func (v *Verifier) staleIncarnation(w *replayWindow, now int64) bool {
	return now-w.lastNs > 2*int64(v.maxSkew)
}

// Rejections returns the count per reason.
func (v *Verifier) Rejections() map[RejectReason]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[RejectReason]uint64, len(v.counts))
	for k, c := range v.counts {
		out[k] = c
	}
	return out
}

// RTT computes the round-trip time from an echo: the receiver's own send
// time comes back with how long the peer held it.
func RTT(h Heartbeat, now int64) (time.Duration, bool) {
	if h.EchoSeq == 0 || h.EchoSendNs == 0 {
		return 0, false
	}
	rtt := time.Duration(now - h.EchoSendNs - h.EchoHoldNs)
	return rtt, rtt >= 0
}
