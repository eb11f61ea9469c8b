package node

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
)

// A review's: deploy/k8s/statefulset.yaml ran the node with
// readOnlyRootFilesystem and no volume at /tmp, and set no limits.spool_*;
// with the spool on by default (256 MiB in the system's temporary
// directory) New refused to start, and a cluster upgraded with its
// shipped manifest crash-looped. The manifest now gives the spool a
// volume; a node whose default place is not writable starts with
// spilling off. A temporary directory the node cannot create files in
// stands in for the read-only /tmp here (/proc: as on a read-only root,
// CreateTemp fails).
func TestReviewShippedManifestStartsWithTheSpoolDefault(t *testing.T) {
	m, err := os.ReadFile("../deploy/k8s/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(m), "readOnlyRootFilesystem: true") && !strings.Contains(string(m), "EDGE_LIMITS_SPOOL_DIR") {
		t.Error("the manifest's read-only root has no spool directory")
	}
	ro := "/proc"
	if v := os.Getenv("REVIEW_RO_TMP"); v != "" {
		ro = v // e.g. a tmpfs mounted read-only
	}
	t.Setenv("TMPDIR", ro) // the read-only root's /tmp
	if f, err := os.CreateTemp("", "x"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("cannot make an unwritable temporary directory here")
	}
	pub, adm := twoFreePorts(t)
	cfg, err := config.LoadBytes([]byte("origin: {url: 'http://127.0.0.1:1'}\nlisten: '" + pub + "'\nadmin: {listen: '" + adm + "'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Errorf("a node configured as deploy/k8s/statefulset.yaml configures it, on its read-only root, does not start: %v", err)
	}
	if n != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = n.Run(ctx)
	}
}
