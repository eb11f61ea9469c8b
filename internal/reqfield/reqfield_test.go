package reqfield

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	for name, want := range map[string]Class{
		"Accept-Language": Neutral, "COOKIE": Neutral, "sec-ch-ua-mobile": Neutral, "Sec-Fetch-Mode": Neutral,
		"Traceparent": Neutral, "Via": Neutral, "Surrogate-Capability": Neutral,
		"X-Forwarded-For": Forwarding, "X-Forwarded-Prefix": Forwarding, "x-forwarded-anything-new": Forwarding,
		"X-Host": Forwarding, "X-Original-Host": Forwarding, "Front-End-Https": Forwarding, "Forwarded": Forwarding,
		"X-Real-Ip": Forwarding, "True-Client-IP": Forwarding, "X-Url-Scheme": Forwarding,
		"X-HTTP-Method-Override": Dropped, "X-Original-URL": Dropped, "X-Rewrite-Url": Dropped, "Edge-Mode": Dropped,
		"X_Forwarded_Prefix": Dropped, "Accept_Language": Dropped, "x-custom_thing": Dropped,
		"X-Requested-With": Keyed, "X-Api-Key": Keyed, "X-Device": Keyed, "Xforwarded": Keyed, "": Keyed,
		strings.Repeat("a", 100):                  Keyed,
		strings.Repeat("a", 100) + "_":            Dropped,
		"X-Forwarded-" + strings.Repeat("a", 100): Forwarding,
		"Sec-CH-" + strings.Repeat("A", 100):      Neutral,
	} {
		if got := Classify(name); got != want {
			t.Errorf("Classify(%q) = %s, want %s", name, got, want)
		}
	}
}

// FuzzClassify: the class ignores case, both entry points agree, and a name
// with an underscore is always dropped.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"X-Forwarded-Prefix", "x_a", "Accept", "SEC-CH-UA", "Edge-Auth", "X-Foo"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c := Classify(name)
		if lc := ClassifyLower([]byte(strings.ToLower(name))); lc != c && strings.EqualFold(name, strings.ToUpper(name)) {
			t.Fatalf("Classify(%q) = %s but ClassifyLower = %s", name, c, lc)
		}
		if strings.Contains(name, "_") && c != Dropped {
			t.Fatalf("%q has an underscore but is %s", name, c)
		}
		if strings.ToUpper(name) != name && Classify(strings.ToUpper(name)) != c && strings.EqualFold(strings.ToUpper(name), name) {
			t.Fatalf("%q: class depends on case", name)
		}
	})
}
