package node

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
)

// A spool directory the node cannot write stops startup with an error that
// names limits.spool_dir, rather than failing the first slow reader; with
// spilling off the directory is not looked at.
func TestTheSpoolDirectoryIsCheckedAtStartup(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spool   string
		wantErr bool
	}{
		{"{spool_dir: '" + filepath.Join(dir, "missing") + "'}", true},
		{"{spool_dir: '" + file + "'}", true},
		{"{spool_dir: '" + filepath.Join(dir, "missing") + "', spool_bytes: 0}", false},
	} {
		pub, adm := twoFreePorts(t)
		cfg, err := config.LoadBytes([]byte("origin: {url: 'http://127.0.0.1:1'}\nlisten: '" + pub + "'\nadmin: {listen: '" + adm + "'}\nlimits: " + tc.spool + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := New(cfg, slog.New(slog.DiscardHandler))
		if tc.wantErr && (err == nil || !strings.Contains(err.Error(), "limits.spool_dir")) {
			t.Errorf("%s: New: %v, want an error naming limits.spool_dir", tc.spool, err)
		}
		if !tc.wantErr && err != nil {
			t.Errorf("%s: New: %v", tc.spool, err)
		}
		if n != nil {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = n.Run(ctx) // closes its listeners
		}
	}
}
