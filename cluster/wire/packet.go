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
	// Ver is the sender's liveness version within its incarnation: it
	// raises it to refute a suspicion of itself (bounded-subset
	// monitoring; always 0 with all-to-all heartbeats).
	Ver uint64
	// Rumors are liveness updates about other nodes (or the receiver),
	// piggybacked SWIM-style; at most MaxRumors.
	Rumors []Rumor
	// Region is the sender's cluster.region label ("" if none), from which
	// peers price access to it with a configured cost per region pair.
	Region string
}

// MaxRegionLen bounds a region label.
const MaxRegionLen = 32

// Rumor says that a node was alive, or suspected, at a liveness point:
// its incarnation and version. A later point wins; at the same point a
// suspicion wins over alive, and only the node itself can move past it.
type Rumor struct {
	Node        string
	Incarnation uint64
	Ver         uint64
	Suspect     bool
}

// MaxRumors bounds the rumors one heartbeat carries (and so its size).
const MaxRumors = 8

// Wire format (big-endian): "EHB" version(1) | idLen(1) id | incarnation seq
// send epoch(8 each) | fpr fnr (float64) | echoSeq echoSend echoHold (8 each) |
// [version 2 only: ver(8) | regionLen(1) region | count(1) | count × (idLen(1)
// id incarnation(8) ver(8) state(1))] | HMAC-SHA256 over everything before it
// (32).
//
// Version 1 is a heartbeat with Ver 0, no rumors and no region, and is what Encode
// writes for one, so nodes with all-to-all heartbeats stay readable by
// older releases. A version-2 packet that could have been version 1 is
// refused: every heartbeat has exactly one encoding.
const (
	hbMagic    = "EHB"
	hbVersion1 = 1
	hbVersion2 = 2
	maxIDLen   = 64
	hbFixed    = 3 + 1 + 1 + 8*4 + 8*2 + 8*3
	rumorFixed = 1 + 8 + 8 + 1
	macLen     = sha256.Size
	// MaxPacket bounds a heartbeat datagram.
	MaxPacket = hbFixed + maxIDLen + 8 + 1 + MaxRegionLen + 1 + MaxRumors*(rumorFixed+maxIDLen) + macLen
)

// Encode serialises and authenticates h with the cluster secret.
func (h Heartbeat) Encode(secret []byte) ([]byte, error) {
	if len(h.Node) == 0 || len(h.Node) > maxIDLen {
		return nil, fmt.Errorf("wire: node id of %d bytes, want 1..%d", len(h.Node), maxIDLen)
	}
	if len(h.Rumors) > MaxRumors {
		return nil, fmt.Errorf("wire: %d rumors, want at most %d", len(h.Rumors), MaxRumors)
	}
	if len(h.Region) > MaxRegionLen {
		return nil, fmt.Errorf("wire: region of %d bytes, want at most %d", len(h.Region), MaxRegionLen)
	}
	version := byte(hbVersion1)
	if h.Ver != 0 || len(h.Rumors) > 0 || h.Region != "" {
		version = hbVersion2
	}
	b := make([]byte, 0, MaxPacket)
	b = append(b, hbMagic...)
	b = append(b, version, byte(len(h.Node)))
	b = append(b, h.Node...)
	for _, v := range []uint64{h.Incarnation, h.Seq, uint64(h.SendNs), h.Epoch, math.Float64bits(h.FPR), math.Float64bits(h.FNR), h.EchoSeq, uint64(h.EchoSendNs), uint64(h.EchoHoldNs)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	if version == hbVersion2 {
		b = binary.BigEndian.AppendUint64(b, h.Ver)
		b = append(b, byte(len(h.Region)))
		b = append(b, h.Region...)
		b = append(b, byte(len(h.Rumors)))
		for _, r := range h.Rumors {
			if len(r.Node) == 0 || len(r.Node) > maxIDLen {
				return nil, fmt.Errorf("wire: rumor node id of %d bytes, want 1..%d", len(r.Node), maxIDLen)
			}
			b = append(b, byte(len(r.Node)))
			b = append(b, r.Node...)
			b = binary.BigEndian.AppendUint64(b, r.Incarnation)
			b = binary.BigEndian.AppendUint64(b, r.Ver)
			state := byte(0)
			if r.Suspect {
				state = 1
			}
			b = append(b, state)
		}
	}
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
	version := b[3]
	if version != hbVersion1 && version != hbVersion2 {
		return h, rejectHB(RejectVersion)
	}
	n := int(b[4])
	if n == 0 || n > maxIDLen || len(b) < hbFixed+n+macLen || len(b) > MaxPacket ||
		(version == hbVersion1 && len(b) != hbFixed+n+macLen) {
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
	if version == hbVersion2 {
		var err error
		if h.Ver, h.Region, h.Rumors, err = decodeTail(p); err != nil {
			return Heartbeat{}, err
		}
	}
	return h, nil
}

// decodeTail parses version 2's tail (after the MAC check): the sender's
// version, its region and its rumors, which must fill p exactly.
func decodeTail(p []byte) (uint64, string, []Rumor, error) {
	ver, region, rumors, err := decodeTailParts(p)
	if err != nil || (ver == 0 && region == "" && len(rumors) == 0) {
		return 0, "", nil, rejectHB(RejectMalformed)
	}
	return ver, region, rumors, nil
}

func decodeTailParts(p []byte) (uint64, string, []Rumor, error) {
	if len(p) < 9 {
		return 0, "", nil, rejectHB(RejectMalformed)
	}
	ver, rl := binary.BigEndian.Uint64(p), int(p[8])
	p = p[9:]
	if rl > MaxRegionLen || len(p) < rl+1 {
		return 0, "", nil, rejectHB(RejectMalformed)
	}
	region := string(p[:rl])
	count := int(p[rl])
	p = p[rl+1:]
	if count > MaxRumors {
		return 0, "", nil, rejectHB(RejectMalformed)
	}
	rumors, err := decodeRumors(p, count)
	return ver, region, rumors, err
}

// decodeRumors parses count rumors, which must fill p exactly.
func decodeRumors(p []byte, count int) ([]Rumor, error) {
	var rumors []Rumor
	if count > 0 {
		rumors = make([]Rumor, 0, count)
	}
	for range count {
		if len(p) < 1 {
			return nil, rejectHB(RejectMalformed)
		}
		n := int(p[0])
		if n == 0 || n > maxIDLen || len(p) < 1+n+rumorFixed-1 {
			return nil, rejectHB(RejectMalformed)
		}
		r := Rumor{Node: string(p[1 : 1+n])}
		p = p[1+n:]
		r.Incarnation, r.Ver = binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])
		switch p[16] {
		case 0:
		case 1:
			r.Suspect = true
		default:
			return nil, rejectHB(RejectMalformed)
		}
		p = p[17:]
		rumors = append(rumors, r)
	}
	if len(p) != 0 {
		return nil, rejectHB(RejectMalformed)
	}
	return rumors, nil
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
		return h, rejectHB(RejectSkew)
	}
	w := v.peers[h.Node]
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
