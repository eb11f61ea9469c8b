package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rvH2 is a raw HTTP/2 client over TLS (ALPN h2).
type rvH2 struct {
	t   *testing.T
	cc  *tls.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func rvH2Dial(t *testing.T, addr string) *rvH2 {
	t.Helper()
	cc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, ServerName: "a.test"}) //nolint:gosec
	if err != nil {
		t.Fatal(err)
	}
	if p := cc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q", p)
	}
	t.Cleanup(func() { cc.Close() })
	c := &rvH2{t: t, cc: cc}
	_, _ = cc.Write([]byte(http2.ClientPreface))
	c.fr = http2.NewFramer(cc, cc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = c.fr.WriteWindowUpdate(0, 1<<30)
	return c
}

// ask sends one request (fields as name, value pairs) on stream id and
// reads its answer: status, selected header fields, body.
func (c *rvH2) ask(id uint32, fields ...string) string {
	c.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	_ = c.cc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var status string
	var hdr []string
	var body []byte
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return "read error: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			status = f.PseudoValue("status")
			for _, hf := range f.RegularFields() {
				switch hf.Name {
				case "date", "age", "alt-svc":
					continue
				}
				hdr = append(hdr, hf.Name+"="+hf.Value)
			}
			if f.StreamEnded() {
				goto done
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				goto done
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
done:
	sort.Strings(hdr)
	return fmt.Sprintf("%s [%s] %q", status, strings.Join(hdr, " "), body)
}

func rvNodeYAML(t *testing.T, originA, originB, server string) string {
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test", "b.test"}, 1)
	return "listen: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "'}\n" +
		"tls: {listen: '" + freeAddr(t) + "', cert_file: '" + cp + "', key_file: '" + kp + "'}\n" +
		"tuning: {hit_path: true, http2_server: " + server + "}\n" +
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['" + originA + "']\n" +
		"  - name: b\n    hosts: [b.test]\n    origins: ['" + originB + "']\n"
}

// TestReviewH2HitPathAgreesWithGoServer asks the same hostile requests of
// a node running edge's HTTP/2 server (hits on the read loop) and one
// running net/http's, after the same fills: any difference is a request
// the hit path answered that ServeHTTP would have answered otherwise.
func TestReviewH2HitPathAgreesWithGoServer(t *testing.T) {
	originFor := func(site string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("X-A-Very-Long-Response-Header-Name-That-Is-Longer-Than-Sixty-Four", "long")
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "site=%s path=%s auth=%q cookie=%q range=%q ims=%q xk=%q inm=%q",
				site, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Cookie"), r.Header.Get("Range"),
				r.Header.Get("If-Modified-Since"), r.Header.Get("X-Key"), r.Header.Get("If-None-Match"))
		}))
	}
	oa, ob := originFor("A"), originFor("B")
	defer oa.Close()
	defer ob.Close()
	edge := startNodeYAML(t, rvNodeYAML(t, oa.URL, ob.URL, "edge"))
	gosrv := startNodeYAML(t, rvNodeYAML(t, oa.URL, ob.URL, "go"))
	base := func(auth, path string) []string {
		return []string{":method", "GET", ":scheme", "https", ":authority", auth, ":path", path}
	}
	fills := [][]string{base("a.test", "/p"), base("b.test", "/p"), base("a.test", "/q?x=1"), base("a.test", "/")}
	for _, n := range []*Node{edge, gosrv} {
		c := rvH2Dial(t, n.tls.ln.Addr().String())
		id := uint32(1)
		for range 3 {
			for _, f := range fills {
				c.ask(id, f...)
				id += 2
				n.Proxy().Wait()
			}
		}
	}
	hostile := [][]string{
		base("a.test", "/p"),
		append(base("a.test", "/p"), "authorization", "Bearer alice"),
		append(base("a.test", "/p"), "cookie", "sid=alice"),
		append(base("a.test", "/p"), "cookie", "a=1", "cookie", "sid=alice"),
		append(base("a.test", "/p"), "range", "bytes=0-3"),
		append(base("a.test", "/p"), "if-modified-since", "Thu, 01 Jan 2099 00:00:00 GMT"),
		append(base("a.test", "/p"), "if-none-match", "*"),
		append(base("a.test", "/p"), "x-key", "k1"),
		append(base("a.test", "/p"), "host", "b.test"),
		append(base("b.test", "/p"), "host", "a.test"),
		append(base("a.test", "/p"), "cache-control", "no-cache"),
		append(base("a.test", "/p"), "pragma", "no-cache"),
		append(base("a.test", "/p"), "x-forwarded-host", "b.test"),
		append(base("a.test", "/p"), "x-forwarded-proto", "http"),
		append(base("a.test", "/p"), "forwarded", "host=b.test"),
		append(base("a.test", "/p"), "x-original-url", "/q?x=1"),
		append(base("a.test", "/p"), "x-http-method-override", "POST"),
		append(base("a.test", "/p"), "proxy-authorization", "Basic eA=="),
		append(base("a.test", "/p"), "accept-encoding", "gzip", "accept-encoding", "br"),
		append(base("a.test", "/p"), "te", "trailers"),
		append(base("a.test", "/p"), "edge-debug", "1"),
		append(base("a.test", "/p"), "x_key", "1"),
		base("A.TEST", "/p"),
		base("a.test.", "/p"),
		base("a.test:443", "/p"),
		base("a.test:8443", "/p"),
		base("b.test", "/p"),
		base("c.test", "/p"),
		base("user@a.test", "/p"),
		base("a.test", "/p?"),
		base("a.test", "/p#frag"),
		base("a.test", "/%70"),
		base("a.test", "//p"),
		base("a.test", "/./p"),
		base("a.test", "/q?x=1"),
		base("a.test", "/q?x=%31"),
		base("a.test", "/Q?x=1"),
		base("a.test", "*"),
		[]string{":method", "GET", ":scheme", "http", ":authority", "a.test", ":path", "/p"},
		[]string{":method", "GET", ":scheme", "https", ":path", "/p", "host", "a.test"},
		[]string{":method", "HEAD", ":scheme", "https", ":authority", "a.test", ":path", "/p"},
		[]string{":method", "get", ":scheme", "https", ":authority", "a.test", ":path", "/p"},
		[]string{":method", "OPTIONS", ":scheme", "https", ":authority", "a.test", ":path", "/p"},
	}
	ce, cg := rvH2Dial(t, edge.tls.ln.Addr().String()), rvH2Dial(t, gosrv.tls.ln.Addr().String())
	id := uint32(1)
	for _, f := range hostile {
		a, b := ce.ask(id, f...), cg.ask(id, f...)
		id += 2
		a = strings.ReplaceAll(a, edge.cfg.NodeID, "NODE")
		b = strings.ReplaceAll(b, gosrv.cfg.NodeID, "NODE")
		if a != b {
			t.Errorf("%v:\n  edge: %s\n  go:   %s", f[6:], a, b)
		} else {
			t.Logf("%v: %s", f[6:], a)
		}
	}
}

// An upload the origin refuses without reading it (401 after a moment)
// must not leave the client's connection unable to upload again.
func TestReviewH2RefusedUploadStallsConnection(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			time.Sleep(500 * time.Millisecond)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d", n)
	}))
	defer origin.Close()
	for _, server := range []string{"edge", "go"} {
		n := startNodeYAML(t, rvNodeYAML(t, origin.URL, origin.URL, server))
		client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}}} //nolint:gosec
		url := "https://" + n.tls.ln.Addr().String()
		do := func(path string, size int, timeout time.Duration) string {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", url+path, bytes.NewReader(make([]byte, size)))
			req.Host = "a.test"
			resp, err := client.Do(req)
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.Proto + " " + resp.Status + " " + string(b)
		}
		t.Logf("%s: refused upload: %s", server, do("/refuse", 8<<20, 10*time.Second))
		got := do("/up", 64<<10, 5*time.Second)
		t.Logf("%s: next upload: %s", server, got)
		if !strings.Contains(got, "got 65536") {
			t.Errorf("%s: the next upload on the connection did not complete: %s", server, got)
		}
	}
}

// blackholeOrigin is a loopback listener whose accept queue is full: a
// connect to it hangs (its SYNs are dropped) until the dialer's timeout,
// as an origin behind a dropped route does.
func blackholeOrigin(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 4 { // fill the queue
		go func() {
			c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
			if err == nil {
				t.Cleanup(func() { c.Close() })
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	return addr
}

// An upload to a site whose origin does not answer the connect: the node
// answers 502/504 after origin.connect_timeout without reading the body the
// client uploaded meanwhile. The client's next upload on the connection
// must still go through.
func TestReviewH2UploadToDeadOriginStallsConnection(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d", n)
	}))
	defer good.Close()
	dead := blackholeOrigin(t)
	for _, server := range []string{"edge", "go"} {
		n := startNodeYAML(t, rvNodeYAML(t, good.URL, "http://"+dead, server)+"origin: {connect_timeout: 1s}\n")
		client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}}} //nolint:gosec
		url := "https://" + n.tls.ln.Addr().String()
		do := func(host, path string, size int, timeout time.Duration) string {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", url+path, bytes.NewReader(make([]byte, size)))
			req.Host = host
			resp, err := client.Do(req)
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.Proto + " " + resp.Status + " " + strings.TrimSpace(string(b))
		}
		t.Logf("%s: upload to the dead origin: %s", server, do("b.test", "/up", 8<<20, 10*time.Second))
		got := do("a.test", "/up", 64<<10, 5*time.Second)
		t.Logf("%s: next upload (healthy site): %s", server, got)
		if !strings.Contains(got, "got 65536") {
			t.Errorf("%s: the next upload on the connection did not complete: %s", server, got)
		}
	}
}

// limits.body_timeout / limits.min_body_rate: a body that stops after a few
// bytes is answered 408 once its grace is over (the proxy enforces it with
// http.ResponseController.SetReadDeadline).
func TestReviewH2SlowBodyIsCutOff(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d %v", n, err)
	}))
	defer origin.Close()
	for _, server := range []string{"edge", "go"} {
		n := startNodeYAML(t, rvNodeYAML(t, origin.URL, origin.URL, server)+"limits: {body_timeout: 1s, min_body_rate: 1KiB}\n")
		c := rvH2Dial(t, n.tls.ln.Addr().String())
		c.hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "a.test"}, {":path", "/up"}, {"content-length", "100000"}} {
			_ = c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hb.Bytes(), EndHeaders: true})
		_ = c.fr.WriteData(1, false, []byte("0123456789"))
		start := time.Now()
		_ = c.cc.SetReadDeadline(time.Now().Add(6 * time.Second))
		got := "no answer in 6 s"
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				break
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 1 {
				got = h.PseudoValue("status") + " after " + time.Since(start).Round(100*time.Millisecond).String()
				break
			}
			if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
				got = "RST " + r.ErrCode.String()
				break
			}
		}
		c.cc.Close()
		t.Logf("%s: a body stalled after 10 of 100000 bytes: %s", server, got)
		if !strings.HasPrefix(got, "408") {
			t.Errorf("%s: the stalled upload was not cut off: %s", server, got)
		}
	}
}
