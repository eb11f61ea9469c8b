package wire

import (
	"bytes"
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
	if got, err := v.Verify(enc(hb), now); err != nil || got != hb {
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
		{"version", func() []byte { b := append([]byte(nil), good...); b[3] = 2; return b }(), now, RejectVersion},
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
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b, []byte("k"))
		if err == nil {
			if h.Node == "" || len(h.Node) > maxIDLen {
				t.Fatalf("accepted node %q", h.Node)
			}
			again, _ := h.Encode([]byte("k"))
			if !bytes.Equal(again, b) {
				t.Fatal("accepted a packet that does not re-encode identically")
			}
		}
	})
}
