package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
)

// s10NodeTranscript writes raw on a new connection to addr and returns the
// answers ("status body" each), then EOF or open.
func s10NodeTranscript(t *testing.T, addr, raw string, methods []string, split bool) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err) // not Fatal: the cases run on goroutines of their own
		return "dial: " + err.Error()
	}
	defer c.Close()
	go func() {
		if !split {
			_, _ = io.WriteString(c, raw)
			return
		}
		for i := 0; i < len(raw); i++ {
			if _, err := c.Write([]byte{raw[i]}); err != nil {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	wait := time.Second + time.Duration(len(raw))*time.Millisecond/2
	return e2e.Transcript(c, methods, 30, wait, func(resp *http.Response, b []byte, _ error) string {
		body := string(b)
		if resp.StatusCode >= 400 {
			body = ""
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	})
}

var s10NodeCases = []struct {
	name, raw string
	methods   []string
}{
	{"hit", "GET /h HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"CL+TE GET smuggle", "GET /h HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /evil1 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"TE GET smuggle", "GET /h HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n21\r\nGET /evil2 HTTP/1.1\r\nHost: x\r\n\r\n\r\n0\r\n\r\n", nil},
	{"CL GET smuggle", "GET /h HTTP/1.1\r\nHost: x\r\nContent-Length: 33\r\n\r\nGET /evil3 HTTP/1.1\r\nHost: x\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"dup CL", "GET /h HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 33\r\n\r\nGET /evil4 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"TE chunked, identity POST", "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 3\r\n\r\n0\r\n\r\nGET /evil5 HTTP/1.1\r\nHost: x\r\n\r\n", []string{"POST"}},
	{"obs-fold TE", "GET /h HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /evil6 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"bare LF smuggle", "GET /h HTTP/1.1\r\nHost: x\nContent-Length: 33\r\n\r\nGET /evil7 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"bare CR", "GET /h HTTP/1.1\r\nHost: x\rContent-Length: 33\r\n\r\nGET /evil8 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"hit then miss then hit", "GET /h HTTP/1.1\r\nHost: x\r\n\r\nGET /m1 HTTP/1.1\r\nHost: x\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\nHEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET", "GET", "GET", "HEAD", "GET"}},
	{"hit, POST CL, hit", "GET /h HTTP/1.1\r\nHost: x\r\n\r\nPOST /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 33\r\n\r\nGET /evil9 HTTP/1.1\r\nHost: x\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET", "POST", "GET"}},
	{"expect", "GET /h HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"1.0 keep-alive", "GET /h HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"absolute", "GET http://y/h HTTP/1.1\r\nHost: x\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"dup host", "GET /h HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", nil},
	{"no host", "GET /h HTTP/1.1\r\n\r\n", nil},
	{"host port case", "GET /h HTTP/1.1\r\nHost: X:80\r\n\r\n", nil},
	{"host trailing dot", "GET /h HTTP/1.1\r\nHost: x.\r\n\r\n", nil},
	{"close", "GET /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /evil10 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"escaped path", "GET /%68 HTTP/1.1\r\nHost: x\r\n\r\nGET /h? HTTP/1.1\r\nHost: x\r\n\r\nGET /h?a HTTP/1.1\r\nHost: x\r\n\r\nGET /h?a HTTP/1.1\r\nHost: x\r\n\r\n", nil},
	{"method override", "GET /h HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: POST\r\n\r\n", nil},
	{"xfh", "GET /h HTTP/1.1\r\nHost: x\r\nX-Forwarded-Host: evil\r\n\r\n", nil},
	{"ae many", "GET /h HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nAccept-Encoding: br\r\nAccept-Encoding: x\r\nAccept-Encoding: y\r\nAccept-Encoding: z\r\n\r\n", nil},
	{"underscore", "GET /h HTTP/1.1\r\nHost: x\r\nContent_Length: 33\r\n\r\nGET /evil11 HTTP/1.1\r\nHost: x\r\n\r\n", nil},
}

// TestS10NodeSmugglingDifferential sends each case (whole, then one byte
// per write) to a node with the hit path and one without, each in front of
// a raw origin, after warming /h on both; answers and the origin's request
// lines must match.
func TestS10NodeSmugglingDifferential(t *testing.T) {
	type side struct {
		addr string
		o    *rawOrigin
	}
	var sides [2]side
	for i, on := range []bool{false, true} {
		o := newRawOrigin(t)
		n := startNode(t, "http://"+o.ln.Addr().String(), hitPathYAML(on))
		sides[i] = side{n.PublicAddr(), o}
		s10NodeTranscript(t, sides[i].addr, "GET /h HTTP/1.1\r\nHost: x\r\n\r\n", nil, false)
	}
	// Each transcript ends on a read that waits for its deadline (a
	// connection left open), so the cases run side by side, eight at a
	// time; the origin's lines are then compared as sets of lines.
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for _, split := range []bool{false, true} {
		for _, tc := range s10NodeCases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				var want, got string
				var both sync.WaitGroup
				both.Add(2)
				go func() { defer both.Done(); want = s10NodeTranscript(t, sides[0].addr, tc.raw, tc.methods, split) }()
				go func() { defer both.Done(); got = s10NodeTranscript(t, sides[1].addr, tc.raw, tc.methods, split) }()
				both.Wait()
				if got != want {
					t.Errorf("%s (split %v):\n without the hit path: %s\n with it:              %s", tc.name, split, want, got)
				}
			}()
		}
	}
	wg.Wait()
	// The origin's lines are compared as sets of distinct lines: a request
	// smuggled through one side shows as a line the other lacks. How many
	// times a line came is not compared: the cases run side by side, and
	// whether two of them that reach the origin for one URL meet in one
	// fill (collapsed) or follow one another (two fetches, or a fetch and a
	// hit) is the scheduler's; on a loaded machine one side's six fetches
	// of /h were five once.
	a, b := sides[0].o.lines(), sides[1].o.lines()
	slices.Sort(a)
	slices.Sort(b)
	if a, b = slices.Compact(a), slices.Compact(b); strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("origin request lines differ:\n without: %q\n with:    %q", a, b)
	}
	t.Logf("origin lines: %q", b)
}
