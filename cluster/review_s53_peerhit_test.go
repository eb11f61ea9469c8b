package cluster

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
)

// TestS53PeerHitNeverAnswersAnotherUsersVariant: a page the home stored
// under Vary (Cookie, Accept-Language) or as one user's (private), asked
// by a peer for another user, is never answered on the read loop with the
// stored user's answer: the loop declines (the variant depends on fields
// it does not read) and ServeHTTP gives the asking user's own.
func TestS53PeerHitNeverAnswersAnotherUsersVariant(t *testing.T) {
	home, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vary-cookie":
			w.Header().Set("Vary", "Cookie")
		case "/vary-lang":
			w.Header().Set("Vary", "Accept-Language")
		case "/vary-star":
			w.Header().Set("Vary", "*")
		}
		w.Header().Set("Cache-Control", "public, max-age=600")
		_, _ = io.WriteString(w, "for cookie="+r.Header.Get("Cookie")+" lang="+r.Header.Get("Accept-Language"))
	})
	for _, c := range []struct{ path, field, a, b string }{
		{"/vary-cookie", "Cookie", "u=a", "u=b"},
		{"/vary-lang", "Accept-Language", "da", "fr"},
		{"/vary-star", "Cookie", "u=a", "u=b"},
	} {
		_, first := signedGet(t, in, p, "GET", c.path, "climb", c.field, c.a)
		ph.Wait()
		if resp, again := signedGet(t, in, p, "GET", c.path, "probe", c.field, c.a); c.path != "/vary-star" && (again != first || resp.StatusCode != 200) {
			t.Fatalf("%s: a's variant not stored at the home: a's probe got %d %q", c.path, resp.StatusCode, again)
		}
		before := loopHits(home)
		for _, mode := range []string{"climb", "probe"} {
			resp, got := signedGet(t, in, p, "GET", c.path, mode, c.field, c.b)
			if strings.Contains(got, c.a) {
				t.Errorf("%s %s as %s=%s: got user a's answer %q (%d; a's was %q)", mode, c.path, c.field, c.b, got, resp.StatusCode, first)
			}
			if mode == "climb" && !strings.Contains(got, c.b) {
				t.Errorf("%s %s as %s=%s: got %q (%d), want b's own", mode, c.path, c.field, c.b, got, resp.StatusCode)
			}
		}
		if loopHits(home) != before {
			t.Errorf("%s: answered on the read loop for another user (%d loop hits)", c.path, loopHits(home)-before)
		}
	}
}

// TestS53PeerHitPipelinedRequestsKeepTheirOrder: a peer's pipelined
// requests on one connection of the cluster listener, a loop hit, one the
// loop hands to net/http (a keyed field: another variant), and a loop hit
// again, are answered in order, each with its own request's answer.
func TestS53PeerHitPipelinedRequestsKeepTheirOrder(t *testing.T) {
	home, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "path="+r.URL.Path+" user="+r.Header.Get("X-User"))
	})
	for _, path := range []string{"/one", "/two"} {
		signedGet(t, in, p, "GET", path, "climb")
	}
	ph.Wait()
	before := loopHits(home)
	reqs := [][]byte{
		rawPeerRequest(t, in, "/one"),
		rawPeerRequest(t, in, "/one", "X-User", "alice"),
		rawPeerRequest(t, in, "/two"),
	}
	want := []string{"path=/one user=", "path=/one user=alice", "path=/two user="}
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // no hang
	if _, err := conn.Write(bytes.Join(reqs, nil)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i := range reqs {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(b) != want[i] {
			t.Errorf("answer %d: %d %q (%v), want 200 %q", i, resp.StatusCode, b, err, want[i])
		}
	}
	if got := loopHits(home) - before; got != 2 {
		t.Errorf("loop hits %d, want 2 (the keyed request is net/http's)", got)
	}
}
