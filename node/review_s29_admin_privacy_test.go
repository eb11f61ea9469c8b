package node

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// s29SyncBuf is a goroutine-safe log sink.
type s29SyncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *s29SyncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *s29SyncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// s29RunLogged runs a node from yaml with its log, at debug level, in buf.
func s29RunLogged(t *testing.T, yaml string, buf *s29SyncBuf) *Node {
	t.Helper()
	cfg, err := config.LoadBytes([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// TestS29AdminNothingPrivateReachesTheOpenAdminPagesOrTheLogs: a user's
// private request (a reset link with a token in its query, a session
// cookie, an Authorization value, a login body, the Set-Cookie the origin
// answers) is served through a node in a two-node cluster; then an
// outsider reads every admin page open without the token (/status,
// /status.json, /status/route.json, /metrics, /healthz, /readyz) and
// tries the route explorer for the private URL. None of the user's
// values, nor admin.token nor cluster.secret, is in what the outsider
// reads; the access log and the node's debug log hold no cookie,
// Authorization, Set-Cookie, body, token or secret.
func TestS29AdminNothingPrivateReachesTheOpenAdminPagesOrTheLogs(t *testing.T) {
	const (
		qSecret   = "QSECRETq0w9"
		cSecret   = "CSECRETc1x8"
		aSecret   = "ASECRETa2y7"
		sSecret   = "SSECRETs3z6"
		bSecret   = "BSECRETb4v5"
		token     = "ADMTOKENt5u4-0123456789"
		clSecret  = "CLSECRETr6i3-0123456789"
		uaMarker  = "s29-agent"
		xfwSecret = "XSECRETx7o2"
	)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			w.Header().Set("Set-Cookie", "sid="+sSecret+"; HttpOnly")
			w.Header().Set("Cache-Control", "private")
		} else {
			w.Header().Set("Cache-Control", "max-age=600")
		}
		_, _ = w.Write([]byte("page"))
	}))
	defer origin.Close()
	accessFile := t.TempDir() + "/access.log"
	clA, clB := freeAddr(t), freeAddr(t)
	admA := freeAddr(t)
	peers := "a=" + clA + ",b=" + clB
	var logA s29SyncBuf
	a := s29RunLogged(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+admA+"', token: '"+token+"'}\n"+
		"log: {access: '"+accessFile+"', access_format: combined, level: debug}\n"+
		"origin: {url: '"+origin.URL+"'}\n"+
		"cluster: {listen: '"+clA+"', peers: '"+peers+"', secret: '"+clSecret+"', heartbeat_period: 50ms}\n", &logA)
	startNodeYAML(t, "node_id: b\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: '"+token+"'}\n"+
		"origin: {url: '"+origin.URL+"'}\n"+
		"cluster: {listen: '"+clB+"', peers: '"+peers+"', secret: '"+clSecret+"', heartbeat_period: 50ms}\n")
	pub := a.PublicAddr()
	private := "/account/reset?user=alice&token=" + qSecret
	for range 3 {
		rawAsk(t, pub, "GET "+private+" HTTP/1.1\r\nHost: shop.test\r\nCookie: session="+cSecret+"\r\nAuthorization: Bearer "+aSecret+
			"\r\nUser-Agent: "+uaMarker+"\r\nX-Forwarded-For: "+xfwSecret+"\r\nConnection: close\r\n\r\n")
	}
	body := "user=alice&password=" + bSecret
	rawAsk(t, pub, "POST /login HTTP/1.1\r\nHost: shop.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\nCookie: session="+cSecret+"\r\nConnection: close\r\n\r\n"+body)
	// A wrong token at the admin API, as a guesser sends it.
	rawAsk(t, admA, "POST /purge?url=http://shop.test/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+clSecret+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	time.Sleep(300 * time.Millisecond) // heartbeats, indicators, access lines

	userSecrets := []string{qSecret, cSecret, aSecret, sSecret, bSecret, xfwSecret, token, clSecret, "alice"}
	for _, p := range []string{"/status?refresh=0", "/status.json", "/status/route.json", "/metrics", "/healthz", "/readyz",
		"/status?url=http://shop.test" + strings.ReplaceAll(private, "&", "%26"), "/status/route.json?url=http://shop.test" + strings.ReplaceAll(private, "&", "%26")} {
		_, got := s29Get(t, "http://"+admA+p)
		for _, s := range userSecrets {
			if strings.Contains(got, s) {
				i := strings.Index(got, s)
				t.Errorf("anonymous GET %s shows %q: …%s…", p, s, got[max(0, i-80):min(len(got), i+40)])
			}
		}
	}
	// The explorer for the private URL needs the token.
	if code, _ := s29Get(t, "http://"+admA+"/status/route.json?url=http://shop.test"+strings.ReplaceAll(private, "&", "%26")); code != http.StatusUnauthorized {
		t.Errorf("anonymous route.json?url=: %d, want 401", code)
	}
	var access string
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(accessFile)
		if access = string(b); strings.Count(access, "\n") >= 4 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(access, uaMarker) || !strings.Contains(access, "/login") {
		t.Fatalf("access log lacks the requests:\n%s", access)
	}
	for _, s := range []string{cSecret, aSecret, sSecret, bSecret, token, clSecret} {
		if strings.Contains(access, s) {
			t.Errorf("the access log holds %q:\n%s", s, access)
		}
	}
	nodeLog := logA.String()
	if nodeLog == "" {
		t.Fatal("no node log captured")
	}
	for _, s := range []string{cSecret, aSecret, sSecret, bSecret, token, clSecret} {
		if strings.Contains(nodeLog, s) {
			i := strings.Index(nodeLog, s)
			t.Errorf("the node's log holds %q: …%s…", s, nodeLog[max(0, i-200):min(len(nodeLog), i+40)])
		}
	}
}
