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
