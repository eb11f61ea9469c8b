package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgecache/edge/proxy"
)

// relayedPeer serves a peer handler answering a Vary: Cookie page behind
// a relay that passes requests untouched (no Accept-Encoding added: the
// relay of peerPair in auth_test.go has Go's transport add one, so its
// request fails the peer's MAC (and a User-Agent: sign leaves it empty so
// that Go's client sends none, a relay's client adds its own) and every tampered answer there is
// refused for that reason, not for the tampering) and lets tamper change
// the answer's header.
func relayedPeer(t *testing.T, tamper func(http.Header)) (*Cluster, *Peer) {
	t.Helper()
	c := playing(newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"}), "n1")
	h := c.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Cookie")
		_, _ = io.WriteString(w, "the page for "+r.Header.Get("Cookie"))
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", addr
		if _, ok := out.Header["User-Agent"]; !ok {
			out.Header["User-Agent"] = []string{""} // else Go's transport adds one
		}
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		tamper(w.Header())
		w.Header().Set("Trailer", hdrBodyAuth)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(b)
		w.Header().Set(hdrBodyAuth, resp.Trailer.Get(hdrBodyAuth))
	}))
	t.Cleanup(front.Close)
	return c, &Peer{ID: "n1", Addr: strings.TrimPrefix(front.URL, "http://")}
}

// TestS6UnsignedFieldsCannotChangeWhatIsStored: the MAC promises "a
// field added in transit is refused (any field may select a variant)".
// Unsigned fields still let an on-path relay change what the ingress
// stores and serves, without breaking it:
//   - Connection (unsigned before this change): proxy.sharedHeader and
//     proxy.stream (removeHopByHop) delete every field a Connection value
//     names, after verification, so an added "Connection: Vary" strips the
//     signed Vary: Cookie and one user's page is stored for every user
//     (or "Connection: Cache-Control" strips private/no-store);
//   - Host (unsigned since this change, on responses too, though only
//     requests needed it): added to an answer, it is stored and served.
func TestS6UnsignedFieldsCannotChangeWhatIsStored(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(http.Header)
		held bool // a control: refused today
	}{
		{"nothing (control)", func(h http.Header) {}, true},
		{"X-Other (control)", func(h http.Header) { h.Set("X-Other", "1") }, true},
		{"Connection: Vary", func(h http.Header) { h.Set("Connection", "Vary") }, false},
		{"Host", func(h http.Header) { h.Set("Host", "evil.example") }, false},
	} {
		c, p := relayedPeer(t, tc.f)
		req := httptest.NewRequest("GET", "http://h/p/1", nil)
		req.RequestURI = ""
		req.Header.Set(hdrMode, "climb")
		req.Header.Set(hdrHop, "1")
		req.Header.Set("Cookie", "sid=alice")
		resp, err := c.send(req, p)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		switch {
		case tc.name == "nothing (control)":
			if err != nil {
				t.Fatalf("the relay itself breaks the MAC: %v", err)
			}
		case err == nil && (len(resp.Header.Values("Connection")) > 0 || resp.Header.Get("Host") != ""):
			t.Errorf("a peer answer with %s added in transit was accepted and handed on with Connection %q, Host %q (the proxy then deletes what Connection names, Vary %q here, from what it stores and serves)",
				tc.name, resp.Header.Values("Connection"), resp.Header.Get("Host"), resp.Header.Values("Vary"))
		case err != nil && !strings.Contains(err.Error(), "authentication"):
			t.Errorf("%s: refused for another reason: %v", tc.name, err)
		case tc.held && err == nil:
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestS6PeerPairRelayIsTransparent: auth_test.go's peerPair relay, told
// to change nothing, must pass the answer through; otherwise
// TestPeerResponsesAreAuthenticated's tampered cases are refused for the
// relay's own fault (its transport adds Accept-Encoding and User-Agent to
// the signed request, which the peer refuses), not for the tampering,
// and prove nothing.
func TestS6PeerPairRelayIsTransparent(t *testing.T) {
	c, p := peerPair(t, "the real page", func(h http.Header, b []byte) []byte { return b })
	if body, err := climbTo(c, p); err != nil || body != "the real page" {
		t.Errorf("an untouched answer through peerPair's relay: %q, %v", body, err)
	}
}
