package node

// A hostile review (s33) of HTTP/3: limits.rate for QUIC clients.

import (
	"io"
	"testing"

	"github.com/quic-go/quic-go/http3"
)

// HOLDS: limits.rate is keyed on the client's address over HTTP/3 too, not
// on the QUIC connection (or its port): a client that opens a new
// connection for each request shares one bucket.
func TestS33H3RateIsPerClientAcrossConnections(t *testing.T) {
	t.Parallel()
	o := s33hOrigin(t)
	n := startH3Node(t, o.URL, "limits: {rate: 0.01, rate_burst: 3}\n")
	limited := 0
	for i := range 6 {
		cl := h3Client(n) // a new QUIC connection, a new source port
		defer cl.Transport.(*http3.Transport).Close()
		resp, err := cl.Get("https://a.test/size/" + itoa(10+i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 429 {
			limited++
		}
	}
	if limited < 3 {
		t.Errorf("6 requests on 6 HTTP/3 connections from one address (rate_burst 3): %d answered 429, want 3", limited)
	}
}
