package wire

// Session 41's hostile review of the heartbeat format. Each test says at
// its top whether it demonstrated a defect (it failed on the code the
// review read; mended since) or pins a property that was checked and
// holds.

import (
	"errors"
	"math"
	"testing"
	"time"
)

// DEFECT (failed before version 4). A heartbeat named its sender but not its
// receiver, and the MAC covers nothing that does: the packet n1 sent to
// n2 verifies at n3 as well. An on-path stranger without the secret who
// copies n1→n2 traffic can hand it to n3 within the skew window; n3 takes
// it as n1's own heartbeat to n3 (its echo fields, which describe the
// n1–n2 link, and its Monitors flag included). Peer HTTP requests were
// mended for exactly this in 2026-12-05 (Edge-To); heartbeats were not.
func TestS41AHeartbeatForOneNodeIsRefusedByAnother(t *testing.T) {
	secret := []byte("s41-shared-cluster-secret")
	now := time.Now().UnixNano()
	toN2 := Heartbeat{Node: "n1", To: "n2", Incarnation: 7, Seq: 42, SendNs: now, Monitors: true,
		EchoSeq: 9, EchoSendNs: now - 50*ms, EchoHoldNs: 10 * ms} // echo of n2's heartbeat
	b, err := toN2.Encode(secret)
	if err != nil {
		t.Fatal(err)
	}
	atN2 := NewVerifier(secret, 5*time.Second, "n2")
	if _, err := atN2.Verify(b, now); err != nil {
		t.Fatalf("n2 refuses n1's heartbeat to it: %v", err)
	}
	atN3 := NewVerifier(secret, 5*time.Second, "n3")
	h, err := atN3.Verify(b, now+int64(time.Second))
	if err == nil {
		t.Fatalf("n3 accepted a heartbeat n1 sent to n2 (a copy replayed by a stranger): %+v", h)
	}
	var mis *Misaddressed
	if r, _ := ReasonOf(err); r != RejectReceiver || !errors.As(err, &mis) || mis.Node != "n1" || mis.To != "n2" {
		t.Errorf("refused as %v, want %s with the heartbeat (n1 to n2)", err, RejectReceiver)
	}
}

// DEFECT (failed before 2026-12-07). Encode and Decode disagreed: Encode writes
// fields Decode refuses as malformed, so a node can send heartbeats its
// peers drop without either side seeing an error. EchoHoldNs is filled
// from the wall clock (cluster.fillHeartbeat: time.Now().UnixNano() −
// p.recvAt); a step back of the clock after a heartbeat was received makes
// it negative, and every heartbeat sent to that peer until the next one
// from it arrives is refused at the peer (counted "malformed"). FPR/FNR
// outside [0, 1] or NaN encode too.
func TestS41EveryEncodedHeartbeatDecodes(t *testing.T) {
	secret := []byte("s41-shared-cluster-secret")
	now := time.Now().UnixNano()
	for name, h := range map[string]Heartbeat{
		"negative echo hold (clock stepped back)": {Node: "n1", To: "n2", Incarnation: 1, Seq: 1, SendNs: now, EchoSeq: 3, EchoSendNs: now - 5*ms, EchoHoldNs: -2 * ms},
		"fpr above 1": {Node: "n1", To: "n2", Incarnation: 1, Seq: 1, SendNs: now, FPR: 1.5},
		"fnr NaN":     {Node: "n1", To: "n2", Incarnation: 1, Seq: 1, SendNs: now, FNR: math.NaN()},
	} {
		b, err := h.Encode(secret)
		if err != nil {
			continue // refused at the sender: consistent
		}
		if _, err := Decode(b, secret); err != nil {
			t.Errorf("%s: encoded without error, refused by Decode: %v", name, err)
		}
	}
}

// DEFECT (failed before 2026-12-07; needs a member, i.e. the shared
// secret). Every node signs with the one cluster secret and the verifier
// keys its replay window by the Node field the packet itself carries, so
// any member can speak for any other. One forged heartbeat naming n1 with
// incarnation 2^64−1 made this node refuse every real heartbeat of n1 as
// "old_incarnation" from then on, its probe answers too, until n1 was
// forgotten. The same lock-out followed, without malice, from a restart
// of n1 whose wall clock (the incarnation is its start time) is behind
// the previous start. Now an older incarnation takes over once the newer
// one has been silent for 2·maxSkew: the lock-out lasts that long after
// the last forged packet (a member can always send more), no longer.
func TestS41OneForgedIncarnationDoesNotLockAPeerOut(t *testing.T) {
	secret := []byte("s41-shared-cluster-secret")
	const skew = 5 * time.Second
	now := time.Now().UnixNano()
	v := NewVerifier(secret, skew, "n0")
	enc := encoder(t, secret)
	realInc := uint64(now - int64(time.Hour))
	if _, err := v.Verify(enc(Heartbeat{Node: "n1", To: "n0", Incarnation: realInc, Seq: 1, SendNs: now}), now); err != nil {
		t.Fatal(err)
	}
	// n2, a member, signs a packet naming n1.
	if _, err := v.Verify(enc(Heartbeat{Node: "n1", To: "n0", Incarnation: math.MaxUint64, Seq: 1, SendNs: now}), now); err != nil {
		t.Fatalf("forged: %v", err)
	}
	lockedFor := 2 * int64(skew)
	for i := range 250 { // n1's next 250 periods of 100 ms
		at := now + int64(i+1)*100*ms
		_, err := v.Verify(enc(Heartbeat{Node: "n1", To: "n0", Incarnation: realInc, Seq: uint64(2 + i), SendNs: at}), at)
		if at-now > lockedFor && err != nil {
			t.Fatalf("%v after the forged packet, n1's heartbeat is still refused: %v", time.Duration(at-now), err)
		}
		if at-now <= lockedFor && err == nil {
			t.Fatalf("%v after the forged packet, n1's older incarnation took over (before 2·maxSkew)", time.Duration(at-now))
		}
	}
	at := now + 251*100*ms
	if _, err := v.Verify(enc(Heartbeat{Node: "n1", To: "n0", Incarnation: realInc, Seq: 77, SendNs: at, Probe: ProbeAnswer}), at); err != nil {
		t.Errorf("n1's probe answer after the lock-out: %v", err)
	}
}

// A restart whose clock is behind the previous start (a lower
// incarnation) is heard once the old incarnation has been silent for
// 2·maxSkew; a replay of the old incarnation's packets cannot bring it
// back after that, since by then the skew check refuses them (for a
// sender whose clock is within maxSkew of the receiver's, here 4 s
// ahead, the worst case).
func TestS41ARestartWithAClockBehindIsHeardAndOldPacketsStayOut(t *testing.T) {
	secret := []byte("s41-shared-cluster-secret")
	const skew = 5 * time.Second
	enc := encoder(t, secret)
	v := NewVerifier(secret, skew, "n0")
	t0 := time.Now().UnixNano()
	ahead := int64(4 * time.Second) // n1's clock, ahead of n0's
	oldInc, newInc := uint64(t0), uint64(t0-int64(time.Minute))
	var last []byte
	for i := range 20 { // the old incarnation's last 2 s
		at := t0 + int64(i)*100*ms
		last = enc(Heartbeat{Node: "n1", To: "n0", Incarnation: oldInc, Seq: uint64(1 + i), SendNs: at + ahead})
		if _, err := v.Verify(last, at); err != nil {
			t.Fatal(err)
		}
	}
	stopped := t0 + 19*100*ms
	// n1 restarts 3 s later with an incarnation a minute lower (its clock
	// was further ahead at its previous start, and NTP has since slewed it).
	refusedUntil := int64(0)
	for i := range 200 {
		at := stopped + 3*int64(time.Second) + int64(i)*100*ms
		_, err := v.Verify(enc(Heartbeat{Node: "n1", To: "n0", Incarnation: newInc, Seq: uint64(1 + i), SendNs: at + ahead}), at)
		if err != nil {
			refusedUntil = at
		}
	}
	if refusedUntil == 0 || refusedUntil-stopped > 2*int64(skew) {
		t.Fatalf("the restarted node was refused until %v after the old one stopped, want at most 2·maxSkew", time.Duration(refusedUntil-stopped))
	}
	// The new incarnation goes silent (it crashed) for 2·maxSkew; the old
	// one's last packet, replayed, is too old to be taken.
	at := stopped + 3*int64(time.Second) + 199*100*ms + 2*int64(skew) + 1
	if _, err := v.Verify(last, at); err == nil {
		t.Error("a replayed packet of the old incarnation brought it back after the new one fell silent")
	}
}

// PROPERTY (holds). Before the MAC only lengths are read, and every
// length bound is checked before a slice is taken: no input of any size
// up to and past MaxPacket panics, and nothing under the MAC is parsed
// for a packet with a wrong MAC (the answer is always "mac" or earlier).
func TestS41UnauthenticatedInputNeverReachesTheFields(t *testing.T) {
	secret := []byte("s41-shared-cluster-secret")
	good, _ := Heartbeat{Node: "n1", To: "n0", Incarnation: 1, Seq: 1, SendNs: 1, Region: "eu"}.Encode(secret)
	for n := 0; n <= MaxPacket+40; n++ {
		b := make([]byte, n)
		copy(b, good)
		for idLen := range 256 {
			if n > 4 {
				b[4] = byte(idLen)
			}
			_, err := Decode(b, []byte("other"))
			r, _ := ReasonOf(err)
			switch r {
			case RejectShort, RejectMagic, RejectVersion, RejectMalformed, RejectMAC:
			default:
				t.Fatalf("%d bytes, id length %d: %v", n, idLen, err)
			}
			if n <= 4 {
				break
			}
		}
	}
}

// PROPERTY (holds). The fixed fields' checks, reached with a valid MAC
// (a member with a bug): no table test had them. Each is refused as
// malformed, before and after the MAC as Decode's order says.
func TestS41MalformedFixedFieldsBehindAValidMAC(t *testing.T) {
	secret := []byte("s41-shared-cluster-secret")
	good, _ := Heartbeat{Node: "n1", To: "n0", Incarnation: 1, Seq: 1, SendNs: 1}.Encode(secret)
	at := func(field int) int { return 5 + 2 + 3 + 8*field } // after "EHB" v idLen "n1" toLen "n0"
	put := func(field int, v uint64) []byte {
		b := append([]byte(nil), good...)
		for i := range 8 {
			b[at(field)+i] = byte(v >> (56 - 8*i))
		}
		return sign(b, secret)
	}
	cases := map[string][]byte{
		"fpr NaN":         put(4, math.Float64bits(math.NaN())),
		"fpr 1.5":         put(4, math.Float64bits(1.5)),
		"fpr -0.1":        put(4, math.Float64bits(-0.1)),
		"fnr +Inf":        put(5, math.Float64bits(math.Inf(1))),
		"echo hold -1":    put(8, ^uint64(0)),
		"id length 0":     func() []byte { b := append([]byte(nil), good...); b[4] = 0; return sign(b, secret) }(),
		"id length 65":    func() []byte { b := append([]byte(nil), good...); b[4] = 65; return sign(b, secret) }(),
		"id past the end": func() []byte { b := append([]byte(nil), good...); b[4] = 60; return sign(b, secret) }(),
		"to length 0":     func() []byte { b := append([]byte(nil), good...); b[7] = 0; return sign(b, secret) }(),
		"to length 65":    func() []byte { b := append([]byte(nil), good...); b[7] = 65; return sign(b, secret) }(),
		"to past the end": func() []byte { b := append([]byte(nil), good...); b[7] = 64; return sign(b, secret) }(),
		"longer than max": sign(append(append([]byte(nil), good...), make([]byte, MaxPacket)...), secret),
	}
	for name, b := range cases {
		_, err := Decode(b, secret)
		if r, _ := ReasonOf(err); r != RejectMalformed {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}
}

// FuzzS41DecodeSigned gets past the MAC (FuzzDecodeHeartbeat's
// mutations never carry a valid one): the fuzzer's bytes are signed, so
// the fixed fields and the tail are parsed. An accepted packet must
// re-encode to the same bytes, and RTT on it must not panic.
func FuzzS41DecodeSigned(f *testing.F) {
	secret := []byte("k")
	for _, h := range []Heartbeat{{Node: "n", To: "m", Seq: 1, SendNs: 1}, {Node: "node-7", To: "node-8", Seq: 9, SendNs: 1, EchoSeq: 3, EchoSendNs: 5, EchoHoldNs: 1, Region: "eu", Probe: ProbeAsk}} {
		b, _ := h.Encode(secret)
		f.Add(b[:len(b)-macLen])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := sign(append(append([]byte(nil), body...), make([]byte, macLen)...), secret)
		h, err := Decode(b, secret)
		if err != nil {
			return
		}
		again, err := h.Encode(secret)
		if err != nil || string(again) != string(b) {
			t.Fatalf("accepted %x, re-encodes as %x (%v)", b, again, err)
		}
		_, _ = RTT(h, time.Now().UnixNano())
	})
}
