package load

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
