package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesATraceWithNoRequests: an empty trace (or one of comments
// only) is a clear error naming the file; it was a division by zero
// (a review, 2026-12-07).
func TestLoadRefusesATraceWithNoRequests(t *testing.T) {
	for name, body := range map[string]string{"empty": "", "comments": "# nothing here\n# still nothing\n"} {
		file := filepath.Join(t.TempDir(), name+".trace")
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := runCmd(loadCmd(), "--target", "http://127.0.0.1:1", "--rate", "10", "--duration", "1s", "--trace", file, "--format", "lines")
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "no requests") {
			t.Errorf("%s trace: %v, want an error naming the file", name, err)
		}
	}
}
