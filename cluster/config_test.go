package cluster

import (
	"strings"
	"testing"
	"time"
)

// TestDefaultConfigValidates: the defaults with a name and a secret run,
// and each bad setting is refused naming the field.
func TestDefaultConfigValidates(t *testing.T) {
	base := DefaultConfig()
	base.NodeID, base.Secret = "n1", []byte("a-secret-of-16-bytes")
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for field, mod := range map[string]func(*Config){
		"NodeID":      func(c *Config) { c.NodeID = "" },
		"Secret":      func(c *Config) { c.Secret = nil },
		"Period":      func(c *Config) { c.Period = 0 },
		"PeerTimeout": func(c *Config) { c.PeerTimeout = -time.Second },
		"Arity":       func(c *Config) { c.Arity = 1 },
		"Q":           func(c *Config) { c.Q = 0 },
		"Detector":    func(c *Config) { c.Detector = "oracle" },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming it", field, err)
		}
	}
}
