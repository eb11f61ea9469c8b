package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// A review found (now mended: outboundRequest clears Close) a client's hop-by-hop "Connection: close" (and every HTTP/1.0
// request, which closes by default) reaches the origin hop: the edge removes
// the Connection field from the forwarded header, but the parsed request's
// Close flag survives r.Clone in outboundRequest, so net/http's Transport
// sends "Connection: close" to the origin and throws the pooled origin
// connection away after each such miss.
// Steps: start a node in front of an origin that counts new TCP
// connections; send 12 misses (distinct paths) from clients that say
// "Connection: close" (half of them HTTP/1.0 requests).
// Expected: the edge-to-origin hop is the edge's own (RFC 9110 §7.6.1:
// Connection is hop-by-hop); one pooled origin connection (or very few)
// serves all misses, as it does for keep-alive clients.
// Got: one new origin connection per miss (12), each with "Connection: close".
// Why it matters: any client (and every HTTP/1.0 client) controls the
// edge's origin connection reuse: a stream of cache-busting misses with
// "Connection: close" costs the origin a TCP (and, for https origins, a TLS)
// handshake per request and leaves a TIME_WAIT socket per request on the
// edge, eating its ephemeral ports, so one client degrades origin fetches
// for everyone. The origin also sees a client's hop-by-hop signal it must
// not (the echo below shows "Connection: close" on the forwarded request).
func TestS32ClientConnectionCloseTearsDownOriginConnections(t *testing.T) {
	var conns atomic.Int64
	var sawClose atomic.Int64
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Close {
			sawClose.Add(1)
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	o.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	n := startNode(t, o.URL, "")
	addr := n.PublicAddr()

	// Warm one pooled origin connection with a keep-alive client's miss.
	resp, body := rawAsk(t, addr, "GET /warm HTTP/1.1\r\nHost: shop.test\r\n\r\n")
	if resp.StatusCode != 200 || body != "page /warm" {
		t.Fatalf("warm-up: %d %q", resp.StatusCode, body)
	}
	before := conns.Load()
	const misses = 12
	for i := range misses {
		head := fmt.Sprintf("GET /p%d HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n", i)
		if i%2 == 1 {
			head = fmt.Sprintf("GET /p%d HTTP/1.0\r\nHost: shop.test\r\n\r\n", i)
		}
		resp, body := rawAsk(t, addr, head)
		if resp.StatusCode != 200 || body != fmt.Sprintf("page /p%d", i) {
			t.Fatalf("miss %d: %d %q", i, resp.StatusCode, body)
		}
	}
	opened := conns.Load() - before
	if opened > 2 || sawClose.Load() > 0 {
		t.Fatalf("%d client misses with Connection: close (or HTTP/1.0) opened %d new origin connections and %d forwarded requests carried Connection: close; want the pooled origin connection reused (at most 2 new) and no client hop-by-hop close reaching the origin",
			misses, opened, sawClose.Load())
	}
}
