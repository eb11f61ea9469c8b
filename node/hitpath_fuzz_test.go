package node

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/coding"
)

// differentialPair is two nodes in front of one origin, the HTTP/1.1 hit
// path on in one and off in the other, with the same pages cached.
type differentialPair struct {
	on, off *Node
	// mu makes each input's two exchanges one step: the fuzzer's workers
	// run inputs side by side, and interleaved inputs would leave the two
	// caches in different states.
	mu sync.Mutex
}

// pairOrigin serves deterministic pages: cacheable ones with validators, one
// that varies, one that compresses, one that is private.
func pairOrigin() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch {
		case strings.HasPrefix(r.URL.Path, "/vary"):
			h.Set("Cache-Control", "max-age=600")
			h.Set("Vary", "Accept-Language")
			_, _ = io.WriteString(w, "lang "+r.Header.Get("Accept-Language"))
		case strings.HasPrefix(r.URL.Path, "/private"):
			h.Set("Cache-Control", "private")
			_, _ = io.WriteString(w, "private page")
		case strings.HasPrefix(r.URL.Path, "/text"):
			h.Set("Cache-Control", "max-age=600")
			h.Set("Content-Type", "text/html")
			h.Set("ETag", `"t1"`)
			_, _ = io.WriteString(w, strings.Repeat("<p>compressible text for the coder</p>\n", 200))
		default:
			h.Set("Cache-Control", "max-age=600")
			h.Set("ETag", `"p1"`)
			h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
			_, _ = fmt.Fprintf(w, "page %s?%s", r.URL.Path, r.URL.RawQuery)
		}
	})
}

func newDifferentialPair(t testing.TB) *differentialPair {
	origin := httptest.NewServer(pairOrigin())
	t.Cleanup(origin.Close)
	p := &differentialPair{}
	for _, on := range []bool{true, false} {
		n := startNodeYAML(t, fmt.Sprintf("origin: {url: '%s'}\nlisten: '%s'\nadmin: {listen: '%s'}\ntuning: {hit_path: %v}\n",
			origin.URL, freeAddr(t), freeAddr(t), on))
		if on {
			p.on = n
		} else {
			p.off = n
		}
	}
	// The same pages in both caches, made the same way.
	warm := "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b?q=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /text HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\n\r\n" +
		"GET /text HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\nGET /vary HTTP/1.1\r\nHost: x\r\nAccept-Language: de\r\n\r\n"
	for _, n := range []*Node{p.on, p.off} {
		exchange(t, n.PublicAddr(), []byte(warm))
		waitForForms(t, n, "/text")
	}
	return p
}

// waitForForms asks for path in every coding, twice, letting the node's
// background work end after each: forms are made in the background after
// a first hit, and the two caches must hold the same ones.
func waitForForms(t testing.TB, n *Node, path string) {
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 5 * time.Second}
	for _, ae := range []string{"br", "gzip", "zstd", "br, gzip", "gzip, deflate, br, zstd"} {
		for range 2 {
			req, _ := http.NewRequest("GET", "http://"+n.PublicAddr()+path, nil)
			req.Host = "x"
			req.Header.Set("Accept-Encoding", ae)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			n.Proxy().Wait()
		}
	}
}

// closing ends every stream: a last request that closes the connection,
// so that the server ends the exchange (a half-close would not do: net/http
// takes a read EOF for a client that left and cancels what is in flight).
const closing = "GET /end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

// exchange writes stream and the closing request on one connection and
// returns the responses read until the server closes (a slice of
// normalised answers) or 3 s pass.
func exchange(t testing.TB, addr string, stream []byte) []string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	stream = append(slices.Clip(stream), closing...)
	go func() { _, _ = c.Write(stream) }()
	// The methods in order, as net/http reads them, so that a HEAD's
	// answer is read without a body.
	var methods []string
	rr := bufio.NewReader(bytes.NewReader(stream))
	for {
		req, err := http.ReadRequest(rr)
		if err != nil {
			break
		}
		methods = append(methods, req.Method)
		_, _ = io.Copy(io.Discard, req.Body)
	}
	br := bufio.NewReader(c)
	var out []string
	for i := 0; ; i++ {
		method := http.MethodGet
		if i < len(methods) {
			method = methods[i]
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "connection reset") {
				out = append(out, "end: "+errorKind(err))
			}
			return out
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, normalise(resp, body, err))
		if resp.Close {
			return out
		}
	}
}

func errorKind(err error) string {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "timeout"
	}
	return "malformed"
}

// normalise keeps what must agree: status, body, and every field but those
// that name the moment (Date, Age).
func normalise(resp *http.Response, body []byte, err error) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d ", resp.StatusCode)
	// An answer streamed from upstream (not a hit) is sent with a length
	// or chunked depending on whether net/http had it all before its
	// buffer filled: timing, not the hit path.
	streamed := !strings.Contains(resp.Header.Get("Cache-Status"), "; hit")
	keys := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		if k != "Date" && k != "Age" && (k != "Content-Length" || !streamed) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(resp.Header[k], ", "))
	}
	// A body encoded as it streamed (a miss) has bytes that depend on
	// where the origin paused: compare what it decodes to.
	if enc, ok := coding.OfBody(resp.Header["Content-Encoding"]); ok && enc != coding.Identity && err == nil {
		if codec, cerr := coding.NewCodec(coding.DefaultLevels); cerr == nil {
			if plain, derr := codec.Decode(enc, body, 64<<20); derr == nil {
				body = plain
			}
		}
	}
	fmt.Fprintf(&b, "body %q err %v", body, err != nil)
	return b.String()
}

// FuzzHitPathAgreesWithServeHTTP sends the same pipelined byte stream to a
// node with the HTTP/1.1 hit path and to one without, and requires the
// same answers: the fast path may only be faster, never different.
// (hitpath.FuzzParseAgreesWithNetHTTP holds the parser alone; this holds
// the whole node.)
func FuzzHitPathAgreesWithServeHTTP(f *testing.F) {
	for _, s := range []string{
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b?q=1 HTTP/1.1\r\nHost: X.\r\n\r\nHEAD /a HTTP/1.1\r\nHost: x:80\r\n\r\n",
		"GET /text HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\n\r\nGET /text HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0, br\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"p1\"\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\nRange: bytes=0-2\r\n\r\n",
		"GET /vary HTTP/1.1\r\nHost: x\r\nAccept-Language: de\r\n\r\nGET /private HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-Prefix: //evil\r\nX-Asset: 1\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: [x]\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\nHost: x\r\n\r\n",
		"GET /%61 HTTP/1.1\r\nHost: x\r\n\r\nGET //a HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	p := newDifferentialPair(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		if len(stream) > 8<<10 {
			return
		}
		p.mu.Lock()
		on := exchange(t, p.on.PublicAddr(), stream)
		off := exchange(t, p.off.PublicAddr(), stream)
		// Fills a HEAD or a client that left started go on in the
		// background; the next input must find both caches settled.
		p.on.proxy.Wait()
		p.off.proxy.Wait()
		p.mu.Unlock()
		if !slices.Equal(on, off) {
			t.Fatalf("the hit path answers differently to %q\nhit path on:\n%s\noff:\n%s", stream, strings.Join(on, "\n---\n"), strings.Join(off, "\n---\n"))
		}
	})
}
