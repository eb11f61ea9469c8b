package node

import (
	"strings"
	"testing"
)

// s24lNode starts a node with two sites (one with rules and a rate limit),
// the hit path on and an access log off.
func s24lNode(t *testing.T, extra string) *Node {
	t.Helper()
	o := s24lOrigin(t)
	return startNodeYAML(t, "node_id: s24\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tuning: {hit_path: true}\n"+extra+
		"sites:\n"+
		"  - name: shop\n    hosts: [shop.test]\n    origins: ['"+o.URL+"']\n"+
		"    rules:\n      - {name: pages, match: {path: '/rule/*'}, key: {ignore_params: ['utm_*']}}\n"+
		"  - name: blog\n    hosts: ['*.blog.test']\n    origins: ['"+o.URL+"']\n    rate_limit: {rate: 1000, burst: 1000}\n")
}

// TestS24LabelsPublicInputsAddNoSeries: two rounds of hostile requests
// with distinct values (hosts known and unknown, in every spelling,
// custom methods, arbitrary origin status codes and codings, Accept-
// Encoding tokens, unknown and forwarding fields, rule-matching paths) add
// no series in the second round, and no label holds a value the client
// chose.
func TestS24LabelsPublicInputsAddNoSeries(t *testing.T) {
	for _, extra := range []string{"", "forwarding: {trusted_proxies: ['127.0.0.1/32']}\n"} {
		name := "no proxy trusted"
		if extra != "" {
			name = "127.0.0.1 trusted (X-Forwarded-For names the client)"
		}
		t.Run(name, func(t *testing.T) { s24lPublicInputs(t, extra) })
	}
}

func s24lPublicInputs(t *testing.T, extra string) {
	n := s24lNode(t, extra)
	pub, adm := n.PublicAddr(), n.AdminAddr()
	s24lTraffic(t, pub, "warm", 3)
	before := s24lEdgeSeries(s24lScrape(t, adm))
	s24lTraffic(t, pub, "zqa", 12)
	afterA := s24lEdgeSeries(s24lScrape(t, adm))
	s24lTraffic(t, pub, "zqb", 12)
	afterB := s24lEdgeSeries(s24lScrape(t, adm))
	t.Logf("edge_ series: %d before, %d after round A, %d after round B", len(before), len(afterA), len(afterB))
	if nw := s24lNew(afterA, afterB); len(nw) > 0 {
		t.Errorf("round B's distinct values added %d series: %s", len(nw), strings.Join(nw, "; "))
	}
	for _, tag := range []string{"zqa", "zqb", "warm", "münchen", "xn--"} {
		if l := s24lLabelsWith(afterB, tag); len(l) > 0 {
			t.Errorf("labels hold the client's value %q: %s", tag, strings.Join(l, "; "))
		}
	}
	if nw := s24lNew(before, afterA); len(nw) > 0 {
		t.Logf("new after round A (first sight): %s", strings.Join(nw, "; "))
	}
}
