package h2server

// A hostile review of 01fb038 (request bodies of unknown length read whole
// before the request takes an upstream slot) through the edge's own
// HTTP/2 server (tuning.http2_server: edge).

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

type rvcSeen struct {
	method, cl, te string
	body           []byte
	trailer        http.Header
}

func rvcSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]) + " " + strconv.Itoa(len(b))
}

func rvcPattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*7 + i/251 + seed) % 253)
	}
	return b
}

func rvcSetup(t *testing.T, mod func(*proxy.Config)) (*rvClient, func(string) (rvcSeen, bool)) {
	var mu sync.Mutex
	got := map[string]rvcSeen{}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = rvcSeen{r.Method, strings.Join(r.Header["Content-Length"], ","), strings.Join(r.TransferEncoding, ","), b, r.Trailer.Clone()}
		mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, rvcSum(b))
	}))
	t.Cleanup(origin.Close)
	cfg := proxy.DefaultConfig()
	cfg.SpoolDir, cfg.SpoolBytes = t.TempDir(), 64<<20
	if mod != nil {
		mod(&cfg)
	}
	store := proxy.NewStore(1<<20, 1)
	h := proxy.New(cfg, store, rvFetcher{origin.URL}, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	addr := rvServer(t, &Server{Handler: h})
	c := rvDial(t, addr)
	c.collect(200*time.Millisecond, nil, func(map[uint32]*rvResp) bool { return false }) // the server's SETTINGS and window
	return c, func(p string) (rvcSeen, bool) { mu.Lock(); defer mu.Unlock(); s, ok := got[p]; return s, ok }
}

// Bodies without a content-length over the edge's HTTP/2 server (several
// DATA frames, END_STREAM on the last; an empty DATA frame with END_STREAM;
// trailers in a last HEADERS frame) reach the origin whole with their
// Content-Length.
func TestReviewH2UnknownLengthGoesWithItsLength(t *testing.T) {
	c, seen := rvcSetup(t, nil)
	id := uint32(1)
	for _, size := range []int{0, 1, 64 << 10, 64<<10 + 1, 300 << 10} {
		for _, withTrailer := range []bool{false, true} {
			path := "/h2/" + strconv.Itoa(size) + "/" + strconv.FormatBool(withTrailer)
			body := rvcPattern(size, size)
			extra := []string{}
			if withTrailer {
				extra = []string{"trailer", "x-checksum"}
			}
			c.headers(id, false, rvPost(path, extra...)...)
			if withTrailer {
				c.data(id, false, body)
				c.headers(id, true, "x-checksum", "abc")
			} else {
				c.data(id, true, body)
			}
			resps, ok := c.collect(20*time.Second, nil, ended(id))
			if !ok {
				t.Fatalf("%s: no answer", path)
			}
			r := resps[id]
			if r.status != "200" || string(r.body) != rvcSum(body) {
				t.Errorf("%s: %s %q", path, r.status, r.body)
			}
			s, _ := seen(path)
			wantCL := strconv.Itoa(size)
			if s.method != "POST" || s.cl != wantCL || s.te != "" || string(s.body) != string(body) {
				t.Errorf("%s reached the origin as %s, Content-Length %q, Transfer-Encoding %q, %d bytes; want POST %q, none, %d",
					path, s.method, s.cl, s.te, len(s.body), wantCL, size)
			}
			id += 2
		}
	}
}

// A stalled HTTP/2 upload without a length is ended by body_timeout (408)
// through the edge's HTTP/2 server's read deadline.
func TestReviewH2StalledUnknownLengthIs408(t *testing.T) {
	c, seen := rvcSetup(t, func(cfg *proxy.Config) { cfg.BodyTimeout = 300 * time.Millisecond; cfg.MinBodyRate = 1 << 20 })
	for i, size := range []int{5, 100 << 10} {
		id := uint32(1 + 2*i)
		c.headers(id, false, rvPost("/stall")...)
		c.data(id, false, rvcPattern(size, 1))
		resps, ok := c.collect(20*time.Second, nil, func(m map[uint32]*rvResp) bool { r := m[id]; return r != nil && r.status != "" })
		if !ok {
			t.Fatalf("%d bytes then a stall: no answer", size)
		}
		if resps[id].status != "408" {
			t.Errorf("%d bytes then a stall: %s, want 408", size, resps[id].status)
		}
	}
	if _, ok := seen("/stall"); ok {
		t.Error("the origin got a stalled upload")
	}
}
