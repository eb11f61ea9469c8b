package cluster

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/proxy"
)

// handlerHits serves PeerHits from a proxy.Handler without a site table.
type handlerHits struct{ h *proxy.Handler }

func (s handlerHits) Site(string) (*proxy.Site, bool) { return nil, true }
func (s handlerHits) AppendHit(dst []byte, req *proxy.HitRequest, date []byte, a *proxy.HitAnswer) bool {
	return s.h.AppendHit(dst, req, date, a)
}
func (s handlerHits) ReleaseHit(e *proxy.Entry, ip string) { s.h.ReleaseHit(e, ip) }

// peerHitHome is a home whose cluster listener has the read loop, as a
// node serves it, in front of origin; it returns the home's cluster, its
// handler, its address and an ingress cluster that signs for "n0".
// plain is the same home's handler behind net/http alone, for comparison.
func peerHitHome(t testing.TB, pc proxy.Config, origin http.HandlerFunc) (home *Cluster, ph *proxy.Handler, p, plain *Peer, ingress *Cluster) {
	t.Helper()
	originSrv := httptest.NewServer(origin)
	t.Cleanup(originSrv.Close)
	store := proxy.NewStore(1<<20, 4)
	ph = proxy.New(pc, store, originAt(originSrv.URL), proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	home = playing(newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"}), "n1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// As the node wires it (node/node.go): the cache's field lists too.
	cfg := hitpath.Config{KeepFields: true, AnswererFields: PeerHitFields, StripFields: pc.StripRequestHeaders, UnkeyedFields: pc.UnkeyedRequestHeaders}
	hl := hitpath.NewListener(ln, cfg, home.PeerHits(handlerHits{ph}), nil)
	srv := &http.Server{Handler: home.PeerHandler(ph.ServeInbound, ph.Purge)}
	go func() { _ = hl.Serve(srv) }()
	t.Cleanup(func() { _ = srv.Close() })
	plainSrv := httptest.NewServer(srv.Handler)
	t.Cleanup(plainSrv.Close)
	ingress = newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	patient(ingress)
	return home, ph, &Peer{ID: "n1", Addr: ln.Addr().String()}, &Peer{ID: "n1", Addr: strings.TrimPrefix(plainSrv.URL, "http://")}, ingress
}

// signedGet sends a signed data request (mode climb or probe) and returns
// the verified answer, its body read to the end.
func signedGet(t testing.TB, c *Cluster, p *Peer, method, target, mode string, fields ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, "http://h"+target, nil)
	req.RequestURI = ""
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Add(fields[i], fields[i+1])
	}
	req.Header.Set(hdrMode, mode)
	req.Header.Set(hdrHop, "1")
	if mode == "probe" {
		req.Header.Set("Cache-Control", "only-if-cached")
	}
	resp, err := c.send(req, p)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, target, err) // a body MAC that does not match fails here
	}
	return resp, string(b)
}

func loopHits(c *Cluster) int { return int(testutil.ToFloat64(c.metrics.PeerLoopHits)) }

// A peer's request for a page held fresh is answered on the read loop,
// with the answer ServeHTTP gives (the same fields but framing, Date and
// Age, and the MACs), signed so that the ingress verifies it whole.
func TestPeerHitOnReadLoop(t *testing.T) {
	body := strings.Repeat("page ", 2000) // larger than the head's copy: written from the entry
	home, ph, p, plain, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Etag", `"v1"`)
		if r.URL.Path == "/small" {
			_, _ = io.WriteString(w, "small")
			return
		}
		_, _ = io.WriteString(w, body)
	})
	for _, path := range []string{"/big", "/small"} {
		want := body
		if path == "/small" {
			want = "small"
		}
		_, got := signedGet(t, in, p, "GET", path, "climb")
		ph.Wait()
		if got != want || loopHits(home) != 0 && path == "/big" {
			t.Fatalf("%s: the fill: %d bytes, loop hits %d", path, len(got), loopHits(home))
		}
		before := loopHits(home)
		loop, got := signedGet(t, in, p, "GET", path, "climb")
		if got != want || loopHits(home) != before+1 {
			t.Fatalf("%s: climb on a fresh hit: %d bytes, loop hits %d→%d", path, len(got), before, loopHits(home))
		}
		_, got = signedGet(t, in, p, "GET", path, "probe")
		if got != want || loopHits(home) != before+2 {
			t.Fatalf("%s: probe on a fresh hit: %d bytes, loop hits %d", path, len(got), loopHits(home))
		}
		head, got := signedGet(t, in, p, "HEAD", path, "probe")
		if got != "" || loopHits(home) != before+3 || head.ContentLength != int64(len(want)) {
			t.Fatalf("%s: HEAD: %q, length %d, loop hits %d", path, got, head.ContentLength, loopHits(home))
		}
		// The same hit through net/http alone.
		slow, got := signedGet(t, in, plain, "GET", path, "climb")
		if got != want || loopHits(home) != before+3 {
			t.Fatalf("%s: via net/http: %d bytes, loop hits %d", path, len(got), loopHits(home))
		}
		framing := []string{"Date", "Age", "Content-Length", "Transfer-Encoding", "Trailer", hdrRespAuth, hdrBodyAuth}
		names := func(h http.Header) []string {
			var out []string
			for _, k := range slices.Sorted(maps.Keys(h)) {
				if !slices.Contains(framing, k) {
					out = append(out, k+": "+strings.Join(h[k], ", "))
				}
			}
			return out
		}
		if a, b := names(loop.Header), names(slow.Header); !slices.Equal(a, b) || loop.StatusCode != slow.StatusCode {
			t.Errorf("%s: the loop answers\n%d %q\nnet/http answers\n%d %q", path, loop.StatusCode, a, slow.StatusCode, b)
		}
	}
}

// rawPeerRequest is a signed request's bytes, to send as a hostile peer
// would: twice, or altered after signing.
func rawPeerRequest(t testing.TB, c *Cluster, target string, fields ...string) []byte {
	t.Helper()
	req := httptest.NewRequest("GET", "http://h"+target, nil)
	req.RequestURI = ""
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	sign(c.cfg.Secret, c.cfg.NodeID, "n1", req) // to the home, which plays n1 (peerHitHome)
	var b bytes.Buffer
	if err := req.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func rawSend(t *testing.T, addr string, reqs ...[]byte) []*http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	var out []*http.Response
	for _, r := range reqs {
		if _, err := conn.Write(r); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, resp)
	}
	return out
}

// A captured request is answered once; an altered one never (the loop
// leaves both to PeerHandler, which refuses them and counts why).
func TestPeerHitRefusesReplayAndTampering(t *testing.T) {
	home, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "v1")
	})
	signedGet(t, in, p, "GET", "/p", "climb")
	ph.Wait()
	captured := rawPeerRequest(t, in, "/p")
	resps := rawSend(t, p.Addr, captured, captured)
	if resps[0].StatusCode != http.StatusOK || resps[1].StatusCode != http.StatusForbidden || loopHits(home) != 1 {
		t.Errorf("a request sent twice: %d then %d, loop hits %d (want 200, 403, 1)", resps[0].StatusCode, resps[1].StatusCode, loopHits(home))
	}
	if n := testutil.ToFloat64(home.metrics.PeerRejected.WithLabelValues("replay")); n != 1 {
		t.Errorf("replays counted: %v", n)
	}
	// A field added after signing (it could select a variant).
	tampered := bytes.Replace(rawPeerRequest(t, in, "/p"), []byte("\r\n\r\n"), []byte("\r\nX-Added: 1\r\n\r\n"), 1)
	// The target changed after signing.
	moved := bytes.Replace(rawPeerRequest(t, in, "/p"), []byte("GET /p "), []byte("GET /p?x "), 1)
	for _, r := range [][]byte{tampered, moved} {
		if resp := rawSend(t, p.Addr, r)[0]; resp.StatusCode != http.StatusForbidden {
			t.Errorf("altered request: %d, want 403", resp.StatusCode)
		}
	}
	if loopHits(home) != 1 {
		t.Errorf("loop hits %d after refused requests", loopHits(home))
	}
}

// What would select another answer never gets the plain one from the
// loop: a keyed or credential field, a request directive, or the https
// scheme when the key holds it.
func TestPeerHitNeverAnswersAnotherVariant(t *testing.T) {
	pc := proxy.DefaultConfig()
	pc.KeyScheme = true
	home, ph, p, _, in := peerHitHome(t, pc, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "for "+r.Header.Get("X-Forwarded-Proto")+" "+r.Header.Get("X-User")+r.Header.Get("Authorization"))
	})
	_, plain := signedGet(t, in, p, "GET", "/p", "climb", "X-Forwarded-Proto", "http")
	ph.Wait()
	if _, again := signedGet(t, in, p, "GET", "/p", "climb", "X-Forwarded-Proto", "http"); again != plain || loopHits(home) != 1 {
		t.Fatalf("the plain hit: %q, loop hits %d", again, loopHits(home))
	}
	for _, fields := range [][]string{
		{"X-Forwarded-Proto", "https"},
		{"X-Forwarded-Proto", "http", "X-User", "alice"},
		{"X-Forwarded-Proto", "http", "Authorization", "Bearer alice"},
		{"X-Forwarded-Proto", "http", "Cache-Control", "no-cache"},
	} {
		before := loopHits(home)
		resp, got := signedGet(t, in, p, "GET", "/p", "climb", fields...)
		if loopHits(home) != before {
			t.Errorf("%q: answered on the loop", fields)
		}
		if got == plain && fields[1] == "https" || strings.Contains(fields[len(fields)-1], "alice") && !strings.Contains(got, "alice") {
			t.Errorf("%q: got %q (%d), the plain variant's answer", fields, got, resp.StatusCode)
		}
	}
}

// FuzzSignHit: whatever head signHit signs, an ingress that reads it with
// net/http accepts the MACs (a field the two read differently would make
// the home's answers fail at every ingress), and signHit never panics.
func FuzzSignHit(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\nAge: 0\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a:  2 \r\nEdge-Resp-Auth: old\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nX-Empty:\r\n\r\nabc",
	} {
		f.Add([]byte(s), false)
	}
	secret := []byte("secret")
	const nonce = "0123456789abcdef0123456789abcdef"
	f.Fuzz(func(t *testing.T, head []byte, isHead bool) {
		signed, ok := signHit(secret, nonce, slices.Clone(head), nil, isHead)
		if !ok {
			return
		}
		method := http.MethodGet
		if isHead {
			method = http.MethodHead
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(signed)), &http.Request{Method: method})
		if err != nil || resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
			len(resp.TransferEncoding) > 0 || resp.ContentLength < 0 {
			return // not a head AppendHit writes (it writes a length, and a status with a body)
		}
		if err := verifyResponse(secret, nonce, resp); err != nil {
			t.Fatalf("%q signed as %q: %v", head, signed, err)
		}
		if !isHead && int64(len(head)-bytes.Index(head, []byte("\r\n\r\n"))-4) != resp.ContentLength {
			return // AppendHit's heads carry their body's length
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatalf("%q signed as %q: body: %v", head, signed, err)
		}
	})
}
