package cluster

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
)

// TestS53EmptyFieldAddedAfterSigningIsRefused: the request MAC leaves out
// every field whose values are all empty (appendCanonical's allEmpty), yet
// the peer read such a field as the request's: an empty keyed field
// (X-User:) or Authorization: added on the wire after signing selected
// another variant, was forwarded to the origin, or marked the request as
// carrying credentials. Now such a field is dropped once the MAC is
// checked (dropUnsigned), as absent as it was signed: the request is
// answered as signed (or refused, as TestPeerHitRefusesReplayAndTampering's
// X-Added: 1 is), never with the field acted on.
func TestS53EmptyFieldAddedAfterSigningIsRefused(t *testing.T) {
	_, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, user := r.Header["X-User"]
		_, auth := r.Header["Authorization"]
		if user || auth {
			_, _ = io.WriteString(w, "the origin saw an unsigned field")
			return
		}
		_, _ = io.WriteString(w, "plain")
	})
	signedGet(t, in, p, "GET", "/p", "climb")
	ph.Wait()
	for i, added := range []string{"X-User:", "X-User: ", "Authorization:"} {
		target := "/p?case=" + strconv.Itoa(i) // a miss: the peer asks its origin
		tampered := bytes.Replace(rawPeerRequest(t, in, target), []byte("\r\n\r\n"), []byte("\r\n"+added+"\r\n\r\n"), 1)
		conn, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write(tampered); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusForbidden && string(body) != "plain" {
			t.Errorf("%q added after signing: %d %q, want 403 or the answer to the request as signed (\"plain\")", added, resp.StatusCode, body)
		}
	}
}
