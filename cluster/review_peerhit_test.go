package cluster

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"crypto/tls"
	"strconv"

	"github.com/edgecache/edge/coding"

	"github.com/edgecache/edge/proxy"
)

// An unsigned GET whose 64 field lines hide a Content-Length from the
// loop is handed head-only; net/http's 403 then waits for a body the loop
// keeps: the connection hangs with no timeout. Anyone who reaches the
// cluster port can do it (the loop parses before any MAC).
func TestReviewPeerListenerHangsOnBodyBehind64Fields(t *testing.T) {
	_, _, p, _, _ := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /p HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-F: 1\r\n", 64) + "Content-Length: 5\r\n\r\nhello"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer in 3 s: %v", err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", resp.StatusCode)
	}
}

// forwarding.strip_headers with X-Forwarded-Proto and cache.key_scheme:
// ServeHTTP deletes the peer's X-Forwarded-Proto before it keys the
// request (http), the loop reads it anyway (AnswererFields skip the strip
// list) and answers the https entry: another scheme's page.
func TestReviewStrippedForwardedProtoKeysAnotherScheme(t *testing.T) {
	pc := proxy.DefaultConfig()
	pc.KeyScheme = true
	pc.StripRequestHeaders = []string{"X-Forwarded-Proto"}
	home, ph, p, plain, in := peerHitHome(t, pc, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "for "+r.Header.Get("X-Forwarded-Proto"))
	})
	// A client of the home over TLS stores the https entry.
	req := httptest.NewRequest("GET", "http://h/p", nil)
	req.TLS = &tls.ConnectionState{}
	ph.ServeHTTP(httptest.NewRecorder(), req)
	ph.Wait()
	_, slow := signedGet(t, in, plain, "GET", "/p", "climb", "X-Forwarded-Proto", "https")
	ph.Wait()
	_, slow2 := signedGet(t, in, plain, "GET", "/p", "climb", "X-Forwarded-Proto", "https")
	before := loopHits(home)
	_, fast := signedGet(t, in, p, "GET", "/p", "climb", "X-Forwarded-Proto", "https")
	if fast != slow2 {
		t.Errorf("same request: net/http answers %q (first %q), the loop %q (loop hits %d→%d)", slow2, slow, fast, before, loopHits(home))
	}
}

// /_edge/indicator is routed by chi to the indicator whatever Edge-Mode
// says; the loop answers the cached page of that path instead.
func TestReviewProtocolPathsDiverge(t *testing.T) {
	home, ph, p, plain, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	})
	ph.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://h/_edge/indicator", nil))
	ph.Wait()
	slowResp, slow := signedGet(t, in, plain, "GET", "/_edge/indicator", "climb")
	fastResp, fast := signedGet(t, in, p, "GET", "/_edge/indicator", "climb")
	if slow != fast || slowResp.StatusCode != fastResp.StatusCode {
		t.Errorf("net/http: %d %q; loop: %d %q (loop hits %d)", slowResp.StatusCode, slow, fastResp.StatusCode, fast, loopHits(home))
	}
}

// A compressed form (made by the fill) answered on the loop verifies at
// the ingress, small and large, GET and HEAD.
func TestReviewCompressedFormVerifies(t *testing.T) {
	pc := proxy.DefaultConfig()
	codec, err := coding.NewCodec(coding.DefaultLevels)
	if err != nil {
		t.Fatal(err)
	}
	types, _ := coding.NewTypes(coding.DefaultTypes)
	pc.Compression = &proxy.Compression{Codec: codec, Types: types, MinBytes: 1024, MaxDecodedBytes: 32 << 20,
		Offer: coding.Set(0).With(coding.Identity).With(coding.Br).With(coding.Zstd).With(coding.Gzip)}
	var b strings.Builder
	for i := 0; b.Len() < 200000; i++ {
		b.WriteString("<li>item " + strconv.Itoa(i) + " of a long list of things</li>\n")
	}
	body := b.String()
	home, ph, p, plain, in := peerHitHome(t, pc, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, body)
	})
	for _, ae := range []string{"gzip", "br", "zstd", "identity"} {
		signedGet(t, in, plain, "GET", "/p", "climb", "Accept-Encoding", ae)
		ph.Wait()
		signedGet(t, in, plain, "GET", "/p", "climb", "Accept-Encoding", ae) // makes forms
		ph.Wait()
		before := loopHits(home)
		resp, got := signedGet(t, in, p, "GET", "/p", "climb", "Accept-Encoding", ae)
		sresp, sgot := signedGet(t, in, plain, "GET", "/p", "climb", "Accept-Encoding", ae)
		if got != sgot || resp.Header.Get("Content-Encoding") != sresp.Header.Get("Content-Encoding") {
			t.Errorf("%s: loop %d bytes %q, net/http %d bytes %q", ae, len(got), resp.Header.Get("Content-Encoding"), len(sgot), sresp.Header.Get("Content-Encoding"))
		}
		signedGet(t, in, p, "HEAD", "/p", "probe", "Accept-Encoding", ae)
		t.Logf("%s: loop hits %d→%d, coding %q", ae, before, loopHits(home), resp.Header.Get("Content-Encoding"))
	}
}

// An entry that carries the protocol's own response fields (an origin that
// sends them, or a copy of a peer's answer) still verifies from the loop.
func TestReviewStoredProtocolFieldsVerify(t *testing.T) {
	big := strings.Repeat("x", 10000)
	home, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Edge-Resp-Auth", "00")
		w.Header()["edge-body-auth"] = []string{"11"}
		w.Header().Set("Trailer", "Edge-Body-Auth")
		w.Header().Set("X-Ws", "  a  ")
		w.Header()["X-Empty"] = []string{""}
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, big)
			return
		}
		_, _ = io.WriteString(w, "v")
	})
	for _, path := range []string{"/small", "/big"} {
		signedGet(t, in, p, "GET", path, "climb")
		ph.Wait()
		before := loopHits(home)
		signedGet(t, in, p, "GET", path, "climb")
		signedGet(t, in, p, "HEAD", path, "climb")
		t.Logf("%s: loop hits %d→%d", path, before, loopHits(home))
	}
}

// One captured request sent on many connections at once is answered once,
// on a hit (loop) and on a miss (loop declines, gives the nonce back).
func TestReviewConcurrentReplayAnsweredOnce(t *testing.T) {
	_, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "v1")
	})
	signedGet(t, in, p, "GET", "/hit", "climb")
	ph.Wait()
	for round := 0; round < 30; round++ {
		target := "/hit"
		if round%2 == 1 {
			target = "/miss" + strconv.Itoa(round)
		}
		captured := rawPeerRequest(t, in, target)
		const n = 8
		codes := make(chan int, n)
		start := make(chan struct{})
		for range n {
			go func() {
				c, err := net.Dial("tcp", p.Addr)
				if err != nil {
					codes <- -1
					return
				}
				defer c.Close()
				<-start
				_, _ = c.Write(captured)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					codes <- -2
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				codes <- resp.StatusCode
			}()
		}
		close(start)
		ok := 0
		for range n {
			if <-codes == http.StatusOK {
				ok++
			}
		}
		ph.Wait()
		if ok != 1 {
			t.Fatalf("round %d %s: %d answers", round, target, ok)
		}
	}
}
