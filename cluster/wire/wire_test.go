package wire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"reflect"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// encoder returns h.Encode with the secret, failing the test on an error.
func encoder(t *testing.T, secret []byte) func(Heartbeat) []byte {
	return func(h Heartbeat) []byte {
		b, err := h.Encode(secret)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestHeartbeatRejections(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now().UnixNano()
	hb := Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 10, SendNs: now, Epoch: 3, FPR: 0.01, FNR: 0.1}
	enc := encoder(t, secret)
	v := NewVerifier(secret, 5*time.Second, "n0")
	if got, err := v.Verify(enc(hb), now); err != nil || !reflect.DeepEqual(got, hb) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	good := enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 11, SendNs: now})
	cases := []struct {
		name string
		b    []byte
		now  int64
		want RejectReason
	}{
		{"forged", func() []byte { b, _ := hb.Encode([]byte("wrong")); return b }(), now, RejectMAC},
		{"tampered", func() []byte { b := append([]byte(nil), good...); b[10] ^= 1; return b }(), now, RejectMAC},
		{"short", good[:20], now, RejectShort},
		{"magic", append([]byte("XHB"), good[3:]...), now, RejectMagic},
		{"version", func() []byte { b := append([]byte(nil), good...); b[3] = 3; return b }(), now, RejectVersion},
		{"another receiver", enc(Heartbeat{To: "n2", Node: "n1", Incarnation: 5, Seq: 13, SendNs: now}), now, RejectReceiver},
		{"skew", enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 12, SendNs: now - int64(time.Minute)}), now, RejectSkew},
		{"replay", enc(hb), now, RejectReplay},
		{"old incarnation", enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 4, Seq: 99, SendNs: now}), now, RejectIncarnation},
	}
	for _, tc := range cases {
		_, err := v.Verify(tc.b, tc.now)
		if r, _ := ReasonOf(err); r != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	// Reordered within the window is fine once; a restart (new incarnation) resets.
	if _, err := v.Verify(good, now); err != nil {
		t.Errorf("in-window reordered heartbeat: %v", err)
	}
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 6, Seq: 1, SendNs: now}), now); err != nil {
		t.Errorf("new incarnation: %v", err)
	}
	counts := v.Rejections()
	if counts[RejectMAC] != 2 || counts[RejectReplay] != 1 {
		t.Errorf("counts %v", counts)
	}
	if _, err := (Heartbeat{To: "n0", Node: strings.Repeat("x", 65)}).Encode(secret); err == nil {
		t.Error("oversized node id encoded")
	}
}

// sign replaces b's MAC with a valid one, so that a malformed body gets
// past authentication and reaches the parser.
func sign(b, secret []byte) []byte {
	body := append([]byte(nil), b[:len(b)-macLen]...)
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(body)
}

// TestTailRoundTripAndMalformed: the flags and the region round-trip;
// the largest heartbeat is MaxPacket; every malformed tail is refused,
// even when its MAC is valid (a peer with the secret but a bug); and the
// rumor-carrying versions 1 and 2 are refused as another version.
func TestTailRoundTripAndMalformed(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now().UnixNano()
	hb := Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 1, SendNs: now, Monitors: true, Region: "eu-west"}
	b, err := hb.Encode(secret)
	if err != nil || b[3] != hbVersion {
		t.Fatalf("encode: %v, version %d", err, b[3])
	}
	if got, err := Decode(b, secret); err != nil || !reflect.DeepEqual(got, hb) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	full := Heartbeat{To: strings.Repeat("t", 64), Node: strings.Repeat("a", 64), Incarnation: 1, Seq: 1, SendNs: now, Region: strings.Repeat("r", MaxRegionLen)}
	if fb, err := full.Encode(secret); err != nil || len(fb) != MaxPacket {
		t.Fatalf("largest heartbeat: %d bytes, %v; MaxPacket %d", len(fb), err, MaxPacket)
	}
	if _, err := (Heartbeat{To: "n0", Node: "n", Region: strings.Repeat("r", MaxRegionLen+1)}).Encode(secret); err == nil {
		t.Error("encoded an oversized region")
	}
	flagsAt := 5 + len(hb.Node) + 1 + len(hb.To) + 8*9
	mutate := func(f func(b []byte) []byte) []byte {
		return sign(f(append([]byte(nil), b...)), secret)
	}
	cases := []struct {
		name string
		b    []byte
		want RejectReason
	}{
		{"unknown flag", mutate(func(b []byte) []byte { b[flagsAt] |= 8; return b }), RejectMalformed},
		{"probe and answer at once", mutate(func(b []byte) []byte { b[flagsAt] |= flagAsk | flagAnswer; return b }), RejectMalformed},
		{"region length past the end", mutate(func(b []byte) []byte { b[flagsAt+1] = MaxRegionLen; return b }), RejectMalformed},
		{"region length above MaxRegionLen", mutate(func(b []byte) []byte { b[flagsAt+1] = MaxRegionLen + 1; return b }), RejectMalformed},
		{"region length short of the end", mutate(func(b []byte) []byte { b[flagsAt+1] = 2; return b }), RejectMalformed},
		{"trailing byte", func() []byte {
			h := append(append([]byte(nil), b[:len(b)-macLen]...), 0)
			return sign(append(h, make([]byte, macLen)...), secret)
		}(), RejectMalformed},
		{"version 2 (rumors)", mutate(func(b []byte) []byte { b[3] = 2; return b }), RejectVersion},
		{"version 1", mutate(func(b []byte) []byte { b[3] = 1; return b }), RejectVersion},
	}
	for _, tc := range cases {
		_, err := Decode(tc.b, secret)
		if r, _ := ReasonOf(err); r != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

// TestProbesKeepOutOfTheReplayWindow: a probe and its answer round-trip
// with their kind; they are verified outside the heartbeats' replay
// window (their Seq is a nonce: a nonce far below the window, or one
// seen before, is not a replay, and the heartbeats' window does not move
// for them), but an older incarnation's probe is refused, a newer one's
// does not reset the window, skew still counts, and an unknown kind does
// not encode.
func TestProbesKeepOutOfTheReplayWindow(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now().UnixNano()
	enc := encoder(t, secret)
	v := NewVerifier(secret, 5*time.Second, "n0")
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 1000, SendNs: now}), now); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []ProbeKind{ProbeAsk, ProbeAnswer} {
		p := Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 3, SendNs: now, Probe: kind}
		for range 2 { // twice: the same nonce is no replay
			got, err := v.Verify(enc(p), now)
			if err != nil || !reflect.DeepEqual(got, p) {
				t.Fatalf("probe kind %d: %+v %v", kind, got, err)
			}
		}
		if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 4, Seq: 3, SendNs: now, Probe: kind}), now); err == nil {
			t.Errorf("kind %d from an older incarnation accepted", kind)
		}
		if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 3, SendNs: now - int64(time.Minute), Probe: kind}), now); err == nil {
			t.Errorf("kind %d with a skewed clock accepted", kind)
		}
	}
	// A probe with a huge nonce did not move the window: the next
	// heartbeat is accepted, and one already seen is still a replay.
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 1 << 60, SendNs: now, Probe: ProbeAsk}), now); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 1001, SendNs: now}), now); err != nil {
		t.Errorf("heartbeat after probes: %v", err)
	}
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 1000, SendNs: now}), now); err == nil {
		t.Error("replayed heartbeat accepted after probes")
	}
	// A newer incarnation's probe leaves the window to its heartbeats.
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 6, Seq: 1, SendNs: now, Probe: ProbeAsk}), now); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(enc(Heartbeat{To: "n0", Node: "n1", Incarnation: 5, Seq: 1002, SendNs: now}), now); err != nil {
		t.Errorf("a newer incarnation's probe reset the window: %v", err)
	}
	if _, err := (Heartbeat{To: "n0", Node: "n1", Probe: 3}).Encode(secret); err == nil {
		t.Error("encoded an unknown probe kind")
	}
}

func TestRTTFromEcho(t *testing.T) {
	h := Heartbeat{EchoSeq: 3, EchoSendNs: 1000 * ms, EchoHoldNs: 20 * ms}
	if rtt, ok := RTT(h, 1050*ms); !ok || rtt != 30*time.Millisecond {
		t.Errorf("rtt %v %v", rtt, ok)
	}
	if _, ok := RTT(Heartbeat{}, 5); ok {
		t.Error("rtt without echo")
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	b, _ := Heartbeat{To: "n0", Node: "n", Seq: 1, SendNs: 1}.Encode([]byte("k"))
	f.Add(b)
	f.Add([]byte("EHB\x04\x05"))
	b2, _ := Heartbeat{To: "n0", Node: "n", Seq: 1, SendNs: 1, Monitors: true, Region: "us"}.Encode([]byte("k"))
	f.Add(b2)
	b3, _ := Heartbeat{To: "n0", Node: "n", Seq: 7, SendNs: 1, Probe: ProbeAnswer}.Encode([]byte("k"))
	f.Add(b3)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b, []byte("k"))
		if err == nil {
			if h.Node == "" || len(h.Node) > maxIDLen || len(h.Region) > MaxRegionLen {
				t.Fatalf("accepted node %q region %q", h.Node, h.Region)
			}
			again, _ := h.Encode([]byte("k"))
			if !bytes.Equal(again, b) {
				t.Fatal("accepted a packet that does not re-encode identically")
			}
		}
	})
}

// FuzzDecodeTail reaches the tail parser (flags, region) directly:
// behind the MAC a mutated packet almost never gets there.
func FuzzDecodeTail(f *testing.F) {
	b, _ := Heartbeat{To: "n0", Node: "n", Seq: 1, SendNs: 1, Monitors: true, Region: "eu"}.Encode([]byte("k"))
	f.Add(b[5+1+1+2+8*9 : len(b)-macLen])
	f.Add([]byte{0, 0})
	f.Add([]byte{3, 64})
	f.Add([]byte{flagAsk, 0})
	f.Add([]byte{flagAnswer | flagMonitors, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		monitors, probe, region, err := decodeTail(p)
		if err != nil {
			return
		}
		h := Heartbeat{To: "n0", Node: "n", Monitors: monitors, Probe: probe, Region: region}
		enc, err := h.Encode([]byte("k"))
		if err != nil {
			t.Fatalf("an accepted tail does not encode: %v", err)
		}
		if !bytes.Equal(enc[5+1+1+2+8*9:len(enc)-macLen], p) {
			t.Fatal("accepted a tail that does not re-encode identically")
		}
	})
}
