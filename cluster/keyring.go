package cluster

// The cluster secret is memberlist's encryption key (AES-GCM over every
// membership packet and stream). memberlist keeps a keyring: several keys
// are accepted, one (the primary) encrypts. A key is derived from a secret
// the way cluster.secret is, so operators rotate secrets, never raw keys:
// install the new secret on every node, make it primary on every node,
// remove the old one, then update cluster.secret in the configuration
// for the next restart (docs/cluster.md, "Rotating the membership key").
// Heartbeats and peer HTTP keep their own authentication by
// cluster.secret (HMAC-SHA256).

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// minSecretLen matches cluster.secret's own bound.
const minSecretLen = 16

// gossipKey derives memberlist's AES-256 key from a secret. A separate
// derivation from the heartbeat MAC's use of the secret keeps the two
// uses from sharing a key.
func gossipKey(secret []byte) []byte {
	sum := sha256.Sum256(append([]byte("edge membership key\x00"), secret...))
	return sum[:]
}

// keyFingerprint names a key on the status page without revealing it.
func keyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:6])
}

// KeyState is one installed membership key.
type KeyState struct {
	Fingerprint string `json:"fingerprint"`
	Primary     bool   `json:"primary"`
}

// Keys lists the installed membership keys, the primary first.
func (c *Cluster) Keys() []KeyState {
	primary := c.keyring.GetPrimaryKey()
	var out []KeyState
	for _, k := range c.keyring.GetKeys() {
		out = append(out, KeyState{Fingerprint: keyFingerprint(k), Primary: string(k) == string(primary)})
	}
	slices.SortStableFunc(out, func(a, b KeyState) int {
		switch {
		case a.Primary == b.Primary:
			return 0
		case a.Primary:
			return -1
		}
		return 1
	})
	return out
}

// ChangeKey installs ("install"), makes primary ("use") or removes
// ("remove") the membership key derived from secret.
func (c *Cluster) ChangeKey(op string, secret []byte) error {
	if len(secret) < minSecretLen {
		return fmt.Errorf("secret of %d bytes, want at least %d", len(secret), minSecretLen)
	}
	key := gossipKey(secret)
	switch op {
	case "install":
		return c.keyring.AddKey(key)
	case "use":
		if !slices.ContainsFunc(c.keyring.GetKeys(), func(k []byte) bool { return string(k) == string(key) }) {
			return errors.New("that key is not installed: install it first")
		}
		return c.keyring.UseKey(key)
	case "remove":
		return c.keyring.RemoveKey(key)
	}
	return fmt.Errorf("unknown operation %q (want install, use or remove)", op)
}
