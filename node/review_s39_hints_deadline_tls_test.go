package node

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go/quicvarint"
)

// TestS39LateHintOverTLSProtocols: the late 103 (sent after
// limits.write_timeout from the request's arrival) on the TLS listener.
// HTTPS/1.1 loses the whole answer as plain HTTP/1.1 does (the same
// missing extension of the write deadline); edge's HTTP/2 server renews
// its connection's deadline per write, and HTTP/3's stream deadline, set
// when the request came (withWriteDeadline), is extended by the proxy
// before the final answer: those two must keep serving the page.
func TestS39LateHintOverTLSProtocols(t *testing.T) {
	t.Parallel() // mostly waiting past limits.write_timeout, on a node of its own
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1200 * time.Millisecond)
		w.Header().Set("Link", "</late.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "slow page "+r.URL.Path)
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNode(t, origin.URL, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n"+
		"tuning: {http2_server: edge}\nlimits: {write_timeout: 1s}\n")
	addr := n.tls.ln.Addr().String()
	get := func(c *http.Client, path string) (int, string, int, error) {
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		req.Host = "a.test"
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.ProtoMajor, err
	}
	t.Run("HTTP/2 edge", func(t *testing.T) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, ForceAttemptHTTP2: true, DisableCompression: true}} //nolint:gosec // test
		if code, body, proto, err := get(c, "/h2"); err != nil || code != 200 || proto != 2 || body != "slow page /h2" {
			t.Fatalf("late 103 over HTTP/2 (edge): %d %q HTTP/%d %v", code, body, proto, err)
		}
	})
	t.Run("HTTP/3", func(t *testing.T) {
		c := dialRawH3(t, n, nil)
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/h3")))
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		r := quicvarint.NewReader(s)
		var statuses []string
		var body []byte
		for {
			typ, err := quicvarint.Read(r)
			if err != nil {
				break
			}
			l, err := quicvarint.Read(r)
			if err != nil {
				t.Fatal(err)
			}
			p := make([]byte, l)
			if _, err := io.ReadFull(s, p); err != nil {
				t.Fatal(err)
			}
			switch typ {
			case 0x00:
				body = append(body, p...)
			case 0x01:
				next := qpack.NewDecoder().Decode(p)
				for {
					f, err := next()
					if err != nil {
						break
					}
					if f.Name == ":status" {
						statuses = append(statuses, f.Value)
					}
				}
			}
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != "200" || string(body) != "slow page /h3" {
			t.Fatalf("late 103 over HTTP/3: statuses %v, body %q", statuses, body)
		}
	})
	t.Run("HTTPS/1.1", func(t *testing.T) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}, DisableCompression: true}} //nolint:gosec // test
		if code, body, proto, err := get(c, "/h1"); err != nil || code != 200 || proto != 1 || body != "slow page /h1" {
			t.Fatalf("late 103 over HTTPS/1.1: %d %q HTTP/%d %v; the 103 was written on the request's expired first write deadline and the final answer was lost", code, body, proto, err)
		}
	})
}
