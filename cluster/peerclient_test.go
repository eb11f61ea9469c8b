package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a peer stand-in that counts the connections it accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func peerGet(t *testing.T, pc *peerClient, ctx context.Context, method, url string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, url, nil)
	resp, err := pc.Do(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// Answers read to their end leave the connection for the next request;
// HEAD, 204 and 304 (no body) too; a chunked answer's trailer is there
// after the body (the peer protocol's body MAC travels in one).
func TestPeerClientReusesConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "def")
			w.Header().Set("X-Sum", "ok")
		default:
			_, _ = io.WriteString(w, "page "+r.URL.Path)
		}
	})
	pc := newPeerClient(time.Second, time.Second)
	for i, tc := range []struct{ method, path, body string }{
		{"GET", "/a", "page /a"}, {"HEAD", "/a", ""}, {"GET", "/204", ""}, {"GET", "/304", ""},
		{"GET", "/chunked", "abcdef"}, {"GET", "/b", "page /b"},
	} {
		resp, body, err := peerGet(t, pc, context.Background(), tc.method, srv.URL+tc.path)
		if err != nil {
			t.Fatalf("%d %s %s: %v", i, tc.method, tc.path, err)
		}
		if body != tc.body {
			t.Errorf("%s %s: body %q, want %q", tc.method, tc.path, body, tc.body)
		}
		if tc.path == "/chunked" && resp.Trailer.Get("X-Sum") != "ok" {
			t.Errorf("chunked answer's trailer: %v", resp.Trailer)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("%d connections for six sequential requests, want 1", got)
	}
}

// Connections the peer closed while they sat in the pool (it restarted)
// fail the next request before any answer: every pooled connection to
// it is dropped and the request is sent again on a new one, so not one
// request fails however many dead connections the pool held.
func TestPeerClientRetriesAConnectionClosedWhileIdle(t *testing.T) {
	const pooled = 8
	arrived := make(chan struct{}, pooled)
	release := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			arrived <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	pc := newPeerClient(time.Second, 5*time.Second)
	done := make(chan error, pooled)
	for range pooled {
		go func() {
			_, _, err := peerGet(t, pc, context.Background(), "GET", srv.URL+"/held")
			done <- err
		}()
	}
	for range pooled {
		<-arrived // eight requests at once: eight connections
	}
	close(release)
	for range pooled {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	srv.CloseClientConnections() // every pooled connection is closed under us
	time.Sleep(50 * time.Millisecond)
	for i := range pooled {
		_, body, err := peerGet(t, pc, context.Background(), "GET", srv.URL+"/after")
		if err != nil || body != "ok" {
			t.Fatalf("request %d after the peer closed its idle connections: %q, %v", i, body, err)
		}
	}
	if got := conns.Load(); got != pooled+1 {
		t.Errorf("%d connections, want %d (the pooled ones, then one new)", got, pooled+1)
	}
}

// A body closed before its end, an answer with Connection: close, and a
// cancelled request do not leave their connection for the next request
// (it would read the rest of the old answer as its own).
func TestPeerClientDoesNotReuseUnfinishedConnections(t *testing.T) {
	release := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/slow":
			_, _ = io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			<-release
		default:
			_, _ = io.WriteString(w, strings.Repeat("x", 100000))
		}
	})
	defer close(release)
	pc := newPeerClient(time.Second, time.Second)
	req, _ := http.NewRequest("GET", srv.URL+"/big", nil)
	resp, err := pc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 10))
	resp.Body.Close() // before the end
	if _, _, err := peerGet(t, pc, context.Background(), "GET", srv.URL+"/close"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
	resp, err = pc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readDone := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); readDone <- err }()
	time.Sleep(50 * time.Millisecond)
	cancel() // a suspicion of the peer, the client gone: the read ends at once
	select {
	case err := <-readDone:
		if err == nil {
			t.Error("a cancelled answer read to a clean end")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the request did not unblock its body")
	}
	resp.Body.Close()
	if _, body, err := peerGet(t, pc, context.Background(), "GET", srv.URL+"/close"); err != nil || body != "bye" {
		t.Fatalf("%q, %v", body, err)
	}
	if got := conns.Load(); got != 4 {
		t.Errorf("%d connections, want 4 (none of the unfinished ones reused)", got)
	}
}

// The answer's header must come within the header timeout, and a request
// whose context ends while it waits fails with the context's error.
func TestPeerClientHeaderTimeoutAndCancel(t *testing.T) {
	hold := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { <-hold })
	defer close(hold)
	pc := newPeerClient(time.Second, 100*time.Millisecond)
	start := time.Now()
	if _, _, err := peerGet(t, pc, context.Background(), "GET", srv.URL+"/x"); err == nil || !errors.Is(err, errTimeout(err)) {
		t.Errorf("silent peer: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the header timeout took %v", d)
	}
	pc = newPeerClient(time.Second, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, _, err := peerGet(t, pc, ctx, "GET", srv.URL+"/y"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while waiting for the header: %v, want context.Canceled", err)
	}
}

// errTimeout returns err itself when it is a network timeout (so that
// errors.Is holds), else a sentinel that never matches.
func errTimeout(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return errors.New("not a timeout")
}

// Two users' answers must never mix through the pool: many requests at
// once for pages of their own, some abandoned mid-body, some cancelled,
// each one read to its end gets exactly its own page.
func TestPeerClientNeverMixesAnswers(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		page := strings.Repeat(r.URL.Path+";", 2000) // about 20 KiB: several reads
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		_, _ = io.WriteString(w, page)
	})
	pc := newPeerClient(time.Second, 5*time.Second)
	const workers, each = 16, 40
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				path := fmt.Sprintf("/u%d-%d", g, i)
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
				resp, err := pc.Do(req)
				if err != nil {
					cancel()
					errs <- err
					continue
				}
				switch i % 4 {
				case 1: // abandoned after a few bytes
					_, _ = resp.Body.Read(make([]byte, 100))
				case 2: // cancelled mid-body
					_, _ = resp.Body.Read(make([]byte, 100))
					cancel()
					_, _ = io.ReadAll(resp.Body)
				default:
					body, err := io.ReadAll(resp.Body)
					if err != nil {
						errs <- err
					} else if want := strings.Repeat(path+";", 2000); string(body) != want {
						errs <- fmt.Errorf("%s got another answer (%d bytes, starting %.20q)", path, len(body), body)
					}
				}
				resp.Body.Close()
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
