// Regression tests from a hostile review of batchConn's flush on Read:
// each failed before its fix; the comments describe the bug as found.
package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReviewHitPairNeverSplit is TestBatchConnOneWritePerSmallResponse at
// 5000 responses: net/http's background read is a goroutine started just
// before the handler; when it is scheduled after the handler's held 4 KiB
// write and before the rest, the new Read flush sends the held bytes alone
// (2 system calls, the pair split). The parent commit never does.
func TestReviewHitPairNeverSplit(t *testing.T) {
	body := strings.Repeat("x", 4096)
	addr, stats := serveBatched(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4096")
		_, _ = io.WriteString(w, body)
	}), time.Second)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	const n = 5000
	for range n {
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if got := stats.sends.Load(); got != n {
		t.Errorf("%d write system calls for %d 4 KiB hits (%d pairs split), want %d", got, n, got-n, n)
	}
}
