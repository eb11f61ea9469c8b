package cluster

import (
	"strings"
	"testing"
	"time"
)

// Found by session 21's review, now mended: a node refused for its cluster.secret logged "membership
// packets from this address cannot be decrypted" with from="": the seed that refused it was not
// named, and every refusing seed shared one log key, so only the first was ever reported.
// mlLogWriter now reads the seed from memberlist's "failed to join ADDR:".
//
// x, with another cluster.secret, joins through a. a's memberlist cannot
// decrypt x's join and answers with an error sealed under a's key; x's
// memberlist logs "failed to join 127.0.0.1:PORT: No installed keys could
// decrypt the message" (no "from="), which mlLogWriter turns into the
// warning with an empty source (membership.go mlLogWriter: the source is
// read only from "from="; the key is then "gossip key " for every seed).
func TestS21RefusedJoinerNamesTheSeedThatRefusedIt(t *testing.T) {
	nodes := s21Cluster(t, []string{"a", "b"})
	a := nodes["a"]
	x := s21Start(t, "x", map[string]string{"a": a.addr}, func(c *Config) { c.Secret = []byte("another-secret-entirely") })
	var line string
	s21Eventually(t, 15*time.Second, "x logs that the seed's membership traffic cannot be decrypted", func() bool {
		for _, l := range strings.Split(x.log.String(), "\n") {
			if strings.Contains(l, "cannot be decrypted") {
				line = l
				return true
			}
		}
		return false
	})
	if strings.Contains(line, `from=""`) || !strings.Contains(line, "127.0.0.1") {
		t.Errorf("the refused node's warning does not name the seed (%s) that refused it:\n%s", a.addr, line)
	}
	if x.c.mlReady.Load().ml.NumMembers() != 1 {
		t.Errorf("x, with another secret, has members: %s", s21Describe(x))
	}
}
