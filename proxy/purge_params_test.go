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
		if _, err := CheckPurgeQuery("soft=" + url.QueryEscape(v)); err != nil {
			t.Errorf("soft=%q refused: %v", v, err)
		}
	}
	for _, v := range []string{"yes", "on", "2", " 1"} {
		if _, err := CheckPurgeQuery("soft=" + url.QueryEscape(v)); err == nil || !strings.Contains(err.Error(), "soft=") {
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

// TestPurgeQueryRefusesWhatItWouldDrop: a parameter the purge does not
// know or given twice, a local= it would misread, and a url or prefix no
// request names are refused naming the parameter (a review's
// TestS29AdminPurgeRefusesParametersItWouldDrop: each answered 200 having
// purged something else).
func TestPurgeQueryRefusesWhatItWouldDrop(t *testing.T) {
	for _, raw := range []string{
		"url=http%3A%2F%2Fshop.test%2Fsearch%3Fq%3Dx%26page%3D2", "prefix=/img/&soft=1&local=true", "tag=t&local=0", "url=http://shop.test/a",
		"url=http://shop.test/my%20file.pdf", "url=http://shop.test/a%2Bb",
	} {
		if _, err := CheckPurgeQuery(raw); err != nil {
			t.Errorf("%s refused: %v", raw, err)
		}
	}
	for raw, names := range map[string]string{
		"url=http://shop.test/a&url=http://shop.test/b": "url given 2 times",
		"url=http://shop.test/search?q=x&page=2":        `unknown parameter "page"`,
		"url=http://shop.test/search?q=a+b":             "'+'",
		"prefix=/a%09b":                                 "control",
		"url=http://shop.test/a&local=yes":              "local=",
		"url=http://shop.test/a&local=1&local=1":        "local given 2 times",
		"tag=t&Soft=1":                                  `unknown parameter "Soft"`,
	} {
		if _, err := CheckPurgeQuery(raw); err == nil || !strings.Contains(err.Error(), names) {
			t.Errorf("%s: %v, want it refused naming %q", raw, err, names)
		}
	}
}

// TestPurgePrefixIsEscapedAsKeysAre: a prefix the admin query decoded
// (%20 to a space, %C3%A9 to é) is compared with keys in the escaping
// keys hold; an escaped one (a peer's) is unchanged.
func TestPurgePrefixIsEscapedAsKeysAre(t *testing.T) {
	for raw, want := range map[string]string{
		"prefix=/docs/a%20b/":   "/docs/a%20b/",
		"prefix=/caf%C3%A9/":    "/caf%C3%A9/",
		"prefix=/docs/a%2520b/": "/docs/a%20b/",
		"prefix=http://h/x%20y": "http://h/x%20y",
		"prefix=/plain/":        "/plain/",
	} {
		q, _ := url.ParseQuery(raw)
		if got := ParsePurgeQuery(q).Prefix; got != want {
			t.Errorf("%s: prefix %q, want %q", raw, got, want)
		}
	}
}
