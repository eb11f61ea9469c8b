package cluster

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// memberlist's message types (its net.go; part of its protocol).
const (
	s21SuspectMsg  = 3
	s21AliveMsg    = 4
	s21DeadMsg     = 5
	s21PushPullMsg = 6
	s21EncryptMsg  = 10
)

type s21Alive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

type s21Dead struct {
	Incarnation uint32
	Node        string
	From        string
}

type s21PushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

type s21PushNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       uint8
	Vsn         []uint8
}

// s21Encode is memberlist's encode: the type byte, then msgpack of each value.
func s21Encode(t *testing.T, typ byte, vals ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte(typ)
	enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
	for _, v := range vals {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// s21Seal is memberlist's encryption version 1: version, nonce, AES-GCM.
func s21Seal(t *testing.T, key, msg, aad []byte) []byte {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	return gcm.Seal(append([]byte{1}, nonce...), nonce, msg, aad)
}

func s21SendUDP(t *testing.T, from *net.UDPConn, to string, b []byte) {
	t.Helper()
	addr, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.WriteToUDP(b, addr); err != nil {
		t.Fatal(err)
	}
}

// s21Stream opens a tagged membership stream to addr and writes b.
func s21Stream(t *testing.T, addr string, b []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(append([]byte{gossipTag}, b...))
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, _ = c.Read(make([]byte, 512))
	_ = c.Close()
}

// HOLDS: a stranger who does not know cluster.secret sends, on real
// sockets, well-formed memberlist messages (proved well-formed by the
// control at the end, which seals the same alive message with the right
// key): a plaintext alive for a fake member at the stranger's address,
// the same sealed with another secret's key, plaintext dead and suspect
// messages about a healthy member, a plaintext push/pull stream carrying
// the fake member, a stream claiming a 20 MB encrypted state and then
// closing, random tagged junk, and forged heartbeats in a member's name.
// Nothing is added or removed, the healthy members keep trusting each
// other, and the refusals are counted as "plain" and "key".
func TestS21StrangerCannotForgeMembership(t *testing.T) {
	nodes := s21Cluster(t, []string{"a", "b"})
	a, b := nodes["a"], nodes["b"]
	evil, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	evilPort := uint16(evil.LocalAddr().(*net.UDPAddr).Port)
	meta := nodeMeta{Incarnation: 7, Epoch: 1}.encode()
	vsn := []uint8{1, 5, 2, 0, 0, 0}
	alive := s21Encode(t, s21AliveMsg, s21Alive{Incarnation: 1 << 20, Node: "evil", Addr: net.IPv4(127, 0, 0, 1).To4(), Port: evilPort, Meta: meta, Vsn: vsn})
	wrongKey := gossipKey([]byte("a-secret-the-stranger-guessed"))
	for range 5 {
		s21SendUDP(t, evil, a.addr, append([]byte{gossipTag}, alive...))
		s21SendUDP(t, evil, a.addr, append([]byte{gossipTag}, s21Seal(t, wrongKey, alive, nil)...))
		s21SendUDP(t, evil, a.addr, append([]byte{gossipTag}, s21Encode(t, s21DeadMsg, s21Dead{Incarnation: 1 << 30, Node: "b", From: "b"})...))
		s21SendUDP(t, evil, a.addr, append([]byte{gossipTag}, s21Encode(t, s21SuspectMsg, s21Dead{Incarnation: 1 << 30, Node: "b", From: "a"})...))
		junk := make([]byte, 1400)
		_, _ = rand.Read(junk)
		s21SendUDP(t, evil, a.addr, append([]byte{gossipTag}, junk...))
		// A heartbeat in b's name without the secret.
		s21SendUDP(t, evil, a.addr, append([]byte("EHB\x04\x01b"), junk[:200]...))
	}
	pp := s21Encode(t, s21PushPullMsg, s21PushPullHeader{Nodes: 1, Join: true},
		s21PushNodeState{Name: "evil", Addr: net.IPv4(127, 0, 0, 1).To4(), Port: evilPort, Meta: meta, Incarnation: 1 << 20, Vsn: vsn})
	s21Stream(t, a.addr, pp)
	var big [5]byte
	big[0] = s21EncryptMsg
	binary.BigEndian.PutUint32(big[1:], 20<<20)
	s21Stream(t, a.addr, big[:])
	s21Eventually(t, 5*time.Second, "a counted the refusals", func() bool {
		return testutil.ToFloat64(a.c.metrics.GossipRejected.WithLabelValues("plain")) > 0 &&
			testutil.ToFloat64(a.c.metrics.GossipRejected.WithLabelValues("key")) > 0
	})
	time.Sleep(500 * time.Millisecond)
	for _, n := range []*s21Node{a, b} {
		if _, ok := n.c.mlView.snapshot()["evil"]; ok || n.member("evil") {
			t.Errorf("%s took the stranger's fake member: %s", n.id, s21Describe(n))
		}
	}
	if !a.member("b") || !a.trusts("b") || !b.member("a") || !b.trusts("a") {
		t.Errorf("a healthy member was removed or distrusted:\n%s", s21Describe(a, b))
	}
	if mac := a.c.verifier.Rejections(); mac["mac"] == 0 && mac["malformed"] == 0 {
		t.Errorf("forged heartbeats not counted: %v", mac)
	}
	// Control: the same alive message sealed with the cluster's key is a
	// member at once (so what was refused above was well-formed).
	s21SendUDP(t, evil, a.addr, append([]byte{gossipTag}, s21Seal(t, gossipKey([]byte(s21Secret)), alive, nil)...))
	s21Eventually(t, 5*time.Second, "control: a sealed alive adds the member", func() bool {
		_, ok := a.c.mlView.snapshot()["evil"]
		return ok
	})
}
