package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/prereq"
	"github.com/edgecache/edge/lab/netns"
)

// Start's cleanup on error reads the named result l after `return nil,
// err` has set it to nil: l.Close() on a nil *Lab panics (l.mu), instead
// of returning the error and removing the namespaces and processes.
func TestStartErrorPanicsInsteadOfCleaningUp(t *testing.T) {
	if err := netns.Check(); err != nil {
		prereq.Missing(t, "network namespaces and nftables (root)", err)
	}
	const prefix = "rv19t"
	t.Cleanup(func() { netns.Sweep(prefix) })
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Start panicked instead of returning its error: %v", r)
		}
	}()
	// /bin/false as the edge binary: the origin never answers, Start fails.
	_, err := Start(ctx, Options{Bin: "/bin/false", Nodes: 2, Prefix: prefix})
	t.Logf("Start: %v", err)
}
