package h2server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

// rvXNetServer serves h with x/net's HTTP/2 server (what net/http bundles)
// on a loopback listener, for comparison.
func rvXNetServer(t *testing.T, h http.Handler, wt time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, WriteTimeout: wt, Protocols: h2cOnly()} // net/http's own HTTP/2 server (x/net's, bundled)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

func rvSummary(r *rvResp) string {
	if r == nil {
		return "<nothing>"
	}
	fl := func(hs []hpack.HeaderField) string {
		var out []string
		for _, hf := range hs {
			if hf.Name == "date" {
				continue
			}
			out = append(out, hf.Name+"="+hf.Value)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	s := fmt.Sprintf("status=%s hdr[%s] body=%q trailer[%s] end=%v", r.status, fl(r.header), r.body, fl(r.trailer), r.ended)
	if r.gotRST {
		s += " RST=" + r.rst.String()
	}
	if len(r.afterEnd) > 0 {
		s += fmt.Sprintf(" AFTER-END%v", r.afterEnd)
	}
	return s
}

func TestReviewHandlerDiffersFromNetHTTP(t *testing.T) {
	type tc struct {
		name   string
		method string
		h      func(w http.ResponseWriter, r *http.Request)
	}
	cases := []tc{
		{"empty", "GET", func(w http.ResponseWriter, r *http.Request) {}},
		{"head-writes", "HEAD", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "0123456789") }},
		{"head-declared", "HEAD", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Content-Length", "42") }},
		{"204-write", "GET", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204); io.WriteString(w, "x") }},
		{"304", "GET", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Etag", `"a"`); w.WriteHeader(304) }},
		{"trailer-declared", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "s1")
		}},
		{"trailer-declared-set-early", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			w.Header().Set("X-Sum", "early")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "late")
		}},
		{"trailer-prefix", "GET", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "body")
			w.Header().Set(http.TrailerPrefix+"X-Late", "v")
		}},
		{"trailer-no-body", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(200)
			w.Header().Set("X-Sum", "s1")
		}},
		{"trailer-head", "HEAD", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "s1")
		}},
		{"short", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "12345")
		}},
		{"flush-only", "GET", func(w http.ResponseWriter, r *http.Request) { w.(http.Flusher).Flush() }},
		{"early-hints", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(103)
			io.WriteString(w, "ok")
		}},
		{"bad-cl-plus", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "+2")
			io.WriteString(w, "ok")
		}},
		{"bad-cl-space", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", " 2")
			io.WriteString(w, "ok")
		}},
		{"hop-by-hop", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			w.Header().Set("Transfer-Encoding", "chunked")
			w.Header().Set("Keep-Alive", "1")
			io.WriteString(w, "ok")
		}},
		{"bad-field", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Bad Name"] = []string{"v"}
			w.Header()["X-Nl"] = []string{"a\nb"}
			io.WriteString(w, "ok")
		}},
		{"header-after-write", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			w.Header().Set("X-After", "1")
			io.WriteString(w, "ok")
		}},
		{"sniff", "GET", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html><body>x</body></html>") }},
		{"no-sniff-nil", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "<html>")
		}},
		{"te-trailers-set", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("TE", "trailers")
			io.WriteString(w, "ok")
		}},
		{"panic-before", "GET", func(w http.ResponseWriter, r *http.Request) { panic("boom") }},
		{"panic-after-flush", "GET", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}},
		{"write-header-twice", "GET", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(202); w.WriteHeader(500) }},
		{"status-999", "GET", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(999) }},
		{"cl-and-more", "GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "2")
			_, err := io.WriteString(w, "okay")
			w.Header().Set("X-Err", fmt.Sprint(err))
		}},
	}
	// deliberate: the cases where edge's answer differs from x/net's on
	// purpose, and what edge's must show. A body shorter than its
	// Content-Length (or a write past it) is reset, never ended as whole,
	// which x/net does; a connection-specific field is never sent (RFC 9113
	// §8.2.2), which x/net sends for Keep-Alive.
	deliberate := map[string]string{"short": "RST=INTERNAL_ERROR", "cl-and-more": "RST=INTERNAL_ERROR", "hop-by-hop": `body="ok"`}
	mux := http.NewServeMux()
	for _, c := range cases {
		mux.HandleFunc("/"+c.name, c.h)
	}
	edge := rvServer(t, &Server{Handler: mux})
	xnet := rvXNetServer(t, mux, 0)
	for _, c := range cases {
		var got [2]string
		for i, addr := range []string{edge, xnet} {
			cl := rvDial(t, addr)
			f := rvGet("/" + c.name)
			f[1] = c.method
			cl.headers(1, true, f...)
			resps, _ := cl.collect(2*time.Second, nil, ended(1))
			// a short wait for frames after the end
			resps, _ = cl.collect(100*time.Millisecond, resps, func(map[uint32]*rvResp) bool { return false })
			got[i] = rvSummary(resps[1])
		}
		if want, ok := deliberate[c.name]; ok {
			// Where x/net's server lies, edge differs on purpose.
			if !strings.Contains(got[0], want) || strings.Contains(got[0], "keep-alive") {
				t.Errorf("%s: edge %s, want it to show %q", c.name, got[0], want)
			}
			continue
		}
		if got[0] != got[1] {
			t.Errorf("%s:\n  edge:  %s\n  x/net: %s", c.name, got[0], got[1])
		}
	}
}
