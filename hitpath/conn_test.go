package hitpath

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// cacheOfOne answers GET or HEAD /hit and declines everything else.
type cacheOfOne struct{}

func (cacheOfOne) AppendHit(dst []byte, r *Request, date []byte, _ net.Addr, a *Answer) bool {
	if string(r.Target) == "/big" {
		dst = append(dst, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nX-Path: fast\r\n\r\n"...)
		a.Head, a.Body = dst, bigBody
		if r.Head {
			a.Body = nil
		}
		return true
	}
	if string(r.Target) != "/hit" {
		return false
	}
	dst = append(dst, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Path: fast\r\n"...)
	dst = append(dst, date...)
	if r.Close {
		dst = append(dst, "Connection: close\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	if !r.Head {
		dst = append(dst, "hit"...)
	}
	a.Head = dst
	return true
}

var bigBody = []byte(strings.Repeat("0123456789", 10000))

// startLoop serves the loop's listener with net/http on a real socket.
func startLoop(t *testing.T, cfg Config) (*http.Server, string, *Metrics) {
	srv, addr, m, _ := startLoopListener(t, cfg)
	return srv, addr, m
}

func startLoopListener(t *testing.T, cfg Config) (*http.Server, string, *Metrics, *Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	l := NewListener(ln, cfg, cacheOfOne{}, m)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(100 * time.Millisecond)
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", "net/http")
		_, _ = io.WriteString(w, "net:"+r.URL.Path+string(body))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.Serve(srv) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv, ln.Addr().String(), m, l
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

// expect reads one response and checks who answered and with what body.
func expect(t *testing.T, br *bufio.Reader, method, path, body string) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if got := resp.Header.Get("X-Path"); got != path || string(b) != body {
		t.Fatalf("answered by %q with %q, want %q with %q", got, b, path, body)
	}
	return resp
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: h\r\n\r\n" }

func TestMissesGoToNetHTTPAndTheConnectionComesBack(t *testing.T) {
	_, addr, m := startLoop(t, Config{})
	c, br := dial(t, addr)
	for _, step := range []struct{ req, by, body string }{
		{get("/hit"), "fast", "hit"},
		{get("/miss"), "net/http", "net:/miss"},
		{get("/hit"), "fast", "hit"}, // back on the hit path
		{"GET /hit HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"x\"\r\n\r\n", "net/http", "net:/hit"},
		{get("/hit"), "fast", "hit"},
	} {
		if _, err := io.WriteString(c, step.req); err != nil {
			t.Fatal(err)
		}
		resp := expect(t, br, "GET", step.by, step.body)
		if resp.Header.Get("Date") == "" {
			t.Errorf("%q: no Date", step.req)
		}
	}
	st := m.Stats()
	if st.Answered != 3 || st.Passed[reasonNotHit] != 1 || st.Passed[reasonField] != 1 || st.Kept != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestForeignRequestsLeaveTheConnectionWithNetHTTP(t *testing.T) {
	_, addr, m := startLoop(t, Config{})
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, "POST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"+get("/hit")); err != nil {
		t.Fatal(err)
	}
	expect(t, br, "POST", "net/http", "net:/formhello")
	expect(t, br, "GET", "net/http", "net:/hit")
	if st := m.Stats(); st.Answered != 0 || st.Kept != 1 || st.Passed[reasonMethod] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	_, addr, _ := startLoop(t, Config{})
	c, br := dial(t, addr)
	all := get("/hit") + "HEAD /hit HTTP/1.1\r\nHost: h\r\n\r\n" + get("/slow") + get("/hit") + get("/miss") + get("/hit")
	if _, err := io.WriteString(c, all); err != nil {
		t.Fatal(err)
	}
	expect(t, br, "GET", "fast", "hit")
	expect(t, br, "HEAD", "fast", "")
	expect(t, br, "GET", "net/http", "net:/slow")
	expect(t, br, "GET", "fast", "hit")
	expect(t, br, "GET", "net/http", "net:/miss")
	expect(t, br, "GET", "fast", "hit")
}

// TestRequestSentWhileNetHTTPServes: a hit that arrives while net/http is
// still answering a handed request waits for that answer and comes after
// it (the background read keeps its bytes for the loop).
func TestRequestSentWhileNetHTTPServes(t *testing.T) {
	_, addr, _ := startLoop(t, Config{})
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, get("/slow")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if _, err := io.WriteString(c, get("/hit")); err != nil {
		t.Fatal(err)
	}
	expect(t, br, "GET", "net/http", "net:/slow")
	expect(t, br, "GET", "fast", "hit")
}

func TestHeadSplitAcrossReads(t *testing.T) {
	_, addr, _ := startLoop(t, Config{})
	c, br := dial(t, addr)
	req := get("/hit")
	for _, part := range []string{req[:5], req[5:20], req[20:]} {
		if _, err := io.WriteString(c, part); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	expect(t, br, "GET", "fast", "hit")
}

func TestMalformedAndLargeHeadsGoToNetHTTP(t *testing.T) {
	_, addr, m := startLoop(t, Config{})
	cases := []struct {
		raw    string
		status int
	}{
		{"GET /hit HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", http.StatusOK}, // obs-fold: net/http unfolds it
		{"GET /hit HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n", http.StatusBadRequest},
		{"GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", http.StatusOK}, // net/http frames it by chunks
		{"GET /hit HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", http.StatusOK},
		{"GET /hit HTTP/1.1\nHost: h\n\n", http.StatusOK}, // bare LF
	}
	for _, tc := range cases {
		c, br := dial(t, addr)
		if _, err := io.WriteString(c, tc.raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%.40q: %v", tc.raw, err)
		}
		if resp.StatusCode != tc.status || resp.Header.Get("X-Path") == "fast" {
			t.Errorf("%.40q: %d by %q, want %d from net/http", tc.raw, resp.StatusCode, resp.Header.Get("X-Path"), tc.status)
		}
	}
	st := m.Stats()
	if st.Answered != 0 || st.Kept != 5 || st.Passed[reasonTooLarge] != 1 || st.Passed[reasonSyntax] != 2 || st.Passed[reasonHost] != 1 || st.Passed[reasonFraming] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestConnectionCloseIsHonoured(t *testing.T) {
	_, addr, _ := startLoop(t, Config{})
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, "GET /hit HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"+get("/hit")); err != nil {
		t.Fatal(err)
	}
	resp := expect(t, br, "GET", "fast", "hit")
	if !resp.Close {
		t.Error("no Connection: close in the answer")
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after Connection: close the connection stays open (%v)", err)
	}
}

func TestSlowHeadIsCut(t *testing.T) {
	_, addr, _ := startLoop(t, Config{ReadHeaderTimeout: 200 * time.Millisecond})
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, get("/hit")+"GET /hit HTTP/1.1\r\nHo"); err != nil {
		t.Fatal(err)
	}
	expect(t, br, "GET", "fast", "hit")
	// A byte every 100 ms would keep a per-read timeout alive for ever;
	// the head's timeout runs from its first partial read.
	for range 30 {
		time.Sleep(100 * time.Millisecond)
		if _, err := io.WriteString(c, "o"); err != nil {
			return // cut
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("a head trickling in for 3 s was answered")
	}
}

func TestShutdownClosesConnectionsOnTheHitPath(t *testing.T) {
	srv, addr, m, l := startLoopListener(t, Config{IdleTimeout: time.Hour})
	// One connection only ever had hits (net/http still sees it as new),
	// one had a request net/http answered (idle).
	c1, br1 := dial(t, addr)
	c2, br2 := dial(t, addr)
	if _, err := io.WriteString(c1, get("/hit")); err != nil {
		t.Fatal(err)
	}
	expect(t, br1, "GET", "fast", "hit")
	if _, err := io.WriteString(c2, get("/miss")); err != nil {
		t.Fatal(err)
	}
	expect(t, br2, "GET", "net/http", "net:/miss")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l.Drain()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// Without Drain, net/http would wait 5 s for the connection it sees as new.
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	for _, br := range []*bufio.Reader{br1, br2} {
		if _, err := br.ReadByte(); err == nil {
			t.Error("a connection survived shutdown")
		}
	}
	// net/http reports the close from each connection's goroutine, after
	// Shutdown returned.
	for deadline := time.Now().Add(10 * time.Second); m.Stats().Connections != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted after shutdown", m.Stats().Connections)
		}
	}
}

func TestLargeBodyFollowsTheHead(t *testing.T) {
	_, addr, _ := startLoop(t, Config{})
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, get("/big")+get("/hit")); err != nil {
		t.Fatal(err)
	}
	expect(t, br, "GET", "fast", string(bigBody))
	expect(t, br, "GET", "fast", "hit")
}

// TestQuickHandedRequestsDoNotHang: net/http can end its background read
// before that read's goroutine starts (a fast handler). The loop must see
// that abort however late its read starts; it once cleared it on entry and
// waited for ever, hanging the connection (found by review).
func TestQuickHandedRequestsDoNotHang(t *testing.T) {
	_, addr, _ := startLoop(t, Config{})
	c, br := dial(t, addr)
	for i := range 300 {
		if _, err := io.WriteString(c, get("/miss")); err != nil {
			t.Fatal(err)
		}
		expect(t, br, "GET", "net/http", "net:/miss")
		if i%3 == 0 {
			if _, err := io.WriteString(c, get("/hit")); err != nil {
				t.Fatal(err)
			}
			expect(t, br, "GET", "fast", "hit")
		}
	}
}
