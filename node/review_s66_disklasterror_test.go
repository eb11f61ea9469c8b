package node

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestS66DiskLastErrorShowsUsersPrivateURLsWithoutTheToken: the hottest
// URLs and the route explorer need the admin token because a cache key
// "can name users' private pages" (guardHot, routeNeedsToken), but the
// disk tier's last error, shown to anyone on /status and /status.json
// (disk.LastError), quotes two cache keys whole when a file holds another
// key's record (disk/tier.go: "file %s holds %q, not %q"). Steps: a node
// with a disk tier stores two users' reset links and stops cleanly; one
// file is replaced by the other (a restore, a copy, a misdirected write);
// the restarted node is asked for the second page. Expected: an
// anonymous reader of /status.json and /status learns neither user's
// token (the error is shown without the keys, or only with the token).
func TestS66DiskLastErrorShowsUsersPrivateURLsWithoutTheToken(t *testing.T) {
	const aliceTok, bobTok = "S66ALICEq1w2e3", "S66BOBBYz9x8c7"
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "reset page")
	}))
	t.Cleanup(origin.Close)
	dir := filepath.Join(t.TempDir(), "disk")
	yaml := func() (string, string, string) {
		pub, adm := freeAddr(t), freeAddr(t)
		return "listen: '" + pub + "'\nadmin: {listen: '" + adm + "', token: 'admin-token-0123456789'}\n" +
			"cache: {disk: {path: '" + dir + "', max_bytes: 8MiB}}\n" +
			"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['" + origin.URL + "']\n", pub, adm
	}
	alice := "/account/reset?user=alice&token=" + aliceTok
	bob := "/account/reset?user=bobby&token=" + bobTok
	y, pub, _ := yaml()
	_, stop := runNodeYAML(t, y)
	for _, p := range []string{alice, bob} {
		if resp, _ := rawAsk(t, pub, "GET "+p+" HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
	}
	// Both written to the tier (writes are asynchronous).
	find := func() (string, string) {
		var fa, fb string
		_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(path)
			switch {
			case bytes.Contains(b, []byte(aliceTok)) && filepath.Base(path) != "index.snap":
				fa = path
			case bytes.Contains(b, []byte(bobTok)) && filepath.Base(path) != "index.snap":
				fb = path
			}
			return nil
		})
		return fa, fb
	}
	var fa, fb string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fa, fb = find(); fa != "" && fb != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pages were not written to the disk tier (%q, %q)", fa, fb)
		}
	}
	stop() // a clean stop: the index snapshot names both files
	fa, fb = find()
	// Bob's file now holds Alice's record.
	b, err := os.ReadFile(fa)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fb, b, 0o600); err != nil {
		t.Fatal(err)
	}
	y, pub, adm := yaml()
	startNodeYAML(t, y)
	if resp, _ := rawAsk(t, pub, "GET "+bob+" HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("GET bob's page after the restart: %d", resp.StatusCode)
	}
	for _, p := range []string{"/status.json", "/status?refresh=0"} {
		code, body := getBody(t, "http://"+adm+p)
		if code != 200 {
			t.Fatalf("GET %s: %d", p, code)
		}
		for _, s := range []string{aliceTok, bobTok} {
			if i := strings.Index(body, s); i >= 0 {
				t.Errorf("anonymous GET %s shows a user's private URL (%s): …%s…", p, s, body[max(0, i-160):min(len(body), i+40)])
			}
		}
	}
}
