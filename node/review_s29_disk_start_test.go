package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
)

func s29Origin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o
}

func s29YAML(t *testing.T, origin, disk string) (yaml, pub string) {
	pub = freeAddr(t)
	return "origin: {url: '" + origin + "'}\nlisten: '" + pub + "'\nadmin: {listen: '" + freeAddr(t) + "'}\n" +
		"cache: {disk: {path: '" + disk + "', max_bytes: 8MiB}}\n", pub
}

// Two nodes given one disk directory: the second stops at its start,
// naming cache.disk.path, and the first keeps serving what it stored.
func TestS29DiskSecondNodeOnTheSameDirectoryStopsAtStart(t *testing.T) {
	o := s29Origin(t)
	dir := filepath.Join(t.TempDir(), "disk")
	yaml, pub := s29YAML(t, o.URL, dir)
	startNodeYAML(t, yaml)
	if r := reviewGet(t, pub, "/a"); r.StatusCode != 200 {
		t.Fatalf("first node: %d", r.StatusCode)
	}
	yaml2, _ := s29YAML(t, o.URL, dir+"/.")
	cfg, err := config.LoadBytes([]byte(yaml2))
	if err != nil {
		t.Fatal(err)
	}
	n2, err := New(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = n2
		t.Fatal("a second node opened a disk directory in use")
	}
	if !strings.Contains(err.Error(), "cache.disk.path") {
		t.Fatalf("the refusal does not name cache.disk.path: %v", err)
	}
	r := reviewGet(t, pub, "/a")
	if b, _ := io.ReadAll(r.Body); r.StatusCode != 200 || string(b) != "page /a" {
		t.Fatalf("first node after the refusal: %d %q", r.StatusCode, b)
	}
}

// A review found (now mended: the tier removes a file in place of its own directories): a node restarted on a damaged disk tier did not start at all.
// docs/storage.md: "A failing disk (read-only, full, I/O errors) goes
// down ...: lookups and writes skip it ... The node serves from RAM and
// the origin. No client request fails because of the disk." That holds
// only while the node runs: disk.Open makes (MkdirAll) the 256 shard
// directories, tmp and the lock file, and scans, and any failure there
// (a file where a shard directory should be, as fsck or a stray copy
// leaves; the same path is taken on a file system remounted read-only
// that lacks one of them) fails node.New with a cache.disk.path error, so
// the restarted node serves nobody, not even from the origin. Steps:
// create <disk>/v1 with a regular file named "7f" (one of the 256 shard
// directories); start a node with cache.disk.path=<disk>. Expected: the
// node starts with the tier down (edge_disk_up 0, logged) or with that
// shard unused, and answers from the origin.
func TestS29DiskADamagedTierDirectoryKeepsTheNodeFromStarting(t *testing.T) {
	o := s29Origin(t)
	for _, c := range []struct{ name, file string }{{"shard-is-a-file", "7f"}, {"tmp-is-a-file", "tmp"}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "disk")
			if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "v1", c.file), []byte("not a directory"), 0o600); err != nil {
				t.Fatal(err)
			}
			yaml, pub := s29YAML(t, o.URL, dir)
			cfg, err := config.LoadBytes([]byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			n, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("the node does not start, so nothing is served (not even from the origin): %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- n.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			if r := reviewGet(t, pub, "/x"); r.StatusCode != 200 {
				t.Fatalf("served %d", r.StatusCode)
			}
		})
	}
}
