package cluster

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
)

// rawS11 is a signed request's bytes (method, target, fields), to n1.
func rawS11(t *testing.T, c *Cluster, method, target string, fields ...string) []byte {
	t.Helper()
	req := httptest.NewRequest(method, "http://h"+target, nil)
	req.RequestURI = ""
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	sign(c.cfg.Secret, c.cfg.NodeID, "n1", req)
	var b bytes.Buffer
	if err := req.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Every kind of answer a node gives a peer (the fill, a read-loop hit, a
// HEAD, a probe hit, a probe miss, a 304, a refusal) names exactly this
// version once, although the origin sent its own Edge-Key-Version; the
// origin never sees the field; the asker's send strips it.
func TestS11EveryAnswerNamesOneVersionAndTheOriginSeesNone(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	home, ph, p, plain, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set(hdrKeyVer, "1") // an origin's own field of that name
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "page")
	})
	_ = home
	cases := []struct {
		name   string
		addr   string
		method string
		target string
		fields []string
		status int
	}{
		{"fill (PeerHandler)", plain.Addr, "GET", "/p", nil, 200},
		{"loop hit", p.Addr, "GET", "/p", nil, 200},
		{"loop HEAD", p.Addr, "HEAD", "/p", nil, 200},
		{"loop probe", p.Addr, "GET", "/p", []string{hdrMode, "probe", "Cache-Control", "only-if-cached"}, 200},
		{"probe miss", p.Addr, "GET", "/absent", []string{hdrMode, "probe", "Cache-Control", "only-if-cached"}, 504},
		{"304", plain.Addr, "GET", "/p", []string{"If-None-Match", `"v1"`}, 304},
		{"refusal", plain.Addr, "GET", "/p", []string{hdrKeyVer, "9"}, 503},
	}
	for _, c := range cases {
		resp := rawOneS11(t, c.addr, c.method, rawS11(t, in, c.method, c.target, c.fields...))
		ph.Wait()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if v := resp.Header[hdrKeyVer]; len(v) != 1 || v[0] != proxy.CacheKeyVersion {
			t.Errorf("%s: Edge-Key-Version %q", c.name, v)
		}
	}
	// Through send, as the asker stores it: no field left.
	for _, peer := range []*Peer{p, plain} {
		resp, body := signedGet(t, in, peer, "GET", "/p", "climb")
		if body != "page" {
			t.Errorf("body %q", body)
		}
		for k := range resp.Header {
			if strings.EqualFold(k, hdrKeyVer) {
				t.Errorf("asker kept %s: %q", k, resp.Header[k])
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range seen {
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "edge-") {
				t.Errorf("origin saw %s: %q", k, h[k])
			}
		}
	}
}

// The request MAC counts an all-empty field as absent, so an empty
// Edge-Key-Version can be added to a signed request on the way without
// breaking its signature. What it buys: the receiver refuses (503) a
// request of an older asker that it would have answered; a current
// asker's request (which carries "2") cannot be altered that way. A
// denial at most, which anyone on the path has anyway.
func TestS11EmptyKeyVersionAddedOnTheWay(t *testing.T) {
	_, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	})
	inject := func(raw []byte) []byte {
		return bytes.Replace(raw, []byte("\r\n\r\n"), []byte("\r\nEdge-Key-Version: \r\n\r\n"), 1)
	}
	old := rawS11(t, in, "GET", "/p") // an asker older than versions
	resp := rawSend(t, p.Addr, inject(old))[0]
	ph.Wait()
	t.Logf("older asker's request with an empty field added: %d", resp.StatusCode)
	if resp.StatusCode == http.StatusForbidden {
		t.Log("the MAC covers it after all")
	}
	cur := rawS11(t, in, "GET", "/p", hdrKeyVer, proxy.CacheKeyVersion)
	resp = rawSend(t, p.Addr, inject(cur))[0]
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a current asker's request altered on the way: %d, want 403", resp.StatusCode)
	}
}

// rawOneS11 sends one raw request and reads its answer as a request of
// method (a HEAD's has no body).
func rawOneS11(t *testing.T, addr, method string, raw []byte) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
