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
	Node        string // sender id
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

// Wire format (big-endian): "EHB" version(1) | idLen(1) id | incarnation seq
// send epoch(8 each) | fpr fnr (float64) | echoSeq echoSend echoHold (8 each) |
// flags(1: bit 0 Monitors, bit 1 a probe, bit 2 a probe's answer) |
// regionLen(1) region | HMAC-SHA256 over
// everything before it (32).
//
// Version 3: versions 1 and 2 carried liveness rumors, which membership
// (memberlist) replaced; their packets are refused as another version.
// The probe bits came later within version 3: a node without them refuses
// a probe as malformed and never answers, so its peers suspect it on
// their detectors alone, as before.
const (
	hbMagic      = "EHB"
	hbVersion    = 3
	maxIDLen     = 64
	hbFixed      = 3 + 1 + 1 + 8*4 + 8*2 + 8*3 + 1 + 1
	macLen       = sha256.Size
	flagMonitors = 1
	flagAsk      = 2
	flagAnswer   = 4
	knownFlags   = flagMonitors | flagAsk | flagAnswer
	// MaxPacket bounds a heartbeat datagram.
	MaxPacket = hbFixed + maxIDLen + MaxRegionLen + macLen
)

// Encode serialises and authenticates h with the cluster secret.
func (h Heartbeat) Encode(secret []byte) ([]byte, error) {
	if len(h.Node) == 0 || len(h.Node) > maxIDLen {
		return nil, fmt.Errorf("wire: node id of %d bytes, want 1..%d", len(h.Node), maxIDLen)
	}
	if len(h.Region) > MaxRegionLen {
		return nil, fmt.Errorf("wire: region of %d bytes, want at most %d", len(h.Region), MaxRegionLen)
	}
	b := make([]byte, 0, MaxPacket)
	b = append(b, hbMagic...)
	b = append(b, hbVersion, byte(len(h.Node)))
	b = append(b, h.Node...)
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
)

// RejectReasons lists every reason, for metrics.
var RejectReasons = []RejectReason{RejectShort, RejectMagic, RejectVersion, RejectMAC, RejectSkew, RejectReplay, RejectIncarnation, RejectMalformed}

func rejectHB(r RejectReason) error { return reject.New("heartbeat", r, "") }

// ReasonOf returns the reason of a rejection error.
func ReasonOf(err error) (RejectReason, bool) { return reject.ReasonOf(err) }

// Decode parses and authenticates a datagram. It checks the MAC before
// looking at any field beyond the length, so an unauthenticated sender
// learns nothing from the answer (there is none) or the timing.
func Decode(b, secret []byte) (Heartbeat, error) {
	var h Heartbeat
	if len(b) < hbFixed+1+macLen {
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
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return h, rejectHB(RejectMAC)
	}
	h.Node = string(b[5 : 5+n])
	p := body[5+n:]
	u := func() uint64 { v := binary.BigEndian.Uint64(p); p = p[8:]; return v }
	h.Incarnation, h.Seq, h.SendNs, h.Epoch = u(), u(), int64(u()), u()
	h.FPR, h.FNR = math.Float64frombits(u()), math.Float64frombits(u())
	h.EchoSeq, h.EchoSendNs, h.EchoHoldNs = u(), int64(u()), int64(u())
	if !(h.FPR >= 0 && h.FPR <= 1 && h.FNR >= 0 && h.FNR <= 1) || h.EchoHoldNs < 0 {
		return h, rejectHB(RejectMalformed)
	}
	monitors, probe, region, err := decodeTail(p)
	if err != nil {
		return Heartbeat{}, err
	}
	h.Monitors, h.Probe, h.Region = monitors, probe, region
	return h, nil
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

// Verifier authenticates heartbeats and rejects replays and skewed
// clocks, counting each reason. Safe for concurrent use.
type Verifier struct {
	secret  []byte
	maxSkew time.Duration
	mu      sync.Mutex
	peers   map[string]*replayWindow
	counts  map[RejectReason]uint64
}

// replayWindow is the anti-replay state of one peer: its incarnation, the
// highest sequence number seen and a 64-entry bitmap of those below it.
type replayWindow struct {
	incarnation uint64
	highest     uint64
	bitmap      uint64
}

// NewVerifier returns a verifier for the cluster secret; heartbeats whose
// send time differs from the local clock by more than maxSkew are refused.
func NewVerifier(secret []byte, maxSkew time.Duration) *Verifier {
	return &Verifier{secret: secret, maxSkew: maxSkew, peers: map[string]*replayWindow{}, counts: map[RejectReason]uint64{}}
}

// Forget drops node's replay window (the node left the cluster and is
// forgotten): a heartbeat of it from before is older than maxSkew by then,
// and refused on that; one after starts a new window.
func (v *Verifier) Forget(node string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.peers, node)
}

// Verify decodes b received at local time now (Unix ns). A heartbeat of a
// newer incarnation resets the peer's window (it restarted).
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
	w := v.peers[h.Node]
	if h.Probe != NotProbe {
		// Outside the replay window (Heartbeat.Probe): Seq is a nonce.
		// An older incarnation's probe is refused like its heartbeats;
		// a newer one's does not reset the window (its heartbeats will).
		if w != nil && h.Incarnation < w.incarnation {
			v.counts[RejectIncarnation]++
			return h, rejectHB(RejectIncarnation)
		}
		return h, nil
	}
	switch {
	case w == nil || h.Incarnation > w.incarnation:
		v.peers[h.Node] = &replayWindow{incarnation: h.Incarnation, highest: h.Seq, bitmap: 1}
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
	return h, nil
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
