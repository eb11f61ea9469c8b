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

func TestHeartbeatRejections(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now().UnixNano()
	hb := Heartbeat{Node: "n1", Incarnation: 5, Seq: 10, SendNs: now, Epoch: 3, FPR: 0.01, FNR: 0.1}
	enc := func(h Heartbeat) []byte {
		b, err := h.Encode(secret)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v := NewVerifier(secret, 5*time.Second)
	if got, err := v.Verify(enc(hb), now); err != nil || !reflect.DeepEqual(got, hb) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	good := enc(Heartbeat{Node: "n1", Incarnation: 5, Seq: 11, SendNs: now})
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
		{"skew", enc(Heartbeat{Node: "n1", Incarnation: 5, Seq: 12, SendNs: now - int64(time.Minute)}), now, RejectSkew},
		{"replay", enc(hb), now, RejectReplay},
		{"old incarnation", enc(Heartbeat{Node: "n1", Incarnation: 4, Seq: 99, SendNs: now}), now, RejectIncarnation},
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
	if _, err := v.Verify(enc(Heartbeat{Node: "n1", Incarnation: 6, Seq: 1, SendNs: now}), now); err != nil {
		t.Errorf("new incarnation: %v", err)
	}
	counts := v.Rejections()
	if counts[RejectMAC] != 2 || counts[RejectReplay] != 1 {
		t.Errorf("counts %v", counts)
	}
	if _, err := (Heartbeat{Node: strings.Repeat("x", 65)}).Encode(secret); err == nil {
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

// TestRumorsRoundTripAndMalformed: version 2 carries the sender's version
// and its rumors; a heartbeat without them is written as version 1 (read
// by older releases); and every malformed tail is refused, even when its
// MAC is valid (a peer with the secret but a bug).
func TestRumorsRoundTripAndMalformed(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Now().UnixNano()
	hb := Heartbeat{Node: "n1", Incarnation: 5, Seq: 1, SendNs: now, Ver: 3, Rumors: []Rumor{
		{Node: "n2", Incarnation: 7, Ver: 0, Suspect: true}, {Node: strings.Repeat("z", 64), Incarnation: 1, Ver: 9},
	}}
	b, err := hb.Encode(secret)
	if err != nil || b[3] != hbVersion2 {
		t.Fatalf("encode: %v, version %d", err, b[3])
	}
	if got, err := Decode(b, secret); err != nil || !reflect.DeepEqual(got, hb) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if len(b) > MaxPacket {
		t.Fatalf("%d bytes > MaxPacket %d", len(b), MaxPacket)
	}
	plain, _ := Heartbeat{Node: "n1", Incarnation: 5, Seq: 2, SendNs: now}.Encode(secret)
	if plain[3] != hbVersion1 {
		t.Fatalf("a heartbeat without rumors is version %d", plain[3])
	}
	full := Heartbeat{Node: strings.Repeat("a", 64), Incarnation: 1, Seq: 1, SendNs: now, Ver: 1, Region: strings.Repeat("r", MaxRegionLen)}
	for range MaxRumors {
		full.Rumors = append(full.Rumors, Rumor{Node: strings.Repeat("b", 64), Incarnation: 1, Ver: 1, Suspect: true})
	}
	if fb, err := full.Encode(secret); err != nil || len(fb) != MaxPacket {
		t.Fatalf("largest heartbeat: %d bytes, %v; MaxPacket %d", len(fb), err, MaxPacket)
	}
	full.Rumors = append(full.Rumors, Rumor{Node: "c", Incarnation: 1})
	if _, err := full.Encode(secret); err == nil {
		t.Error("encoded more than MaxRumors rumors")
	}
	if _, err := (Heartbeat{Node: "n", Rumors: []Rumor{{}}}).Encode(secret); err == nil {
		t.Error("encoded a rumor without a node id")
	}
	if _, err := (Heartbeat{Node: "n", Region: strings.Repeat("r", MaxRegionLen+1)}).Encode(secret); err == nil {
		t.Error("encoded an oversized region")
	}
	// A region alone makes a version-2 heartbeat.
	rb, _ := Heartbeat{Node: "n1", Incarnation: 5, Seq: 3, SendNs: now, Region: "eu-west"}.Encode(secret)
	if got, err := Decode(rb, secret); err != nil || rb[3] != hbVersion2 || got.Region != "eu-west" || got.Ver != 0 {
		t.Fatalf("region round trip: %+v %v", got, err)
	}
	tail := len(b) - macLen // offset of the MAC; the rumors end here
	verAt := 5 + len(hb.Node) + 8*9
	mutate := func(f func(b []byte) []byte) []byte {
		return sign(f(append([]byte(nil), b...)), secret)
	}
	cases := []struct {
		name string
		b    []byte
	}{
		{"v2 without ver or rumors", func() []byte {
			h := append([]byte(nil), plain[:len(plain)-macLen]...)
			h[3] = hbVersion2
			h = append(h, make([]byte, 10)...) // ver 0, no region, no rumors
			return sign(append(h, make([]byte, macLen)...), secret)
		}()},
		{"v2 with no tail", func() []byte {
			h := append([]byte(nil), plain...)
			h[3] = hbVersion2
			return sign(h, secret)
		}()},
		{"count above MaxRumors", mutate(func(b []byte) []byte { b[verAt+9] = MaxRumors + 1; return b })},
		{"count above the rumors present", mutate(func(b []byte) []byte { b[verAt+9] = 3; return b })},
		{"count below the rumors present", mutate(func(b []byte) []byte { b[verAt+9] = 1; return b })},
		{"rumor id length 0", mutate(func(b []byte) []byte { b[verAt+10] = 0; return b })},
		{"rumor id length past the end", mutate(func(b []byte) []byte { b[verAt+10] = 200; return b })},
		{"region length past the end", mutate(func(b []byte) []byte { b[verAt+8] = MaxRegionLen; return b })},
		{"region length above MaxRegionLen", mutate(func(b []byte) []byte { b[verAt+8] = MaxRegionLen + 1; return b })},
		{"rumor state 2", mutate(func(b []byte) []byte { b[tail-1] = 2; return b })},
		{"trailing byte", func() []byte {
			h := append(append([]byte(nil), b[:tail]...), 0)
			return sign(append(h, make([]byte, macLen)...), secret)
		}()},
		{"v1 with a tail", func() []byte {
			h := append([]byte(nil), b...)
			h[3] = hbVersion1
			return sign(h, secret)
		}()},
	}
	for _, tc := range cases {
		_, err := Decode(tc.b, secret)
		if r, _ := ReasonOf(err); r != RejectMalformed {
			t.Errorf("%s: %v, want %s", tc.name, err, RejectMalformed)
		}
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
	b, _ := Heartbeat{Node: "n", Seq: 1, SendNs: 1}.Encode([]byte("k"))
	f.Add(b)
	f.Add([]byte("EHB\x01\x05"))
	b2, _ := Heartbeat{Node: "n", Seq: 1, SendNs: 1, Ver: 2, Rumors: []Rumor{{Node: "m", Incarnation: 3, Suspect: true}}}.Encode([]byte("k"))
	f.Add(b2)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b, []byte("k"))
		if err == nil {
			if h.Node == "" || len(h.Node) > maxIDLen || len(h.Rumors) > MaxRumors {
				t.Fatalf("accepted node %q with %d rumors", h.Node, len(h.Rumors))
			}
			again, _ := h.Encode([]byte("k"))
			if !bytes.Equal(again, b) {
				t.Fatal("accepted a packet that does not re-encode identically")
			}
		}
	})
}

// FuzzDecodeRumors reaches the version-2 tail parser (version, region,
// rumors) directly: behind the MAC a mutated packet almost never gets there.
func FuzzDecodeRumors(f *testing.F) {
	b, _ := Heartbeat{Node: "n", Seq: 1, SendNs: 1, Ver: 2, Rumors: []Rumor{{Node: "m", Incarnation: 3, Suspect: true}}}.Encode([]byte("k"))
	f.Add(b[5+1+8*9 : len(b)-macLen])
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 64})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 'e', 'u', 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		ver, region, rumors, err := decodeTail(p)
		if err != nil {
			return
		}
		h := Heartbeat{Node: "n", Ver: ver, Region: region, Rumors: rumors}
		enc, err := h.Encode([]byte("k"))
		if err != nil {
			t.Fatalf("accepted rumors do not encode: %v", err)
		}
		if !bytes.Equal(enc[5+1+8*9:len(enc)-macLen], p) {
			t.Fatal("accepted rumors that do not re-encode identically")
		}
	})
}
