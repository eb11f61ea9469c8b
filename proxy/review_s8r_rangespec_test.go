package proxy

import (
	"net/http"
	"strconv"
	"testing"
)

// TestS8RRangeSpecEdges: range-specs at the edges of RFC 9110 §14.1.2,
// against a stored gzip form and identity.
//
// Failed before 2026-12-06; fixed: limitRanges answers an unsatisfiable set 416 and reads overflowing positions as past the end.
func TestS8RRangeSpecEdges(t *testing.T) {
	body := s8rText(20000)
	h := s8rPageProxy(t, body, `"v1"`, nil)
	s8rWarm(t, h, "/p", "gzip")
	gzLen := serve(h, "GET", "/p", "Accept-Encoding", "gzip").Body.Len()
	for _, ae := range []string{"gzip", "identity"} {
		n := len(body)
		if ae == "gzip" {
			n = gzLen
		}
		N := strconv.Itoa(n)
		for _, tc := range []struct {
			rng  string
			code int
			cr   string
		}{
			// suffix-length 0 is unsatisfiable (§14.1.2): 416 bytes */N.
			{"bytes=-0", 416, "bytes */" + N},
			// A last-pos past any int64 is still "greater than or equal to
			// the current length": the remainder (§14.1.2; recipients must
			// anticipate large numerals).
			{"bytes=10-99999999999999999999", 206, "bytes 10-" + strconv.Itoa(n-1) + "/" + N},
			{"bytes=" + N + "-" + N, 416, "bytes */" + N},
			{"bytes=0-", 206, "bytes 0-" + strconv.Itoa(n-1) + "/" + N},
		} {
			w := serve(h, "GET", "/p", "Accept-Encoding", ae, "Range", tc.rng)
			if w.Code != tc.code || w.Header().Get("Content-Range") != tc.cr {
				t.Errorf("AE %s Range %s: %d Content-Range %q, want %d %q", ae, tc.rng, w.Code, w.Header().Get("Content-Range"), tc.code, tc.cr)
			}
			if w.Code == 206 && w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
				t.Errorf("AE %s Range %s: CL %q for %d", ae, tc.rng, w.Header().Get("Content-Length"), w.Body.Len())
			}
		}
	}
	_ = http.StatusOK
}
