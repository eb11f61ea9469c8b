package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go/quicvarint"
)

// s38HintingOrigin sends a 103 (a Link and a Set-Cookie that must not go
// on) and then the page, cacheable for ten minutes.
func s38HintingOrigin(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Link", fmt.Sprintf("</h%d.css>; rel=preload; as=style", n))
		w.Header().Set("Set-Cookie", "hint=secret")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Del("Set-Cookie")
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o, &calls
}

// TestS38HintsOverHTTP3: a miss over HTTP/3 (quic-go) gets the origin's
// 103 as a HEADERS frame of its own holding the Link only, then the final
// answer with the node's HSTS and Alt-Svc and no hint field; the hit
// after it gets no 103.
func TestS38HintsOverHTTP3(t *testing.T) {
	o, _ := s38HintingOrigin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNode(t, o.URL, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true, hsts: 'max-age=300'}\n")
	c := dialRawH3(t, n, nil)
	ask := func() (blocks []http.Header) {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/h3page")))
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		r := quicvarint.NewReader(s)
		for {
			typ, err := quicvarint.Read(r)
			if err != nil {
				return blocks
			}
			l, err := quicvarint.Read(r)
			if err != nil {
				t.Fatal(err)
			}
			p := make([]byte, l)
			if _, err := io.ReadFull(s, p); err != nil {
				t.Fatal(err)
			}
			if typ != 0x01 {
				continue
			}
			h := http.Header{}
			next := qpack.NewDecoder().Decode(p)
			for {
				f, err := next()
				if err != nil {
					break
				}
				h.Add(f.Name, f.Value)
			}
			blocks = append(blocks, h)
		}
	}
	blocks := ask()
	if len(blocks) != 2 || blocks[0].Get(":status") != "103" || blocks[1].Get(":status") != "200" {
		t.Fatalf("HTTP/3 miss: header blocks %v, want a 103 then the 200", blocks)
	}
	if len(blocks[0]) != 2 || blocks[0].Get("link") != "</h1.css>; rel=preload; as=style" {
		t.Errorf("HTTP/3 103 carries %v, want its :status and Link only", blocks[0])
	}
	if f := blocks[1]; f.Get("strict-transport-security") == "" || f.Get("alt-svc") == "" || f.Get("link") != "" || f.Get("set-cookie") != "" {
		t.Errorf("HTTP/3 final answer %v: want the node's HSTS and Alt-Svc, no Link or Set-Cookie", f)
	}
	if blocks = ask(); len(blocks) != 1 || blocks[0].Get(":status") != "200" {
		t.Errorf("HTTP/3 hit: header blocks %v, want the 200 alone", blocks)
	}
}

// TestS38HintsNeverCrossTheCluster: a miss whose home is a peer goes to
// the peer, which fetches from the origin for a peer's request: the
// origin's 103 stops there (counted dropped on the home), never reaches
// the peer connection (its signed answer still verifies: a 200 through
// the peer) nor the ingress's client; a miss the ingress fetches itself
// gets its 103.
func TestS38HintsNeverCrossTheCluster(t *testing.T) {
	o, _ := s38HintingOrigin(t)
	clA, clB := freeAddr(t), freeAddr(t)
	start := func(id, cl string) *Node {
		return startNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+o.URL+"'}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n")
	}
	a, b := start("a", clA), start("b", clB)
	time.Sleep(500 * time.Millisecond) // membership
	viaPeer, own := 0, 0
	for i := range 16 {
		var mu sync.Mutex
		var hints []textproto.MIMEHeader
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			hints = append(hints, h)
			return nil
		}})
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+a.pubLn.Addr().String()+"/c/"+itoa(i), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		got := len(hints)
		mu.Unlock()
		if resp.StatusCode != 200 || string(body) != "page /c/"+itoa(i) {
			t.Fatalf("/c/%d: %d %q", i, resp.StatusCode, body)
		}
		if strings.Contains(resp.Header.Get("Cache-Status"), "b; ") {
			viaPeer++
			if got != 0 {
				t.Errorf("/c/%d, answered by peer b: the client got %d 103s, want none", i, got)
			}
		} else {
			own++
			if got != 1 {
				t.Errorf("/c/%d, fetched by a itself: %d 103s, want 1", i, got)
			}
		}
	}
	if viaPeer == 0 || own == 0 {
		t.Skipf("the pages did not split between the nodes (%d via peer, %d own)", viaPeer, own)
	}
	if s := b.proxy.Stats().EarlyHints; s["relayed"] != 0 || s["dropped"] != float64(viaPeer) {
		t.Errorf("home b's early hints %v for %d peer requests: want all dropped, none relayed", s, viaPeer)
	}
}
