package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// s31Origin records every request: "METHOD path" -> bodies; GETs are
// cacheable pages.
type s31Origin struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string][]string
}

func newS31Origin(t *testing.T) *s31Origin {
	o := &s31Origin{seen: map[string][]string{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		o.seen[r.Method+" "+r.URL.Path] = append(o.seen[r.Method+" "+r.URL.Path], string(b))
		o.mu.Unlock()
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			w.Header().Set("Cache-Control", "max-age=600")
		} else {
			w.Header().Set("Cache-Control", "no-store")
		}
		_, _ = fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *s31Origin) got(k string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen[k]...)
}

func startS31Cluster3(t *testing.T, extra, siteYAML string) []*s7Node {
	t.Helper()
	cl := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	ids := []string{"a", "b", "c"}
	peers := "a=" + cl[0] + ",b=" + cl[1] + ",c=" + cl[2]
	var nodes []*s7Node
	for i, id := range ids {
		s := &s7Node{file: t.TempDir() + "/edge.yaml", pub: freeAddr(t), adm: freeAddr(t), t: t}
		s.writeRaw("node_id: " + id + "\ncluster: {listen: '" + cl[i] + "', peers: '" + peers + "', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n" + extra + siteYAML)
		s.run()
		nodes = append(nodes, s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range nodes {
			if len(n.cluster.Peers()) < 2 {
				ok = false
			}
		}
		if ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	return nodes
}

// Held: through a three-node cluster, every unsafe or bodied request
// (PUT, DELETE with a body, PATCH, OPTIONS, POST chunked, POST with
// Expect: 100-continue, POST of 300 KiB spooled to disk) taken by any
// node reaches the origin exactly once with its whole body; and
// cacheable GETs still go through the cluster: a page asked of all three
// nodes is fetched from the origin once.
func TestS31ClusterEveryMethodOnceWithItsBody(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three clustered nodes")
	}
	o := newS31Origin(t)
	nodes := startS31Cluster3(t, "limits: {spool_dir: '"+t.TempDir()+"'}\n",
		"sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	big := strings.Repeat("0123456789abcdef", 300<<10/16)
	build := func(method, path, body string, chunked, expect bool) string {
		h := method + " " + path + " HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n"
		if expect {
			h += "Expect: 100-continue\r\n"
		}
		if chunked {
			return h + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		}
		return h + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	}
	bad := 0
	for i := range 8 {
		n := nodes[i%3]
		cases := []struct {
			method, path, body string
			chunked, expect    bool
		}{
			{"PUT", fmt.Sprintf("/put/%d", i), fmt.Sprintf(`{"put":%d}`, i), false, false},
			{"DELETE", fmt.Sprintf("/del/%d", i), fmt.Sprintf(`{"del":%d}`, i), false, false},
			{"PATCH", fmt.Sprintf("/patch/%d", i), fmt.Sprintf(`{"patch":%d}`, i), false, false},
			{"OPTIONS", fmt.Sprintf("/opt/%d", i), "", false, false},
			{"POST", fmt.Sprintf("/chunked/%d", i), fmt.Sprintf(`{"chunked":%d}`, i), true, false},
			{"POST", fmt.Sprintf("/expect/%d", i), fmt.Sprintf(`{"expect":%d}`, i), false, true},
			{"POST", fmt.Sprintf("/spooled/%d", i), big, false, false},
		}
		for _, c := range cases {
			resp := s31Ask(t, n.pub, build(c.method, c.path, c.body, c.chunked, c.expect))
			got := o.got(c.method + " " + c.path)
			if resp.StatusCode != 200 || len(got) != 1 || got[0] != c.body {
				bad++
				lens := []int{}
				for _, g := range got {
					lens = append(lens, len(g))
				}
				t.Logf("%s %s via node %d: status %d, origin saw %d request(s), body lengths %v (want %d)", c.method, c.path, i%3, resp.StatusCode, len(got), lens, len(c.body))
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d requests did not reach the origin exactly once with their body", bad)
	}
	// Cacheable GETs still use the cluster: each page asked of a, b and c
	// reaches the origin once.
	for i := range 10 {
		path := fmt.Sprintf("/page/%d", i)
		for _, n := range nodes {
			if code, _ := n.get("shop.test", path); code != 200 {
				t.Fatalf("GET %s: %d", path, code)
			}
		}
		if got := o.got("GET " + path); len(got) != 1 {
			t.Errorf("GET %s asked of three nodes reached the origin %d times: GETs skip the cluster", path, len(got))
		}
	}
}

// s31Ask sends raw and returns the final response (1xx skipped).
func s31Ask(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode >= 200 {
			_, _ = io.ReadAll(resp.Body)
			return resp
		}
	}
}
