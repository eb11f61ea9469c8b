package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
)

// TestHitPathNeverLeaksBetweenUsers runs a node with the HTTP/1.1 hit path
// in front of an origin that tries to make the cache hand one user's
// answer to another: per-user pages marked public that set a cookie, pages
// that vary on Cookie, private pages, and pages behind Authorization. Alice
// fills the cache; Bob's plain requests, which the hit path reads itself,
// must never see her name, while a public control page is shared (so the
// hit path is shown to be in use).
func TestHitPathNeverLeaksBetweenUsers(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := r.Header.Get("Cookie") + r.Header.Get("Authorization")
		h := w.Header()
		switch r.URL.Path {
		case "/public":
			h.Set("Cache-Control", "max-age=60")
			_, _ = io.WriteString(w, "the same for everyone")
			return
		case "/setcookie":
			h.Set("Cache-Control", "public, max-age=60")
			h.Set("Set-Cookie", "session="+strings.TrimPrefix(who, "user="))
		case "/varycookie":
			h.Set("Cache-Control", "max-age=60")
			h.Set("Vary", "Cookie")
		case "/private":
			h.Set("Cache-Control", "private, max-age=60")
		case "/auth":
			// Depends on Authorization alone: a response to a request
			// with it is not shared unless it says so (RFC 9111 §3.5).
			who = r.Header.Get("Authorization")
			h.Set("Cache-Control", "max-age=60")
		case "/nostore":
			h.Set("Cache-Control", "no-store")
		}
		_, _ = io.WriteString(w, "page for "+who)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "")
	if !n.cfg.Tuning.HitPath {
		t.Fatal("tuning.hit_path is off by default")
	}

	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}
	get := func(path string, hdr ...string) (string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+n.PublicAddr()+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header
	}
	paths := []string{"/setcookie", "/varycookie", "/private", "/auth", "/nostore"}
	for _, p := range paths {
		for range 2 {
			get(p, "Cookie", "user=alice")
			get(p, "Authorization", "Bearer alice")
		}
	}
	get("/public", "Cookie", "user=alice")
	for range 3 {
		for _, p := range append(paths, "/public") {
			body, hdr := get(p)
			var fields strings.Builder
			_ = hdr.Write(&fields)
			if strings.Contains(body, "alice") || strings.Contains(fields.String(), "alice") {
				t.Fatalf("%s: Bob got Alice's answer: %q\n%s", p, body, fields.String())
			}
		}
	}
	if st := n.hitM.Stats(); st.Answered < 3 {
		t.Fatalf("the hit path answered %d requests; the control page should have gone through it (stats %+v)", st.Answered, st)
	}
}

// freeAddr returns a loopback address that was free a moment ago.
// freeAddr is e2e.FreeAddr: a port from below the ephemeral range, never
// the same twice in one test binary (a port just closed may come back from
// a Listen on :0, and a node refuses one address for two listeners).
func freeAddr(t testing.TB) string { return e2e.FreeAddr(t) }

// TestHitPathNeverServesAKeyedOrForwardedVariant: through a real node with
// the hit path on, a client's forwarding fields and unknown fields never
// shape what plain visitors get, whichever path (the hit loop or net/http)
// reads their requests.
func TestHitPathNeverServesAKeyedOrForwardedVariant(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		prefix := r.Header.Get("X-Forwarded-Prefix") + r.Header.Get("X-Asset-Base") + r.Header.Get("X-Forwarded-Port")
		_, _ = io.WriteString(w, `<script src="`+prefix+`/app.js"></script>`)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "")
	raw := func(head string) string {
		t.Helper()
		resp, body := rawAsk(t, n.PublicAddr(), head)
		return resp.Header.Get("Cache-Status") + "\n" + body
	}
	for _, path := range []string{"/a", "/b", "/c"} {
		raw("GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Forwarded-Prefix: //evil.example\r\nX-Forwarded-Port: 6666\r\n" +
			"X_Forwarded_Prefix: //evil2.example\r\nX-Asset-Base: //evil3.example\r\nConnection: close\r\n\r\n")
		for range 3 {
			got := raw("GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if strings.Contains(got, "evil") || strings.Contains(got, "6666") {
				t.Fatalf("%s: a plain visitor got a poisoned page:\n%s", path, got)
			}
		}
	}
	if st := n.hitM.Stats(); st.Answered < 3 {
		t.Fatalf("the hit path answered %d requests; the plain visitors' repeats should have gone through it", st.Answered)
	}
}
