package node

import (
	"regexp"
	"strings"
	"testing"
)

// TestS11ConnStatusPageCountsAreReadable: the status page's "Client
// connections" line prints its refused counters as raw float64s, so once
// a flood has been refused a million times it reads "1.234567e+06 (all)"
// where every other count on the page (count: humanCount) reads
// "1,234,567". The numbers an operator looks at during exactly the flood
// this bound is for are in scientific notation.
func TestS11ConnStatusPageCountsAreReadable(t *testing.T) {
	n := startNode(t, reviewOrigin(t).URL, "limits: {max_connections_per_client: 4}\n")
	n.conns.refused.WithLabelValues(refusedMax).Add(1234567)
	n.conns.refused.WithLabelValues(refusedPerClient).Add(2000000)
	_, page := getBody(t, "http://"+n.AdminAddr()+"/status")
	i := strings.Index(page, "<h2>Client connections</h2>")
	if i < 0 {
		t.Fatal("no Client connections section")
	}
	line := page[i:]
	line = line[:strings.Index(line, "</p>")]
	t.Logf("%s", line)
	if regexp.MustCompile(`e(\+|&#43;)\d`).MatchString(line) || !strings.Contains(line, "1,234,567") || !strings.Contains(line, "2,000,000") {
		t.Errorf("refused counts not written as counts: %s", line)
	}
}
