package proxy

import (
	"net/url"
	"strings"
	"testing"
)

// TestPurgeRefusesWhatItWouldMisread: a soft= spelling that would be read
// as a hard purge, and a prefix that is neither a path nor a URL (which
// names no key and "purged 0" hid), are refused naming the parameter (an
// operator's walk-through: soft=yes purged hard, prefix=img/ purged
// nothing).
func TestPurgeRefusesWhatItWouldMisread(t *testing.T) {
	for _, v := range []string{"", "0", "1", "true", "TRUE", "false"} {
		if err := CheckSoft(url.Values{"soft": {v}}); err != nil {
			t.Errorf("soft=%q refused: %v", v, err)
		}
	}
	for _, v := range []string{"yes", "on", "2", " 1"} {
		if err := CheckSoft(url.Values{"soft": {v}}); err == nil || !strings.Contains(err.Error(), "soft=") {
			t.Errorf("soft=%q: %v, want it refused", v, err)
		}
	}
	for _, c := range []struct {
		prefix string
		ok     bool
	}{{"/img/", true}, {"https://shop.test/img/", true}, {"img/", false}, {"shop.test/img/", false}, {"*", false}} {
		err := PurgeRequest{Prefix: c.prefix}.Validate()
		if (err == nil) != c.ok {
			t.Errorf("prefix %q: %v", c.prefix, err)
		}
	}
}
