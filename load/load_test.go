package load

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/coding"
)

func TestResult(t *testing.T) {
	for in, want := range map[string]string{
		"edge-1; hit": "hit", "edge; fwd=uri-miss; stored": "miss", "e; fwd=uri-miss; collapsed": "collapsed",
		"e; fwd=stale; fwd-status=304": "revalidated", "e; fwd=bypass; detail=method": "pass", "": "none",
	} {
		if got := Result(in); got != want {
			t.Errorf("Result(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRunIsOpenLoopAndCounts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/err" {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Cache-Status", "x; hit")
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	s := Run(context.Background(), Config{
		Targets: []string{srv.URL}, Rate: 200, Duration: 500 * time.Millisecond, Timeout: time.Second, MaxInflight: 100,
		Path: func(i int, _ *rand.Rand) string {
			if i%10 == 0 {
				return "/err"
			}
			return "/ok"
		},
	})
	if s.Requests != 100 || s.Errors != 10 || s.ByResult["hit"] != 90 || s.ByStatus[503] != 10 {
		t.Fatalf("%+v", s)
	}
	if s.P50ms <= 0 || s.P99ms < s.P50ms {
		t.Errorf("percentiles %+v", s)
	}
	hit, none := s.ByResultLatency["hit"], s.ByResultLatency["none"]
	if hit.Count != 90 || none.Count != 10 || hit.Mean <= 0 || hit.P99 < hit.P50 {
		t.Errorf("latency by result %+v", s.ByResultLatency)
	}
}

// TestRunCountsCutBodiesAndWrongContent: a body cut short is an error (the
// client did not get the page), a 2xx that Verify refuses is wrong content,
// and every error is placed on the timeline.
func TestRunCountsCutBodiesAndWrongContent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cut":
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte("short"))
		case "/wrong":
			_, _ = w.Write([]byte("other page"))
		default:
			w.Header().Set("Age", "61")
			_, _ = w.Write([]byte("ok"))
		}
	}))
	defer srv.Close()
	paths := []string{"/ok", "/cut", "/wrong", "/ok"}
	s := Run(context.Background(), Config{
		Targets: []string{srv.URL}, Rate: 200, Duration: 200 * time.Millisecond, Timeout: time.Second,
		Path:   func(i int, _ *rand.Rand) string { return paths[i%len(paths)] },
		Verify: func(path string, _ http.Header, n int64) bool { return path != "/wrong" && n == 2 || path == "/cut" },
	})
	if s.Requests != 40 || s.Errors != 10 || s.Wrong != 10 || len(s.ErrorTimes) != 10 {
		t.Fatalf("requests %d errors %d wrong %d error times %d; want 40, 10, 10, 10", s.Requests, s.Errors, s.Wrong, len(s.ErrorTimes))
	}
	if s.MaxAgeS != 61 {
		t.Errorf("max Age %d, want 61", s.MaxAgeS)
	}
	for _, at := range s.ErrorTimes {
		if at < 0 || at > 1 {
			t.Errorf("error at %.3f s, outside the run", at)
		}
	}
}

// TestRunSendsAcceptEncodingAndVerifiesDecoded: the requests carry the
// configured Accept-Encoding (a browser's by default in `edge load`), the
// answers are read as sent, and Verify sees the decoded length; a body in
// a coding the client cannot decode is an error of kind body.
func TestRunSendsAcceptEncodingAndVerifiesDecoded(t *testing.T) {
	const page = "<p>a page that compresses well</p>"
	codec, err := coding.NewCodec(coding.DefaultLevels)
	if err != nil {
		t.Fatal(err)
	}
	gz, _ := codec.Encode(coding.Gzip, []byte(strings.Repeat(page, 100)))
	var sawAE atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAE.Store(r.Header.Get("Accept-Encoding"))
		if r.URL.Path == "/odd" {
			w.Header().Set("Content-Encoding", "x-unknown")
			_, _ = w.Write([]byte("??"))
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz)
	}))
	defer srv.Close()
	var lengths sync.Map
	s := Run(context.Background(), Config{Targets: []string{srv.URL}, Rate: 200, Duration: 100 * time.Millisecond, Timeout: 5 * time.Second,
		AcceptEncoding: BrowserAcceptEncoding,
		Path:           func(i int, _ *rand.Rand) string { return map[bool]string{true: "/odd", false: "/page"}[i == 3] },
		Verify:         func(_ string, _ http.Header, n int64) bool { lengths.Store(n, true); return n == int64(100*len(page)) }})
	if got := sawAE.Load(); got != BrowserAcceptEncoding {
		t.Fatalf("Accept-Encoding sent %q, want %q", got, BrowserAcceptEncoding)
	}
	if s.Wrong != 0 {
		lengths.Range(func(k, _ any) bool { t.Logf("length seen: %v", k); return true })
		t.Fatalf("%d answers failed verification: the decoded length was not what Verify saw", s.Wrong)
	}
	if s.ErrorKinds["body other"] != 1 || s.Errors != 1 {
		t.Fatalf("the unknown coding: errors %d, kinds %v; want one body error", s.Errors, s.ErrorKinds)
	}
}
