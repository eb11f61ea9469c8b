package main

// A review found (now mended): after an origin answered a streamed upload
// early, stream removed the Connection: close dropUnreadBody had set, so the
// connection was kept while the body's read deadline stood in the past:
// net/http parsed the rest of the body as requests (some reached the
// origin) or cancelled the next request (502 client-gone). closingWriter
// (proxy/limits.go) now sets the field as the header is written.
//
// A hostile review (s36): an upload answered early by the origin, the
// client's next request pipelined behind the body, through a real edge
// process. The follow-up must get its own answer: never one parsed out of
// the body, never a 502 client-gone.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const s36Smuggle = "GET /smuggled HTTP/1.1\r\nHost: smuggle.test\r\n\r\n"

func TestS36ProcessPipelinedUploadAnsweredEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	var smuggled atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/smuggled") || r.Host == "smuggle.test" {
			smuggled.Add(1)
		}
		w.Header().Set("Cache-Control", "no-store")
		switch {
		case strings.HasPrefix(r.URL.Path, "/after"):
			_, _ = io.WriteString(w, "after")
		case strings.HasPrefix(r.URL.Path, "/302"):
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		default:
			w.WriteHeader(http.StatusForbidden) // without reading the upload
		}
	}))
	defer origin.Close()
	pub, adm := freeAddr(t), freeAddr(t)
	cfgFile := filepath.Join(t.TempDir(), "edge.yaml")
	cfg := fmt.Sprintf("origin: {url: %q}\nlisten: %q\nadmin: {listen: %q}\nnode_id: s36\nlimits: {spool_bytes: 0}\n", origin.URL, pub, adm)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", cfgFile)
	waitUp(t, "http://"+adm+"/readyz")

	var mu sync.Mutex
	kinds := map[string]int{}
	var first []string
	runs := 0
	budget, workers := 1500*time.Millisecond, 1
	if v := os.Getenv("S36_BUDGET"); v != "" {
		budget, _ = time.ParseDuration(v)
	}
	end := time.Now().Add(budget)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(end); i += workers {
				kind, line := s36Once(t, pub, i)
				mu.Lock()
				runs++
				if kind != "" {
					kinds[kind]++
					if len(first) < 3 {
						first = append(first, line)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d runs: %v; %d requests written in bodies reached the origin", runs, kinds, smuggled.Load())
	if len(first) > 0 || smuggled.Load() > 0 {
		t.Errorf("follow-ups answered wrongly %v of %d (%d requests from bodies reached the origin); first: %q", kinds, runs, smuggled.Load(), first)
	}
}

// s36Once sends one upload with the follow-up pipelined behind it and
// says what went wrong ("" for nothing).
func s36Once(t *testing.T, pub string, i int) (kind, line string) {
	size := 256 << 10
	if i%2 == 1 {
		size = 300000
	}
	path := []string{"/302", "/403"}[(i/2)%2]
	body := strings.Repeat(s36Smuggle, size/len(s36Smuggle)+1)[:size]
	c, err := net.Dial("tcp", pub)
	if err != nil {
		t.Error(err)
		return "dial", err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		_, _ = fmt.Fprintf(c, "POST %s/%d HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n%sGET /after HTTP/1.1\r\nHost: example.test\r\n\r\n", path, i, size, body)
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "no answer", err.Error()
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	what := ""
	if resp.Close {
		if rest, _ := io.ReadAll(br); len(rest) > 0 {
			what = "more after a close"
		}
	} else if next, err := http.ReadResponse(br, nil); err == nil {
		got, _ := io.ReadAll(next.Body)
		next.Body.Close()
		switch {
		case next.StatusCode == 200 && string(got) == "after":
		case strings.Contains(next.Header.Get("Cache-Status"), "client-gone"):
			what = "502 client-gone"
		default:
			what = fmt.Sprintf("%d %.40q via=%q", next.StatusCode, got, next.Header.Get("Via"))
		}
	}
	if what == "" {
		return "", ""
	}
	kind = what
	if kind != "502 client-gone" {
		kind = "parsed from the body"
	}
	return kind, fmt.Sprintf("%s size=%d: %d then %s", path, size, resp.StatusCode, what)
}
