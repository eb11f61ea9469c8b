package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A review found (now mended): `edge reload -c FILE` / `edge health -c FILE` no longer refuse a
// misshapen file: 180e7c3 made config.NewViper keep the file's key errors
// under a hidden key for Load instead of failing, and adminAddr
// (cmd/edge/admincmd.go) calls NewViper only, never Load, so the errors are
// lost. `admin:\n  listen:` (no value) now reaches the default
// 127.0.0.1:9180, the very "connection refused on 127.0.0.1:9180, the
// file's error unsaid" that adminAddr's comment says it ended; `admin:
// 127.0.0.1:19999` (a section given a value) gives the address "<nil>";
// `admin: {listen: A, LISTEN: B}` silently picks B. Before 180e7c3 each was
// refused with the key named. Fix: export the kept errors (e.g.
// config.FileErrors(v) error) and have adminAddr return them, or give
// NewViper a strict variant for callers that do not Load.
func TestS25AdminAddrRefusesAMisshapenFile(t *testing.T) {
	for name, body := range map[string]string{
		"listen with no value":  "admin:\n  listen:\n",
		"section given a value": "admin: 127.0.0.1:19999\n",
		"written twice":         "admin:\n  listen: 127.0.0.1:11111\n  LISTEN: 127.0.0.1:22222\n",
	} {
		p := filepath.Join(t.TempDir(), "edge.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		tg, err := adminAddr("", p)
		if err == nil || !strings.Contains(err.Error(), "admin") {
			t.Errorf("%s: adminAddr = %+v, err %v; want the file's key error", name, tg, err)
		}
	}
}
