package node

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	n := &Node{cfg: &config.Config{}, guesses: newAdminGuesses(prometheus.NewRegistry())}
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

// TestWrongAdminTokensAreBoundedPerAddress: after a burst of wrong tokens
// an address is refused (429) without its token being compared, the
// right one included, until its bucket refills; another address is not
// held back, and both kinds are counted.
func TestWrongAdminTokensAreBoundedPerAddress(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := &Node{cfg: &config.Config{}, guesses: newAdminGuesses(reg)}
	n.cfg.Admin.Token = "the-right-token-0123"
	ok := n.requireToken(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	ask := func(remote, token string) int {
		r := httptest.NewRequest("POST", "/purge", nil)
		r.RemoteAddr = remote
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		ok.ServeHTTP(w, r)
		return w.Code
	}
	for i := range guessBurst {
		if code := ask("192.0.2.7:1000", fmt.Sprint("guess", i)); code != http.StatusUnauthorized {
			t.Fatalf("wrong guess %d: %d, want 401", i, code)
		}
	}
	if code := ask("192.0.2.7:2000", n.cfg.Admin.Token); code != http.StatusTooManyRequests {
		t.Errorf("the right token after %d wrong ones from the address: %d, want 429 (not compared)", guessBurst, code)
	}
	if code := ask("198.51.100.9:1000", n.cfg.Admin.Token); code != http.StatusNoContent {
		t.Errorf("another address with the right token: %d", code)
	}
	wrong := testutil.ToFloat64(n.guesses.failures.WithLabelValues("wrong"))
	throttled := testutil.ToFloat64(n.guesses.failures.WithLabelValues("throttled"))
	if wrong != guessBurst || throttled != 1 {
		t.Errorf("edge_admin_auth_failures_total wrong %v throttled %v, want %d and 1", wrong, throttled, guessBurst)
	}
	// The bucket refills at guessRate.
	g := newAdminGuesses(prometheus.NewRegistry())
	t0 := time.Now()
	for range guessBurst {
		g.wrong("192.0.2.7:1", t0)
	}
	if !g.throttled("192.0.2.7:9", t0) || g.throttled("192.0.2.7:9", t0.Add(time.Duration(float64(time.Second)/float64(guessRate))+time.Millisecond)) {
		t.Error("the address's bucket does not empty, or does not refill")
	}
}

// TestStatusShowsAdminAuthFailures: wrong admin tokens and the requests
// refused unread after them are on status.json and the status page.
func TestStatusShowsAdminAuthFailures(t *testing.T) {
	adm := freeAddr(t)
	startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+adm+"', token: 'admin-token-0123456789'}\norigin: {url: 'http://127.0.0.1:1'}\n")
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range guessBurst + 2 {
		req, _ := http.NewRequest("POST", "http://"+adm+"/purge?tag=t", nil)
		req.Header.Set("Authorization", fmt.Sprint("Bearer wrong-", i))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := c.Get("http://" + adm + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		AdminAuthFailures map[string]float64 `json:"admin_auth_failures"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.AdminAuthFailures["wrong"] != guessBurst || st.AdminAuthFailures["throttled"] != 2 {
		t.Errorf("status.json admin_auth_failures %v (%v), want %d wrong and 2 throttled", st.AdminAuthFailures, err, guessBurst)
	}
	resp, err = c.Get("http://" + adm + "/status?refresh=0")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), fmt.Sprintf("Admin requests with a wrong token %d, refused unread after too many from one address 2", guessBurst)) {
		t.Error("the status page does not show the admin token failures")
	}
}
