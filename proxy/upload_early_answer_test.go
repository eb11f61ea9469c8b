package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// An origin that answers an upload before reading it (a 403 from an API
// that checks the path first) must not leave the rest of the upload on
// the client's connection to be parsed as its next request. Before the
// handler kept a request of its own, net/http could not see that the body
// it handed over had been closed early (the handler had replaced it), so
// it kept the connection open after the 403 and parsed the rest of the
// body: a 400 to the client's next request on that connection, or, with
// a body made of requests, requests smuggled past whatever sits in front
// of the edge (found by TestReviewConcurrentMixedUploadsStayApart failing
// about once in 30 runs).
func TestAnUploadAnsweredEarlyClosesTheConnectionInsteadOfParsingItsRest(t *testing.T) {
	var smuggled atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/smuggled") {
			smuggled.Add(1)
		}
		if r.URL.Path == "/after" {
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, "after")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden) // without reading the upload
	}))
	defer origin.Close()
	// No spool: the upload streams to the origin as it comes, so the
	// origin answers while most of it is still on the client's connection.
	h := proxyFor(t, origin.URL, func(c *Config) { c.SpoolBytes = 0; c.SpoolDir = "" })
	front := httptest.NewServer(h)
	defer front.Close()

	// A body of complete requests, so that whatever part of it the edge
	// might parse starts a request within a few lines.
	smuggle := "GET /smuggled HTTP/1.1\r\nHost: smuggle.test\r\n\r\n"
	body := strings.Repeat(smuggle, (300<<10)/len(smuggle))
	kept := 0
	for round := range 10 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		head := fmt.Sprintf("POST /upload/%d HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n", round, len(body))
		go func() {
			// The whole upload at once, as a client that does not wait
			// for the answer sends it; a write cut by the edge's close
			// is expected.
			_, _ = io.WriteString(conn, head+body)
		}()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("round %d: %d, want the origin's 403", round, resp.StatusCode)
		}
		if !resp.Close {
			// Kept open: net/http read the rest of the upload to its
			// end (it was small enough and had all arrived), so the
			// connection must carry the next request as sent.
			if _, err := io.WriteString(conn, "GET /after HTTP/1.1\r\nHost: example.test\r\n\r\n"); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			next, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("round %d: the request after the upload: %v", round, err)
			}
			got, _ := io.ReadAll(next.Body)
			next.Body.Close()
			if next.StatusCode != http.StatusOK || string(got) != "after" {
				t.Errorf("round %d: the request after the upload got %d %q: the edge parsed the rest of the upload as requests", round, next.StatusCode, got)
			}
			kept++
		} else if rest, _ := io.ReadAll(br); len(rest) > 0 {
			// Closed: nothing more may come.
			t.Errorf("round %d: after the 403 the edge answered the rest of the upload as a request: %q", round, firstLine(rest))
		}
		conn.Close()
	}
	t.Logf("%d of 10 connections carried a request after the upload; the rest were closed", kept)
	if n := smuggled.Load(); n > 0 {
		t.Errorf("%d requests smuggled in upload bodies reached the origin", n)
	}

}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}
