// Package disk holds the end-to-end tests of the disk tier: warm restart,
// crash during writes, corrupt files, a full disk, sliced large objects.
// They run real edge processes (internal/e2e) in their own test binary,
// beside cmd/edge's, so that neither nears go test's time limit.
package disk

import (
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
	"github.com/edgecache/edge/internal/prereq"
)

func TestMain(m *testing.M) { e2e.Main(m) }

var (
	freeAddr = e2e.FreeAddr
	get      = e2e.Get
	metric   = e2e.Metric
	waitFor  = e2e.WaitFor
)

func startOrigin(t *testing.T, addr, latency string) { e2e.StartOrigin(t, e2e.Edge(t), addr, latency) }

// diskEdge starts a node with a disk tier in dir and a small RAM tier (so
// that most pages live on disk only), and waits until it serves.
func diskEdge(t *testing.T, origin, dir string, extra ...string) (pub, adm string, cmd *exec.Cmd) {
	t.Helper()
	pub, adm = freeAddr(t), freeAddr(t)
	args := append([]string{"serve", "--origin", "http://" + origin, "--listen", pub, "--admin-listen", adm,
		"--cache-size", "1MiB", "--disk-path", dir, "--disk-size", "64MiB"}, extra...)
	cmd = e2e.Start(t, e2e.Edge(t), args...)
	e2e.WaitUp(t, "http://"+adm+"/healthz")
	return pub, adm, cmd
}

// body fetches url and returns its body, failing on anything but 200.
func body(t *testing.T, url string) string {
	t.Helper()
	resp, b := get(t, url)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	return b
}

// digest reads url (with Range rg, if any: it must answer 206, else 200)
// and returns its body's SHA-256, length and first byte.
func digest(t *testing.T, url, rg string) (sum [sha256.Size]byte, n int64, first byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept-Encoding", "identity")
	want := http.StatusOK
	if rg != "" {
		req.Header.Set("Range", rg)
		want = http.StatusPartialContent
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("GET %s (Range %q): %d, want %d", url, rg, resp.StatusCode, want)
	}
	h := sha256.New()
	buf := make([]byte, 256<<10)
	for {
		k, err := resp.Body.Read(buf)
		if k > 0 {
			if n == 0 {
				first = buf[0]
			}
			h.Write(buf[:k])
			n += int64(k)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("GET %s: %v after %d bytes", url, err, n)
		}
	}
	h.Sum(sum[:0])
	return sum, n, first
}

// stop sends sig and waits for the process to end.
func stop(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("edge did not exit within 60 s of %v", sig)
	}
}

// TestDiskWarmRestart: after SIGTERM, a restarted node serves every page it
// had stored without asking the origin.
func TestDiskWarmRestart(t *testing.T) {
	origin, dir := freeAddr(t), t.TempDir()
	startOrigin(t, origin, "0s")
	pub, _, cmd := diskEdge(t, origin, dir)
	const pages = 60
	want := map[int]string{}
	for n := range pages {
		want[n] = body(t, fmt.Sprintf("http://%s/p/%d", pub, n))
	}
	stop(t, cmd, syscall.SIGTERM)

	pub, adm, _ := diskEdge(t, origin, dir)
	if got := metric(t, adm, "edge_disk_objects"); got < pages {
		t.Fatalf("disk objects after restart = %v, want %d", got, pages)
	}
	for n := range pages {
		if got := body(t, fmt.Sprintf("http://%s/p/%d", pub, n)); got != want[n] {
			t.Fatalf("/p/%d after restart: %d bytes, want %d", n, len(got), len(want[n]))
		}
	}
	// Disk-resident entries are compressed for clients that ask (the other
	// fetches here ask for identity, as every e2e client does by default).
	for n := range 5 {
		resp, gz := get(t, fmt.Sprintf("http://%s/p/%d", pub, n), "Accept-Encoding", "gzip")
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("/p/%d with Accept-Encoding gzip after restart: Content-Encoding %q", n, resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(strings.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		if plain, err := io.ReadAll(zr); err != nil || string(plain) != want[n] {
			t.Fatalf("/p/%d gzip from the disk tier: %d bytes decoded (%v), want %d", n, len(plain), err, len(want[n]))
		}
	}
	if f := metric(t, adm, "edge_origin_fetches_total"); f != 0 {
		t.Fatalf("restarted node asked the origin %v times for pages it had stored", f)
	}
	t.Logf("warm restart: %d pages, 0 origin requests; disk hits %v, recovery %v s",
		pages, metric(t, adm, "edge_disk_hits_total"), metric(t, adm, "edge_disk_recovery_seconds"))
}

// TestDiskCrashDuringWrites kills the node with SIGKILL while it stores
// many pages; the restarted node serves exactly the origin's bodies.
func TestDiskCrashDuringWrites(t *testing.T) {
	origin, dir := freeAddr(t), t.TempDir()
	startOrigin(t, origin, "0s")
	pub, adm, cmd := diskEdge(t, origin, dir)
	var next atomic.Int64
	var wg sync.WaitGroup
	stopLoad := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				default:
				}
				n := next.Add(1)
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/p/%d", pub, 1000+n), nil)
				req.Header.Set("Accept-Encoding", "identity") // as e2e.Get: the disk tier is under test, not gzip
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the node is gone
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "some pages written to disk", 60*time.Second, func() bool { return metric(t, adm, "edge_disk_writes_total") >= 200 })
	stop(t, cmd, syscall.SIGKILL)
	close(stopLoad)
	wg.Wait()

	pub, adm, _ = diskEdge(t, origin, dir)
	written := next.Load()
	served := 0
	for n := int64(1); n <= written; n++ {
		url := fmt.Sprintf("/p/%d", 1000+n)
		got := body(t, "http://"+pub+url)
		if want := body(t, "http://"+origin+url); got != want {
			t.Fatalf("%s after a crash: %d bytes differ from the origin's %d", url, len(got), len(want))
		}
		served++
	}
	rec := metric(t, adm, "edge_disk_recovery_seconds")
	t.Logf("crash: %d pages requested before SIGKILL, all %d served equal to the origin's; %v came from disk; recovery %v s, %v files discarded",
		written, served, metric(t, adm, "edge_disk_hits_total"), rec, metric(t, adm, "edge_disk_recovery_discarded"))
	if metric(t, adm, "edge_disk_hits_total") == 0 {
		t.Fatal("nothing survived the crash")
	}
}

// TestDiskCorruptFileRefetched flips a byte in the body of every stored
// file: each is detected on read, discarded and fetched again.
func TestDiskCorruptFileRefetched(t *testing.T) {
	origin, dir := freeAddr(t), t.TempDir()
	startOrigin(t, origin, "0s")
	pub, _, cmd := diskEdge(t, origin, dir)
	const pages = 10
	for n := range pages {
		body(t, fmt.Sprintf("http://%s/p/%d", pub, 2000+n))
	}
	stop(t, cmd, syscall.SIGTERM)
	files, _ := filepath.Glob(filepath.Join(dir, "v1", "??", "*"))
	if len(files) != pages {
		t.Fatalf("%d files on disk, want %d", len(files), pages)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-10] ^= 0x20 // in the body: only the read-time checksum sees it
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pub, adm, _ := diskEdge(t, origin, dir)
	for n := range pages {
		url := fmt.Sprintf("/p/%d", 2000+n)
		if got, want := body(t, "http://"+pub+url), body(t, "http://"+origin+url); got != want {
			t.Fatalf("%s: corrupt body served", url)
		}
	}
	if c := metric(t, adm, `edge_disk_errors_total{kind="corrupt"}`); c != pages {
		t.Fatalf("corrupt records detected = %v, want %d", c, pages)
	}
	if f := metric(t, adm, "edge_origin_fetches_total"); f != pages {
		t.Fatalf("origin fetches = %v, want %d (each corrupt page refetched once)", f, pages)
	}
}

// TestDiskFull puts the tier on a 256 KiB tmpfs with a far larger budget:
// writes fail with ENOSPC, the tier goes down, and every client request is
// still answered from the origin or RAM.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).Run(); err != nil {
		prereq.Missing(t, "a small tmpfs mount (root)", err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	origin := freeAddr(t)
	startOrigin(t, origin, "0s")
	pub, adm, _ := diskEdge(t, origin, dir)
	for n := range 200 {
		url := fmt.Sprintf("/p/%d", 3000+n)
		if got, want := body(t, "http://"+pub+url), body(t, "http://"+origin+url); got != want {
			t.Fatalf("%s: wrong body with the disk full", url)
		}
	}
	waitFor(t, "the tier to go down", 60*time.Second, func() bool { return metric(t, adm, "edge_disk_up") == 0 })
	if e := metric(t, adm, `edge_disk_errors_total{kind="write"}`); e < 3 {
		t.Fatalf("write errors = %v, want at least 3", e)
	}
	// Down, the node still serves: from RAM what fits, else the origin.
	for n := range 20 {
		body(t, fmt.Sprintf("http://%s/p/%d", pub, 3000+n))
	}
}

// originBytes returns the demo origin's body bytes sent and Range requests
// answered so far.
func originBytes(t *testing.T, origin string) (sent, ranges int64) {
	t.Helper()
	st := e2e.OriginStats(t, origin)
	return st.Bytes, st.Ranges
}

// TestSlicesLargeObject: a 16 MiB object (64 under the race detector took
// 16 s of make test for the same slices). A one-byte Range request costs
// the origin one slice; a full read afterwards fetches the other slices
// once; after a restart the disk tier serves it all.
func TestSlicesLargeObject(t *testing.T) {
	origin, dir := freeAddr(t), t.TempDir()
	startOrigin(t, origin, "0s")
	pub, adm, cmd := diskEdge(t, origin, dir, "--disk-size", "256MiB")
	req, _ := http.NewRequest(http.MethodGet, "http://"+pub+"/large/16", nil)
	req.Header.Set("Range", "bytes=0-0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || len(one) != 1 {
		t.Fatalf("Range bytes=0-0: %d with %d bytes", resp.StatusCode, len(one))
	}
	sent, ranges := originBytes(t, origin)
	if sent != 1<<20 || ranges != 1 {
		t.Fatalf("a one-byte range cost the origin %d bytes in %d Range requests, want one 1 MiB slice", sent, ranges)
	}
	// Compared by digest: 16 MiB strings in a race-built test binary
	// took seconds each to read.
	whole, wholeLen, first := digest(t, "http://"+pub+"/large/16", "")
	want, wantLen, _ := digest(t, "http://"+origin+"/large/16", "")
	if whole != want || first != one[0] {
		t.Fatalf("full read of the sliced object: %d bytes (the origin's %d), equal %v", wholeLen, wantLen, whole == want)
	}
	sent, ranges = originBytes(t, origin)
	sent -= wantLen // the direct read above
	if sent != 16<<20 || ranges != 16 {
		t.Fatalf("after the full read the origin sent %d bytes in %d Range requests, want each of the 16 slices once", sent, ranges)
	}
	// A range across slices, from the store.
	part, partLen, _ := digest(t, "http://"+pub+"/large/16", "bytes=1048000-3145800")
	wantPart, _, _ := digest(t, "http://"+origin+"/large/16", "bytes=1048000-3145800") // the origin's own range
	if part != wantPart || partLen != 3145801-1048000 {
		t.Fatalf("range across slices: %d bytes, equal to the origin's range %v", partLen, part == wantPart)
	}
	if _, r2 := originBytes(t, origin); r2 != ranges+1 { // the one the test sent itself
		t.Fatal("stored slices fetched again")
	}
	waitFor(t, "slices on disk", 60*time.Second, func() bool { return metric(t, adm, "edge_disk_objects") >= 17 })
	stop(t, cmd, syscall.SIGTERM)
	pub, adm, _ = diskEdge(t, origin, dir, "--disk-size", "256MiB")
	if got, _, _ := digest(t, "http://"+pub+"/large/16", ""); got != want {
		t.Fatal("sliced object wrong after a restart")
	}
	if f := metric(t, adm, "edge_origin_fetches_total"); f != 0 {
		t.Fatalf("restarted node asked the origin %v times for a sliced object on its disk", f)
	}
}
