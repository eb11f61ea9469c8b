package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSlowReadersDoNotStarveMisses runs a real edge process with four
// upstream slots against clients that ask for objects too large to store
// and never read. Before the spool they held every slot until
// limits.write_timeout, so every miss meanwhile got 503 (the control,
// spool_bytes 0, still does); with it each body spills at the origin's
// pace, the slots come back, misses are answered, and a stalled client
// that finally reads gets the whole object.
func TestSlowReadersDoNotStarveMisses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct {
		name  string
		spool string
	}{{"spool", "256MiB"}, {"no spool", "0"}} {
		t.Run(tc.name, func(t *testing.T) {
			originAddr, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
			startOrigin(t, originAddr, "1ms")
			spoolDir := t.TempDir()
			cfgFile := filepath.Join(t.TempDir(), "edge.yaml")
			cfg := fmt.Sprintf(`origin: {url: "http://%s"}
listen: "%s"
admin: {listen: "%s"}
node_id: spool
cache: {max_bytes: 16MiB, max_object_bytes: 1MiB, slice_bytes: 0}
limits: {max_inflight: 4, write_timeout: 60s, spool_bytes: %s, spool_dir: "%s"}
`, originAddr, pub, adm, tc.spool, spoolDir)
			if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			startBinary(t, plainEdge(t), "serve", "-c", cfgFile)
			waitUp(t, "http://"+adm+"/readyz")
			base := "http://" + pub

			// Four clients ask for 24 MiB objects (too large to store)
			// and read nothing.
			var readers []net.Conn
			for i := range 4 {
				// A 64 KiB receive buffer, set before the handshake: small
				// enough that the kernel does not take the body in for the
				// client (the receive buffer may grow to 32 MiB), large
				// enough that the client that finally reads reads at full
				// speed (a 4 KiB window reads 24 MiB in minutes).
				d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
					return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
				}}
				c, err := d.Dial("tcp", pub)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				fmt.Fprintf(c, "GET /large/24?ranges=no&reader=%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
				readers = append(readers, c)
			}
			// The four are being served (each holds a slot) before the
			// first miss, which could otherwise take the slot of one.
			waitInflight(t, adm, len(readers))
			miss := func(i int) int {
				resp, err := http.Get(fmt.Sprintf("%s/p/%d", base, 1000+i))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if tc.spool == "0" {
				deadline := time.Now().Add(30 * time.Second)
				for i := 0; ; i++ {
					if miss(i) == http.StatusServiceUnavailable {
						return // the control: the stalled readers hold every slot
					}
					if time.Now().After(deadline) {
						t.Fatal("without the spool, the stalled readers never held every slot (the control shows nothing)")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			opened := regexp.MustCompile(`(?m)^edge_spool_files_opened_total (\d+)`)
			deadline := time.Now().Add(60 * time.Second)
			for {
				_, m := get(t, "http://"+adm+"/metrics")
				if g := opened.FindStringSubmatch(m); g != nil {
					if n, _ := strconv.Atoi(g[1]); n >= len(readers) {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("the stalled readers' bodies did not spill:\n%s", grepLines(m, "edge_spool"))
				}
				time.Sleep(20 * time.Millisecond)
			}
			// Every slot comes back as its body is in: poll, since the
			// last chunks may still be on their way from the origin.
			deadline = time.Now().Add(30 * time.Second)
			for i := 0; miss(i) != 200; i++ {
				if time.Now().After(deadline) {
					t.Fatal("misses are still refused with every stalled body spilled")
				}
				time.Sleep(20 * time.Millisecond)
			}
			for i := range 8 {
				if code := miss(100 + i); code != 200 {
					t.Errorf("miss %d while four clients stall: %d, want 200", i, code)
				}
			}
			// The first stalled client reads now, and gets all 24 MiB as
			// the origin sends them.
			_, want := get(t, "http://"+originAddr+"/large/24?ranges=no")
			_ = readers[0].SetReadDeadline(time.Now().Add(60 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(readers[0]), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(body, []byte(want)) {
				t.Errorf("the stalled client: status %d, %d bytes (want %d), %v", resp.StatusCode, len(body), len(want), err)
			}
		})
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out bytes.Buffer
	for _, line := range bytes.Split([]byte(s), []byte("\n")) {
		if bytes.Contains(line, []byte(sub)) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// TestSlowUploadsDoNotStarveMisses runs a real edge process with four
// upstream slots against four clients that start uploads and stall. A
// body, of known length or chunked, is read before its request takes a
// slot, so every miss meanwhile is answered and each upload, once whole,
// reaches the origin; with limits.request_buffering off bodies stream as
// they come, holding their slots, which the control shows. (Until
// 2026-12-05 chunked bodies streamed whatever the setting: declaring no
// length took every slot.)
func TestSlowUploadsDoNotStarveMisses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct {
		name      string
		chunked   bool
		streaming bool // limits.request_buffering false: the control
	}{{"known length", false, false}, {"chunked", true, false}, {"chunked, request buffering off (control)", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			originAddr, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
			startOrigin(t, originAddr, "1ms")
			cfgFile := filepath.Join(t.TempDir(), "edge.yaml")
			cfg := fmt.Sprintf(`origin: {url: "http://%s"}
listen: "%s"
admin: {listen: "%s"}
node_id: uploads
limits: {max_inflight: 4, body_timeout: 60s, spool_dir: "%s", request_buffering: %t}
`, originAddr, pub, adm, t.TempDir(), !tc.streaming)
			if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			startBinary(t, plainEdge(t), "serve", "-c", cfgFile)
			waitUp(t, "http://"+adm+"/readyz")
			const size = 200 << 10 // on disk: larger than what is held in memory
			var uploaders []net.Conn
			for i := range 4 {
				c, err := net.Dial("tcp", pub)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if tc.chunked {
					fmt.Fprintf(c, "POST /up/%d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n", i)
				} else {
					fmt.Fprintf(c, "POST /up/%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n0123456789", i, size)
				}
				uploaders = append(uploaders, c)
			}
			waitInflight(t, adm, len(uploaders))
			refused := 0
			for i := range 8 {
				resp, err := http.Get(fmt.Sprintf("http://%s/p/%d", pub, 2000+i))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					refused++
				}
			}
			if tc.streaming {
				if refused == 0 {
					t.Error("streamed uploads that stall did not hold the slots (the control shows nothing)")
				}
			} else if refused > 0 {
				t.Errorf("%d of 8 misses refused while four uploads stall (%s), want 0", refused, tc.name)
			}
			// One upload goes on and ends: the origin answers it (the demo
			// origin takes no POST: 405, from the origin, not the edge).
			c := uploaders[0]
			if tc.chunked {
				_, _ = io.WriteString(c, "0\r\n\r\n")
			} else {
				_, _ = c.Write(bytes.Repeat([]byte("x"), size-10))
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusBadRequest {
				t.Errorf("the upload that ended: %d (%s)", resp.StatusCode, resp.Header.Get("Cache-Status"))
			}
			_, m := get(t, "http://"+adm+"/metrics")
			t.Logf("upload answered %d (%s); %d of 8 misses refused; %s", resp.StatusCode, resp.Header.Get("Cache-Status"), refused, grepLines(m, "edge_request_bodies_total"))
		})
	}
}

// waitInflight waits until the node with admin listener adm serves n
// requests at once (edge_inflight_requests).
func waitInflight(t *testing.T, adm string, n int) {
	t.Helper()
	inflight := regexp.MustCompile(`(?m)^edge_inflight_requests (\d+)`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, m := get(t, "http://"+adm+"/metrics")
		if g := inflight.FindStringSubmatch(m); g != nil && g[1] == strconv.Itoa(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled requests are not all in flight:\n%s", grepLines(m, "edge_inflight_requests"))
		}
	}
}
