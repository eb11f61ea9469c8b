package node

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestS73OriginsConnectionOptionStripsTheNodesHSTSAndAltSvc: an origin's
// answer the node does not store (no-store: streamed) that names
// Strict-Transport-Security and Alt-Svc in its Connection field reaches
// the client without the node's own (tls.hsts, tls.http3), on every
// protocol and front. RFC 9110 §7.6.1: the Connection options are the
// origin connection's, and the fields to remove are the ones in the
// origin's message; the node's fields are not in it.
func TestS73OriginsConnectionOptionStripsTheNodesHSTSAndAltSvc(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Connection", "Strict-Transport-Security, Alt-Svc")
		_, _ = io.WriteString(w, "site=a")
	}))
	t.Cleanup(o.Close)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	for _, m := range s68Modes {
		t.Run(m.name, func(t *testing.T) {
			n := startNode(t, o.URL, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true, hsts: 'max-age=300'}\n"+m.tuning)
			for i, proto := range []int{1, 2, 3} {
				a := s68Ask(t, n, proto, "a.test", "a.test", fmt.Sprintf("/conn%d", i))
				if a.status != 200 {
					t.Fatalf("HTTP/%d: %v", proto, a)
				}
				if a.header.Get("Strict-Transport-Security") != "max-age=300" || a.header.Get("Alt-Svc") == "" {
					t.Errorf("HTTP/%d (Cache-Status %q): Strict-Transport-Security %q, Alt-Svc %q; want the node's own (tls.hsts max-age=300, tls.http3)",
						proto, a.header.Get("Cache-Status"), a.header.Get("Strict-Transport-Security"), a.header.Get("Alt-Svc"))
				}
			}
		})
	}
}
