package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestASiteCountsItsClientsRequestsOnly: a site's counts (the status
// page's per-site table) are its clients' requests, as
// edge_site_requests_total counts them; a peer's climb, relayed through
// ServeInbound or answered by AppendHit without a client address, is the
// same client request counted again at another node (a new user read 4
// requests on the page against 1 in the metric).
func TestASiteCountsItsClientsRequestsOnly(t *testing.T) {
	site := ruleSite(t, "[]")
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write([]byte("page"))
	}, nil)
	total := func() (n uint64) {
		for _, v := range site.Results() {
			n += v
		}
		return n
	}
	p.get("/x") // a client's miss
	p.get("/x") // a client's hit
	if got := total(); got != 2 {
		t.Fatalf("two client requests counted %d times", got)
	}
	p.h.ServeInbound(httptest.NewRecorder(), httptest.NewRequest("GET", "http://shop.test/x", nil), Inbound{Site: site, Relayed: true})
	p.h.ServeInbound(httptest.NewRecorder(), httptest.NewRequest("GET", "http://shop.test/y", nil), Inbound{Site: site, Relayed: true})
	p.h.Wait()
	var a HitAnswer
	if !p.h.AppendHit(nil, &HitRequest{Host: "shop.test", Path: "/x", Site: site}, []byte("Date: x\r\n"), &a) {
		t.Fatal("a peer's hit declined")
	}
	p.h.ReleaseHit(a.Pinned, a.ClientIP)
	if got := total(); got != 2 {
		t.Errorf("after three peers' requests the site counts %d, want its clients' 2", got)
	}
	client := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}
	if !p.h.AppendHit(nil, &HitRequest{Host: "shop.test", Path: "/x", Site: site, Remote: client}, []byte("Date: x\r\n"), &a) {
		t.Fatal("a client's hit declined")
	}
	p.h.ReleaseHit(a.Pinned, a.ClientIP)
	if got := site.Results()[ResultHit]; got != 2 {
		t.Errorf("a client's hit on the hit path not counted: %d hits", got)
	}
}
