package demosite

// TestS42HeadOfEveryRouteIsItsGet: PROPERTY (holds). With GetHead, a
// HEAD of each of the demo's routes (pages, cache cases, vary, redirect,
// large with and without Range, status codes, _stats, a 404, a POST-only
// path) has its GET's status and Location/Cache-Control/Content-Length/
// ETag, no body, and is counted once, as a GET is (the e2e tests read
// these counts); /_stats is not counted either way.
//
// TestS42HeadSendsNoBodyBytes: DEFECT, trivial (failed before 2026-12-07). _stats'
// bytes_sent (benchcluster's origin bytes) counts what a handler Writes;
// net/http swallows a HEAD's body but returns its length, so a HEAD
// of /status/{code}/{id} (which writes its body unconditionally; before
// 0e5aecd a HEAD was a 404 and wrote the 404 text, so HEAD counted bytes
// then too) adds body bytes never sent. Same for the notFound page.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func s42Stats(t *testing.T, url string) (total int64, sent int64) {
	t.Helper()
	resp, err := http.Get(url + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Total int64 `json:"total"`
		Bytes int64 `json:"bytes_sent"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Total, st.Bytes
}

func TestS42HeadOfEveryRouteIsItsGet(t *testing.T) {
	d := New(Config{})
	srv := httptest.NewServer(d)
	defer srv.Close()
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type rq struct{ path, rng string }
	for _, c := range []rq{{"/", ""}, {"/p/1", ""}, {"/size/100", ""}, {"/cache/etag/1", ""}, {"/cache/no-store/1", ""}, {"/vary/1", ""},
		{"/redirect/1", ""}, {"/large/1", ""}, {"/large/1", "bytes=0-99"}, {"/large/1?ranges=no", ""}, {"/status/503/a", ""}, {"/status/204/a", ""},
		{"/_stats", ""}, {"/nope", ""}, {"/post-only/x", ""}} {
		do := func(method string) (*http.Response, []byte) {
			req, _ := http.NewRequest(method, srv.URL+c.path, nil)
			if c.rng != "" {
				req.Header.Set("Range", c.rng)
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, b
		}
		before := d.Requests(c.path)
		get, _ := do("GET")
		head, hb := do("HEAD")
		if c.path != "/_stats" && d.Requests(c.path) != before+2 {
			t.Errorf("%s: counted %d for a GET and a HEAD", c.path, d.Requests(c.path)-before)
		}
		if c.path == "/_stats" && d.Requests(c.path) != 0 {
			t.Errorf("/_stats counted")
		}
		if len(hb) != 0 || head.StatusCode != get.StatusCode {
			t.Errorf("%s %q: HEAD %d (%d body bytes), GET %d", c.path, c.rng, head.StatusCode, len(hb), get.StatusCode)
		}
		for _, h := range []string{"Location", "Cache-Control", "Content-Length", "ETag", "Content-Range"} {
			if (c.path == "/_stats" || c.path == "/redirect/1") && h == "Content-Length" {
				// _stats: sized by the encoder. redirect: http.Redirect
				// writes its note for GET only, so a HEAD has no length
				// (allowed: RFC 9110 §9.3.2).
				continue
			}
			if head.Header.Get(h) != get.Header.Get(h) {
				t.Errorf("%s %q: %s HEAD %q GET %q", c.path, c.rng, h, head.Header.Get(h), get.Header.Get(h))
			}
		}
	}
}

func TestS42HeadSendsNoBodyBytes(t *testing.T) {
	d := New(Config{})
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, path := range []string{"/p/1", "/large/1", "/status/503/a"} {
		_, sent0 := s42Stats(t, srv.URL)
		resp, err := http.Head(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, sent1 := s42Stats(t, srv.URL)
		if sent1 != sent0 {
			t.Errorf("HEAD %s: bytes_sent grew by %d, no body was sent", path, sent1-sent0)
		}
	}
}
