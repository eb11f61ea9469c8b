package proxy

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestS67RangeOnHeadIsIgnored: range handling is defined for GET alone,
// and a server MUST ignore a Range field on any other method (RFC 9110
// §14.2). A HEAD answers as a GET without the Range would: 200, the whole
// representation's Content-Length, no Content-Range (RFC 9110 §9.3.2).
// The edge hands HEAD's Range to http.ServeContent, which answers 206 with
// the part's length: a downstream cache that freshens its stored 200 from
// a HEAD (RFC 9111 §4.3.5) reads a Content-Length that does not match.
func TestS67RangeOnHeadIsIgnored(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"whole", 64 << 10},
		{"sliced", 3 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := make([]byte, tc.size)
			for i := range body {
				body[i] = byte(i * 13)
			}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				w.Header().Set("Content-Type", "video/mp4")
				w.Header().Set("ETag", `"h1"`)
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
			}, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
			if w := serve(h, "GET", "/v.mp4"); w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), body) {
				t.Fatalf("warm: %d, %d bytes", w.Code, w.Body.Len())
			}
			w := serve(h, "HEAD", "/v.mp4", "Range", "bytes=0-99")
			if w.Code != http.StatusOK || w.Header().Get("Content-Length") != strconv.Itoa(tc.size) || w.Header().Get("Content-Range") != "" {
				t.Fatalf("HEAD with Range (Cache-Status %q): %d, Content-Length %q, Content-Range %q; want 200, %d, none",
					w.Header().Get("Cache-Status"), w.Code, w.Header().Get("Content-Length"), w.Header().Get("Content-Range"), tc.size)
			}
		})
	}
}
