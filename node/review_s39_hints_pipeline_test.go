package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestS39HintsOnAPipelinedConnection: HTTP/1.1 requests pipelined on one
// connection of the node (the hit path on, its default): a hit the hit
// loop answers, a miss whose origin sends a 103, another hit, a HEAD miss
// with a 103, and a closing request. Each 103 comes right before its own
// request's final answer, never inside or after another answer, and the
// hits get none.
func TestS39HintsOnAPipelinedConnection(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hit" && r.URL.Path != "/end" {
			w.Header().Set("Link", "<"+r.URL.Path+".css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			time.Sleep(100 * time.Millisecond)
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "")
	if resp := reviewGet(t, n.PublicAddr(), "/hit"); resp.StatusCode != 200 {
		t.Fatalf("warming /hit: %d", resp.StatusCode)
	}
	c, err := net.Dial("tcp", n.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * time.Second))
	reqs := []struct{ method, path string }{{"GET", "/hit"}, {"GET", "/a"}, {"GET", "/hit"}, {"HEAD", "/b"}, {"GET", "/end"}}
	var stream strings.Builder
	for i, q := range reqs {
		stream.WriteString(q.method + " " + q.path + " HTTP/1.1\r\nHost: x\r\n")
		if i == len(reqs)-1 {
			stream.WriteString("Connection: close\r\n")
		}
		stream.WriteString("\r\n")
	}
	if _, err := io.WriteString(c, stream.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var got []string
	for i := 0; i < len(reqs); {
		resp, err := http.ReadResponse(br, &http.Request{Method: reqs[i].method})
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusEarlyHints {
			got = append(got, "103 "+resp.Header.Get("Link"))
			continue
		}
		got = append(got, fmt.Sprintf("%d %s %q", resp.StatusCode, reqs[i].path, b))
		i++
	}
	want := []string{`200 /hit "page /hit"`, "103 </a.css>; rel=preload", `200 /a "page /a"`, `200 /hit "page /hit"`,
		"103 </b.css>; rel=preload", `200 /b ""`, `200 /end "page /end"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("pipelined answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
