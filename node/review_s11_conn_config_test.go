package node

import (
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
)

// TestS11ConnConfigRejectsNegatives: a negative bound is refused, the
// key named.
func TestS11ConnConfigRejectsNegatives(t *testing.T) {
	for _, key := range []string{"max_connections", "max_connections_per_client"} {
		for _, v := range []string{"-1", "'-5'", "1.5", "abc"} {
			_, err := config.LoadBytes([]byte("origin: {url: 'http://127.0.0.1:1'}\nlimits: {" + key + ": " + v + "}\n"))
			if err == nil || !strings.Contains(err.Error(), "limits."+key) {
				t.Errorf("%s=%s: %v", key, v, err)
			} else {
				t.Logf("%s=%s: %v", key, v, err)
			}
		}
	}
}
