package node

import (
	"encoding/base64"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
)

func TestRedactArgs(t *testing.T) {
	in := []string{"edge", "serve", "--secret", "s3cr3t-value-long", "--admin-token=tok", "--listen", "127.0.0.1:1", "-secret=x"}
	got := RedactArgs(in)
	want := []string{"edge", "serve", "--secret", "REDACTED", "--admin-token=REDACTED", "--listen", "127.0.0.1:1", "-secret=REDACTED"}
	if !slices.Equal(got, want) {
		t.Fatalf("RedactArgs = %q", got)
	}
	if in[3] != "s3cr3t-value-long" {
		t.Fatal("RedactArgs changed its input")
	}
}

func TestAdminAuthorization(t *testing.T) {
	n := &Node{cfg: &config.Config{}}
	n.cfg.Admin.Token = "the-token"
	cases := map[string]bool{
		"Bearer the-token": true, "bearer the-token": true, "BEARER the-token": true,
		"Bearer wrong": false, "the-token": false, "": false, "Basic " + basic("x:the-token"): true, "Basic " + basic("x:no"): false,
	}
	for auth, want := range cases {
		r := httptest.NewRequest("GET", "/purge", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if got := n.authorized(r, true); got != want {
			t.Errorf("%q: authorized = %v, want %v", auth, got, want)
		}
		// Purge and pprof: Bearer only (no CSRF through remembered Basic credentials).
		if got := n.authorized(r, false); got != (want && !strings.HasPrefix(auth, "Basic")) {
			t.Errorf("%q on a state-changing endpoint: authorized = %v", auth, got)
		}
	}
	n.cfg.Admin.Token = ""
	r := httptest.NewRequest("GET", "/purge", nil)
	r.Header.Set("Authorization", "Bearer ")
	if n.authorized(r, true) {
		t.Error("an empty token authorized a request")
	}
}

func basic(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestNewReleasesListenersOnError: when a later listener cannot bind, the
// ones already bound are closed (their ports are free again).
func TestNewReleasesListenersOnError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pub := free.Addr().String()
	free.Close()
	cfg, err := config.LoadBytes([]byte("origin: {url: 'http://127.0.0.1:1'}\nlisten: '" + pub + "'\nadmin: {listen: '" + busy.Addr().String() + "'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Fatalf("New with a busy admin port: %v", err)
	}
	ln, err := net.Listen("tcp", pub)
	if err != nil {
		t.Fatalf("the public listener was not released: %v", err)
	}
	ln.Close()
}

// TestAdminTLSFilesAreCheckedAtStartup: admin.tls files that do not load
// stop startup, naming the key.
func TestAdminTLSFilesAreCheckedAtStartup(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, files := range [][2]string{
		{filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key")},
		{garbage, garbage},
	} {
		pub, adm := twoFreePorts(t)
		cfg, err := config.LoadBytes([]byte("origin: {url: 'http://127.0.0.1:1'}\nlisten: '" + pub + "'\nadmin: {listen: '" + adm + "', tls: {cert_file: '" + files[0] + "', key_file: '" + files[1] + "'}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "admin.tls.cert_file") {
			t.Errorf("%v: New: %v, want an error naming admin.tls.cert_file", files, err)
		}
	}
}

// twoFreePorts are two different 127.0.0.1 addresses nothing listens on
// now (held open together while they are picked, so they differ).
func twoFreePorts(t *testing.T) (string, string) {
	t.Helper()
	a, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	return a.Addr().String(), b.Addr().String()
}
