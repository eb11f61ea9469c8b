package h2server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/internal/prereq"
)

// TestH2Spec runs h2spec, the HTTP/2 conformance suite (RFC 7540/9113 and
// HPACK, 145 cases), against the server: once with a path the hit path
// answers on the read loop and once with a path a handler answers. `make
// test` installs it (EDGE_H2SPEC); net/http's own server fails 4 of them.
func TestH2Spec(t *testing.T) {
	bin := os.Getenv("EDGE_H2SPEC")
	if bin == "" {
		bin = "h2spec"
	}
	if _, err := exec.LookPath(bin); err != nil {
		prereq.Missing(t, "h2spec (make test installs it into .tools)", err)
	}
	body := []byte(strings.Repeat("h", 4096))
	s := &Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Read the body first, as the proxy does when it forwards one:
			// a handler that answers before the body ends gets its stream
			// reset (NO_ERROR) and the client's later frames on it ignored
			// (RFC 9113 §8.1, §5.1), where h2spec's body cases expect them
			// judged.
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		}),
		Hits:         answerer{body: body, n: new(atomic.Int64)},
		Fields:       hitpath.NewFields(hitpath.Config{}),
		WriteTimeout: 10 * time.Second,
	}
	addr := serve(t, s)
	host, port, _ := strings.Cut(addr, ":")
	summary := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`)
	for _, path := range []string{"/hit", "/handler"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "--path", path, "-o", "5").CombinedOutput()
		cancel()
		m := summary.FindStringSubmatch(string(out))
		var ee *exec.ExitError
		if m == nil || (err != nil && !errors.As(err, &ee)) {
			t.Fatalf("h2spec %s: %v\n%s", path, err, out)
		}
		if m[4] != "0" || m[1] == "0" {
			t.Errorf("h2spec %s: %s\n%s", path, m[0], out[max(0, len(out)-4000):])
		}
		t.Logf("h2spec %s: %s", path, m[0])
	}
	if s.Hits.(answerer).n.Load() == 0 {
		t.Fatal("the hit path answered nothing: /hit went to the handler")
	}
}
