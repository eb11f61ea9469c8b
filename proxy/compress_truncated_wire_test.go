package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// On the wire: an HTTP/1.0 client (close-delimited body).
func TestCompressTruncatedWire10(t *testing.T) {
	for _, cc := range []string{"no-store", "max-age=60"} {
		for _, ae := range []string{"gzip", "br"} {
			p := newTestProxy(t, withProdCompression)
			body := page(400000)
			p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				_, _ = w.Write([]byte(body[:300000]))
				conn, bw, _ := http.NewResponseController(w).Hijack()
				bw.Flush()
				conn.Close()
			})
			srv := httptest.NewServer(p.h)
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "GET /t-"+cc+" HTTP/1.0\r\nHost: example.com\r\nAccept-Encoding: "+ae+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				// The connection was cut before a header: the client sees
				// an error, never a wrong body. Which comes first depends on
				// how far the fill got before the origin's cut (load).
				t.Logf("%s %s: no response (%v): the safe outcome", cc, ae, err)
				c.Close()
				srv.Close()
				continue
			}
			raw, rerr := io.ReadAll(resp.Body)
			c.Close()
			got, derr := decodeAs(t, ae, raw)
			t.Logf("%s %s: CE %q CL %q read err %v, %d raw bytes, decode err %v, %d decoded", cc, ae, resp.Header.Get("Content-Encoding"), resp.Header.Get("Content-Length"), rerr, len(raw), derr, len(got))
			if rerr == nil && derr == nil && len(got) < len(body) {
				t.Errorf("%s %s: HTTP/1.0 client got a complete, valid %s stream of %d/%d bytes", cc, ae, ae, len(got), len(body))
			}
			srv.Close()
		}
	}
}
