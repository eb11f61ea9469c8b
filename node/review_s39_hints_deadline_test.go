package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
	"testing"
	"time"
)

// TestS39LateHintOnHTTP1LosesTheWholeAnswer: on the node's HTTP/1.1
// listener net/http sets the connection's write deadline to
// limits.write_timeout from the request's arrival; the proxy extends it
// before each write of the final answer (extendWrite), which is why a
// slow origin's answer still arrives. The 103 relay's writer goroutine
// calls WriteHeader(103) with no such extension: an origin that sends its
// 103 after write_timeout (a slow page, a long upload before it) has the
// 103's flush fail on the expired deadline. net/http then records the
// write error on the connection (and cancels the request's context), so
// the final answer, written later with a fresh deadline, never reaches
// the client either. Without the 103 the same slow origin's answer is
// served (the control).
func TestS39LateHintOnHTTP1LosesTheWholeAnswer(t *testing.T) {
	t.Parallel() // mostly waiting past limits.write_timeout, on a node of its own
	var hint atomic.Bool
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond) // longer than write_timeout
		if hint.Load() {
			w.Header().Set("Link", "</late.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "slow page "+r.URL.Path)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "limits: {write_timeout: 1s}\n")
	ask := func(path string) (int, string, int, error) {
		hints := 0
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					hints++
				}
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.PublicAddr()+path, nil)
		req.Host = "x"
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", hints, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), hints, err
	}
	if code, body, _, err := ask("/control"); err != nil || code != 200 || body != "slow page /control" {
		t.Fatalf("control (no 103): %d %q %v; the slow origin's answer should be served", code, body, err)
	}
	hint.Store(true)
	code, body, hints, err := ask("/hinted")
	if err != nil || code != 200 || body != "slow page /hinted" {
		t.Fatalf("an origin that sent its 103 1.5 s in (limits.write_timeout 1s) and then its page: the client got %d %q, %d 103s, err %v; "+
			"without the 103 the same page is served. The relay's WriteHeader(103) ran on the request's first write deadline (no extendWrite), "+
			"its failed flush poisoned the connection and the final answer was lost", code, body, hints, err)
	}
}

// TestS39HintAfterASlowUploadLosesThePassAnswer: the same defect on the
// commonest path to it. A browser's POST (no Expect) whose body takes
// longer than limits.write_timeout to arrive is read first (servePass,
// bufferBody), then goes to the origin, which sends its 103 at once. The
// 103's flush meets the write deadline net/http set when the request
// arrived: the write fails, net/http cancels the request's context (the
// pass's fetch runs on it) and the client gets no answer at all. Without
// the 103 the same upload is answered (the control).
func TestS39HintAfterASlowUploadLosesThePassAnswer(t *testing.T) {
	t.Parallel() // mostly waiting past limits.write_timeout, on a node of its own
	var hint atomic.Bool
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hint.Load() {
			w.Header().Set("Link", "</upload.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "got "+string(b))
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "limits: {write_timeout: 1s, body_timeout: 5s}\n")
	post := func(path string) (int, string, error) {
		pr, pw := io.Pipe()
		go func() {
			for _, part := range []string{"one ", "two ", "three"} {
				_, _ = io.WriteString(pw, part)
				time.Sleep(600 * time.Millisecond) // 1.8 s in all: past write_timeout
			}
			_ = pw.Close()
		}()
		req, _ := http.NewRequest("POST", "http://"+n.PublicAddr()+path, pr)
		req.Host = "x"
		c := &http.Client{Timeout: 8 * time.Second, Transport: &http.Transport{DisableCompression: true}}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	if code, body, err := post("/control"); err != nil || code != 200 || body != "got one two three" {
		t.Fatalf("control (no 103): %d %q %v; the slow upload should be answered", code, body, err)
	}
	hint.Store(true)
	if code, body, err := post("/hinted"); err != nil || code != 200 || body != "got one two three" {
		t.Fatalf("a POST whose body took 1.8 s (limits.write_timeout 1s), to an origin that sends a 103 at once: the client got %d %q, err %v; "+
			"without the 103 it is answered. The relay wrote the 103 on the request's expired first write deadline", code, body, err)
	}
}
