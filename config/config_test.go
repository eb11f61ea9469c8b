package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster"
)

func TestDefaults(t *testing.T) {
	c, err := LoadBytes([]byte("origin:\n  url: http://127.0.0.1:8090\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || c.Admin.Listen != "127.0.0.1:9180" {
		t.Errorf("listeners %q %q", c.Listen, c.Admin.Listen)
	}
	if c.Cache.MaxBytes != 256<<20 || c.Cache.MaxObjectBytes != 8<<20 || c.Origin.ConnectTimeout != 3*time.Second {
		t.Errorf("defaults: %+v", c.Cache)
	}
}

func TestRegionCosts(t *testing.T) {
	c, err := LoadBytes([]byte("origin: {url: http://o}\ncluster: {region: eu-west, region_costs: 'us/eu-west=20ms, eu-west/eu-west=500us'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.Region != "eu-west" || c.Cluster.RegionCosts[cluster.RegionPair("eu-west", "us")] != 20*time.Millisecond ||
		c.Cluster.RegionCosts[cluster.RegionPair("eu-west", "eu-west")] != 500*time.Microsecond || len(c.Cluster.RegionCosts) != 2 {
		t.Errorf("region %q, costs %v", c.Cluster.Region, c.Cluster.RegionCosts)
	}
	if c.Cluster.Monitoring != cluster.MonitorAuto || c.Cluster.MonitorPeers != cluster.DefaultMonitorPeers {
		t.Errorf("monitoring %v, k %d", c.Cluster.Monitoring, c.Cluster.MonitorPeers)
	}
}

func TestMalformedConfigNamesTheKey(t *testing.T) {
	cases := []struct{ yaml, key string }{
		{"listen: 127.0.0.1:8080", "origin.url"},
		{"origin: {url: ftp://x}", "origin.url"},
		{"origin: {url: 'http://'}", "origin.url"},
		{"origin: {url: 'http://u:pw@o'}", "origin.url"},
		{"sites: [{name: s, hosts: [s.test], origins: ['https://u:pw@o:443']}]", "sites[0].origins[0]"},
		{"origin: {url: http://o, connect_timeout: 5}", "origin.connect_timeout"},
		{"origin: {url: http://o, connect_timeout: -1s}", "origin.connect_timeout"},
		{"origin: {url: http://o}\ncache: {max_bytes: lots}", "cache.max_bytes"},
		{"origin: {url: http://o}\ncache: {max_bytes: 10KiB}", "cache.max_bytes"},
		{"origin: {url: http://o}\ncache: {max_object_bytes: 1GiB}", "cache.max_object_bytes"},
		{"origin: {url: http://o}\ncache: {heuristic_fraction: 2}", "cache.heuristic_fraction"},
		{"origin: {url: http://o}\ncache: {max_variants: 0}", "cache.max_variants"},
		{"origin: {url: http://o}\ncache: {store_set_cookie: maybe}", "cache.store_set_cookie"},
		{"origin: {url: http://o}\nlisten: nowhere", "listen"},
		{"origin: {url: http://o}\nlisten: 'h:99999'", "listen"},
		{"origin: {url: http://o}\nadmin: {listen: '127.0.0.1:8080'}", "admin.listen"},
		{"origin: {url: http://o}\nlog: {level: loud}", "log.level"},
		{"origin: {url: http://o}\nlimits: {max_inflight: 1.5}", "limits.max_inflight"},
		{"origin: {url: http://o}\ncahce: {max_bytes: 1MiB}", "cahce.max_bytes"},
		{"origin: {url: http://o}\nnode_id: 'a b'", "node_id"},
		{"origin: {url: http://o}\nforwarding: {unkeyed_headers: [X_App_Version]}", "forwarding.unkeyed_headers"},
		{"origin: {url: http://o}\nforwarding: {unkeyed_headers: 'X-Ok, X Bad'}", "forwarding.unkeyed_headers"},
		{"origin: {url: http://o}\nforwarding: {unkeyed_headers: ['X-Ok', 'X:Bad']}", "forwarding.unkeyed_headers"},
		{"origin: {url: http://o}\ncluster: {peers: 'a=127.0.0.1:1'}", "cluster.secret"},
		{"origin: {url: http://o}\ncluster: {peers: 'a', secret: a-long-enough-secret}", "cluster.peers"},
		{"origin: {url: http://o}\ncluster: {peers: 'a=1.2.3.4:1,a=1.2.3.4:2', secret: a-long-enough-secret}", "cluster.peers"},
		{"origin: {url: http://o}\ncluster: {detector: lstm}", "cluster.detector"},
		{"origin: {url: http://o}\ncluster: {monitoring: some}", "cluster.monitoring"},
		{"origin: {url: http://o}\ncluster: {peer_whole_bytes: 32MiB}", "cluster.peer_whole_bytes"},
		{"origin: {url: http://o}\ncluster: {peer_whole_bytes: -1}", "cluster.peer_whole_bytes"},
		{"origin: {url: http://o}\ncluster: {peer_whole_bytes: some}", "cluster.peer_whole_bytes"},
		{"origin: {url: http://o}\ncluster: {monitor_peers: 1}", "cluster.monitor_peers"},
		{"origin: {url: http://o}\ncluster: {monitor_peers: 5}", "cluster.monitor_peers"},
		{"origin: {url: http://o}\ncluster: {region: EU West}", "cluster.region"},
		{"origin: {url: http://o}\ncluster: {region_costs: 'eu-us=20ms'}", "cluster.region_costs"},
		{"origin: {url: http://o}\ncluster: {region_costs: 'eu/us=fast'}", "cluster.region_costs"},
		{"origin: {url: http://o}\ncluster: {region_costs: 'eu/us=-1ms'}", "cluster.region_costs"},
		{"origin: {url: http://o}\ncluster: {region_costs: 'eu/us=1ms,us/eu=2ms'}", "cluster.region_costs"},
		{"origin: {url: http://o}\nrouting: {mode: star}", "routing.mode"},
		{"origin: {url: http://o}\ncluster: {advertise: 'edge-1:7946'}", "cluster.advertise"},
		{"origin: {url: http://o}\ncluster: {advertise: '10.0.0.1'}", "cluster.advertise"},
		{"origin: {url: http://o}\ncluster: {membership_probe_interval: 0s}", "cluster.membership_probe_interval"},
		{"origin: {url: http://o}\ncluster: {forget_departed_after: 0s}", "cluster.forget_departed_after"},
		{"origin: {url: http://o}\nadmin: {tls: {cert_file: /etc/edge/admin.crt}}", "admin.tls"},
		{"origin: {url: http://o}\nadmin: {tls: {key_file: /etc/edge/admin.key}}", "admin.tls"},
		{"origin: {url: http://o}\ncluster: {forget_departed_after: soon}", "cluster.forget_departed_after"},
		{"origin: {url: http://o}\ncache: {disk: {path: /var/cache/edge}}\ncluster: {state_dir: /var/cache/edge}", "cluster.state_dir"},
		{"origin: {url: http://o}\ncache: {disk: {path: /var/cache/edge}}\ncluster: {state_dir: /var/cache/edge/state}", "cluster.state_dir"},
		{"origin: {url: http://o}\ncluster: {membership_suspicion_mult: 0}", "cluster.membership_suspicion_mult"},
		{"origin: {url: http://o}\nrouting: {d: 1}", "routing.d"},
		{"origin: {url: http://o}\nrouting: {home: region}", "routing.home"},
		{"origin: {url: http://o}\ncluster: {region: eu}\nrouting: {home: region, placement: paper}", "routing.home"},
		{"origin: {url: http://o}\nrouting: {home: everywhere}", "routing.home"},
		{"origin: {url: http://o}\nindicators: {fnr_estimator: guess}", "indicators.fnr_estimator"},
		// A filter peers would refuse as oversized (over 2^31 bits): each
		// would pull and drop it at every heartbeat.
		{"origin: {url: http://o}\nindicators: {capacity: 268435456}", "indicators.capacity"},
		{"origin: {url: http://o}\nindicators: {capacity: 33554433, bpe: 64}", "indicators.capacity"},
		{"origin: {url: http://o}\ncluster: {peers: 'a=127.0.0.1:1', secret: short}", "cluster.secret"},
		{"origin: {url: http://o}\ncluster: {tls: {cert_file: /c.pem}}", "cluster.tls"},
		{"origin: {url: http://o}\nforwarding: {trusted_proxies: '10.0.0.0/33'}", "forwarding.trusted_proxies"},
		{"origin: {url: http://o}\nforwarding: {trusted_proxies: 'proxy.local'}", "forwarding.trusted_proxies"},
		{"origin: {url: http://o}\nlimits: {max_buffered_bytes: 10KiB}", "limits.max_buffered_bytes"},
		{"origin: {url: http://o}\nlimits: {spool_bytes: 1MiB}", "limits.spool_bytes"},
		{"origin: {url: http://o}\nlimits: {spool_bytes: -1}", "limits.spool_bytes"},
		{"origin: {url: http://o}\nlimits: {spool_dir: [a]}", "limits.spool_dir"},
		{"origin: {url: http://o}\nlimits: {max_ranges: 0}", "limits.max_ranges"},
		{"origin: {url: http://o}\nlimits: {write_timeout: 0s}", "limits.write_timeout"},
		{"origin: {url: http://o}\ncluster: {detector_params: 'loss_model=2,quantile=abc'}", "cluster.detector_params"},
		{"origin: {url: http://o}\ncluster: {detector_params: 'quantile=0.99,bogus=1'}", "cluster.detector_params"},
		{"origin: {url: http://o}\ncluster: {detector_params: 'window=+Inf'}", "cluster.detector_params"},
		{"origin: {url: http://o}\ncluster: {detector: chen, detector_params: 'quantile=0.99'}", "cluster.detector_params"},
		{"origin: {url: http://o}\ncluster: {detector_params: 'loss_model=7'}", "cluster.detector_params"},
		{"origin: {url: http://o}\ncluster: {shadow_detectors: 'phi,nope'}", "cluster.shadow_detectors"},
		{"origin: {url: http://o}\ncluster: {shadow_detectors: 'chen/alpah_ms=3'}", "cluster.shadow_detectors"},
		{"origin: {url: http://o}\ncluster: {shadow_detectors: 'phi,chen,phi'}", "cluster.shadow_detectors"},
		// A node without peers builds no detector, but its detector keys
		// are checked all the same: a typo shows before it joins a cluster.
		{"origin: {url: http://o}\ncluster: {detector: chen, detector_params: 'quantile=0.99'}", "cluster.detector_params"},
		// Read at load, so config check and a reload name it too.
		{"origin: {url: https://o, ca_file: /nonexistent/ca.pem}", "origin.ca_file"},
		{"origin: {url: https://o, ca_file: /dev/null}", "origin.ca_file"},
	}
	for _, tc := range cases {
		_, err := LoadBytes([]byte(tc.yaml))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: error %v, want a *config.Error", tc.yaml, err)
			continue
		}
		if ce.Key != tc.key {
			t.Errorf("%q: error names %q, want %q (%v)", tc.yaml, ce.Key, tc.key, err)
		}
		if !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: message %q does not name %s", tc.yaml, err, tc.key)
		}
	}
	if _, err := LoadBytes([]byte("origin: [unclosed")); err == nil {
		t.Error("broken YAML accepted")
	}
}

func TestEnvironmentOverridesFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("origin:\n  url: http://file\ncache:\n  max_bytes: 64MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_ORIGIN_URL", "http://env:1")
	v, err := NewViper(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	if c.Origin.URL != "http://env:1" || c.Cache.MaxBytes != 64<<20 {
		t.Errorf("origin %q max_bytes %d", c.Origin.URL, c.Cache.MaxBytes)
	}
	t.Setenv("EDGE_CACHE_MAX_BYTES", "x")
	v, _ = NewViper(file)
	if _, err := Load(v); err == nil || !strings.Contains(err.Error(), "cache.max_bytes") {
		t.Errorf("bad env value: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{"0": 0, "10": 10, "1KiB": 1024, "1kb": 1000, "1.5MiB": 3 << 19, "2 GiB": 2 << 30, "64M": 64 << 20}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "1XB", "-1", "0.3B", "1e30", "1..2KiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// TestConfigYAMLDocumentsEveryKey keeps the shipped config.yaml in step
// with the key table: every key appears with its default.
func TestConfigYAMLDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if want := Example(ShippedOverrides); text != want {
		t.Errorf("config.yaml is stale: run `go run ./cmd/edge config example > config.yaml`")
	}
	for _, k := range Keys() {
		leaf := k.Name[strings.LastIndexByte(k.Name, '.')+1:]
		if !strings.Contains(text, leaf+":") {
			t.Errorf("config.yaml does not document %s", k.Name)
		}
	}
	if _, err := LoadBytes(data); err != nil {
		t.Errorf("config.yaml does not load: %v", err)
	}
}

// FuzzLoadBytes feeds arbitrary YAML to the loader: it must return a valid
// config or an error, never panic.
func FuzzLoadBytes(f *testing.F) {
	f.Add([]byte("origin: {url: http://o}\ncache: {max_bytes: 1GiB}"))
	f.Add([]byte("listen: [1,2]\norigin: {url: 7}"))
	f.Add([]byte("origin:\n  url: http://o\nlimits:\n  max_url_bytes: 1e400\n"))
	f.Add([]byte("::"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := LoadBytes(data)
		if err == nil && (c.Origin.URL == "" || c.Cache.MaxBytes <= 0) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
	})
}

// TestOperationsReferenceIsCurrent keeps docs/operations.md's configuration
// reference equal to the one generated from the key table.
func TestOperationsReferenceIsCurrent(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, RefBegin), strings.Index(s, RefEnd)
	if i < 0 || j < i {
		t.Fatal("docs/operations.md lacks the reference markers")
	}
	if got := strings.TrimSpace(s[i+len(RefBegin) : j]); got != strings.TrimSpace(Reference()) {
		t.Error("docs/operations.md's configuration reference is stale: replace it with `go run ./cmd/edge config docs`")
	}
}

// TestBadLossKeyIsReportedOnce: a bad detector key stops the detector
// build, so the error names that key alone, not also detector_params (left
// unset) and every good shadow (a review found three such echoes).
func TestBadLossKeyIsReportedOnce(t *testing.T) {
	for _, yaml := range []string{
		"origin: {url: http://o}\ncluster: {loss_estimator: run, shadow_detectors: 'phi,chen'}",
		"origin: {url: http://o}\ncluster: {loss_budget: 2, shadow_detectors: 'phi,chen'}",
		"origin: {url: http://o}\ncluster: {heartbeat_period: 0s, shadow_detectors: 'phi'}",
	} {
		_, err := LoadBytes([]byte(yaml))
		if err == nil {
			t.Fatalf("%q loaded", yaml)
		}
		for _, echo := range []string{"cluster.detector_params", "cluster.shadow_detectors"} {
			if strings.Contains(err.Error(), echo) {
				t.Errorf("%q: %v: names %s, which is fine", yaml, err, echo)
			}
		}
	}
}

// TestSiteNameRefusesControlCharacters: a site's name leads every key of
// the site; a NUL in it once hid the site's URL purges from the cluster's
// purge hold (a review's test), and no name needs a control character.
func TestSiteNameRefusesControlCharacters(t *testing.T) {
	for _, name := range []string{`shop\0x`, `shop\tx`, `shop\nx`, `a\x7f`} {
		yaml := "sites:\n  - name: \"" + name + "\"\n    hosts: [a.test]\n    origins: [\"http://127.0.0.1:1\"]\n"
		_, err := LoadBytes([]byte(yaml))
		if err == nil || !strings.Contains(err.Error(), "sites[0].name") {
			t.Errorf("name %q: %v, want an error naming sites[0].name", name, err)
		}
	}
	ok := "sites:\n  - name: shop-eu\n    hosts: [a.test]\n    origins: [\"http://127.0.0.1:1\"]\n"
	if _, err := LoadBytes([]byte(ok)); err != nil {
		t.Errorf("a plain name: %v", err)
	}
}

// TestSiteHostsAreMatchable: a site's hosts are kept in the form requests
// are matched in (a trailing dot dropped), and a name that could never
// match is refused with its key.
func TestSiteHostsAreMatchable(t *testing.T) {
	site := func(hosts string) string {
		return "sites:\n  - name: a\n    hosts: " + hosts + "\n    origins: [\"http://127.0.0.1:1\"]\n"
	}
	c, err := LoadBytes([]byte(site("['B.test.', '*.x.test.']")))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Sites[0].Hosts; len(got) != 2 || got[0] != "b.test" || got[1] != "*.x.test" {
		t.Errorf("hosts = %q, want [b.test *.x.test]", got)
	}
	for _, bad := range []string{"['bücher.test']", "['a..test']", "['.test']", "['a.test:8080']", "['*']", "['*.']", "['a b']", "['x.*.test']"} {
		if _, err := LoadBytes([]byte(site(bad))); err == nil || !strings.Contains(err.Error(), "sites[0].hosts[0]") {
			t.Errorf("hosts %s: %v, want an error naming sites[0].hosts[0]", bad, err)
		}
	}
	two := "sites:\n  - name: a\n    hosts: [b.test]\n    origins: [\"http://127.0.0.1:1\"]\n  - name: c\n    hosts: [b.test.]\n    origins: [\"http://127.0.0.1:2\"]\n"
	if _, err := LoadBytes([]byte(two)); err == nil || !strings.Contains(err.Error(), "also a host of site a") {
		t.Errorf("b.test and b.test. on two sites: %v, want a duplicate", err)
	}
}

// TestAKeyErrorInAFileNamesTheFileOnce: an unknown key in a config file is
// reported as the key's error, from the file, without the "config:"
// prefix twice (a new user's walk-through read "config: FILE: config:
// origin.conect_timeout: …").
func TestAKeyErrorInAFileNamesTheFileOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte("origin:\n  conect_timeout: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := NewViper(file)
	if err == nil {
		_, err = Load(v)
	}
	if err == nil {
		t.Fatal("an unknown key was accepted")
	}
	msg := err.Error()
	if strings.Count(msg, "config:") != 1 || !strings.Contains(msg, "origin.conect_timeout") || !strings.Contains(msg, "(from "+file+")") {
		t.Errorf("error %q: want the key, the file, and one config: prefix", msg)
	}
}

// TestHashLeavesSecretsOut: the hash tells configurations apart, the same
// settings give the same hash in any process (no key), and neither the
// secrets nor the values rules set on requests (an origin-verify secret)
// change it, so the hash shown without the token tests no guess of them.
func TestHashLeavesSecretsOut(t *testing.T) {
	dir := t.TempDir()
	load := func(verify, secret, listen string) map[string]string {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte("listen: '"+listen+"'\norigin: {url: 'http://o'}\ncluster: {secret: '"+secret+"'}\n"+
			"rules: [{name: p, request_headers: {set: {X-Origin-Verify: '"+verify+"'}}}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		v, err := NewViper(path)
		if err != nil {
			t.Fatal(err)
		}
		return Settings(v)
	}
	base := Hash(load("v1", "secret-one-0123456789", ":8080"))
	if Hash(load("v2", "secret-one-0123456789", ":8080")) != base || Hash(load("v1", "secret-two-0123456789", ":8080")) != base {
		t.Error("a rule's request value or cluster.secret changes the hash: it tests guesses of them")
	}
	if Hash(load("v1", "secret-one-0123456789", ":9090")) == base {
		t.Error("the hash does not tell configurations apart")
	}
	if strings.Contains(load("v1-secret-value", "s", ":8080")["rules"], "v1-secret-value") {
		t.Error("the rules setting holds the value a rule sets on requests")
	}
}

// TestFirstHopOptions: the first hop beside the probes is on by default,
// off when the first hop is a probe candidate (probe_first_hop, which
// leaves no first hop out), and a bad value names the key.
func TestFirstHopOptions(t *testing.T) {
	for _, tc := range []struct {
		yaml              string
		with, asCandidate bool
		bad               bool
	}{
		{"origin: {url: http://o}", true, false, false},
		{"origin: {url: http://o}\ncluster: {first_hop_with_probes: false}", false, false, false},
		{"origin: {url: http://o}\ncluster: {probe_first_hop: true}", false, true, false},
		{"origin: {url: http://o}\ncluster: {first_hop_with_probes: true, probe_first_hop: true}", false, true, false},
		{"origin: {url: http://o}\ncluster: {first_hop_with_probes: maybe}", false, false, true},
	} {
		c, err := LoadBytes([]byte(tc.yaml))
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "cluster.first_hop_with_probes") {
				t.Errorf("%q: %v, want an error naming cluster.first_hop_with_probes", tc.yaml, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.Cluster.FirstHopWithProbes != tc.with || c.Cluster.ProbeFirstHop != tc.asCandidate {
			t.Errorf("%q: read as first_hop_with_probes %v, probe_first_hop %v; want %v, %v", tc.yaml, c.Cluster.FirstHopWithProbes, c.Cluster.ProbeFirstHop, tc.with, tc.asCandidate)
		}
	}
}
