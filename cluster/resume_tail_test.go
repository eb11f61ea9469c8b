package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/edgecache/edge/proxy"
)

// Every peer answer is chunked (signingWriter deletes Content-Length), so
// resumeBody.total is always -1 and the "same total / end == total-1" check
// never runs: an origin 206 that covers only part of the missing bytes is
// spliced in and the body ends with a clean EOF, short.
func TestResumeAcceptsShortTail(t *testing.T) {
	half := len(resumePage) / 2
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		tail := resumePage[half : half+100]
		h := http.Header{}
		h.Set("Etag", `"v1"`)
		h.Set("Content-Range", "bytes "+strconv.Itoa(half)+"-"+strconv.Itoa(half+99)+"/"+strconv.Itoa(len(resumePage)))
		return &http.Response{StatusCode: 206, Header: h, ContentLength: 100, Body: io.NopCloser(bytes.NewReader(tail))}, nil
	})
	c := resumeCluster(t, origin)
	body, wasResumed, err := fetchFromPeer(t, c, brokenPeer(t, `"v1"`))
	if err == nil && len(body) != len(resumePage) {
		t.Fatalf("short body served as complete: %d of %d bytes, resumed %v, err nil", len(body), len(resumePage), wasResumed)
	}
}

// corruptBrokenPeer is brokenPeer whose first half is wrong on the wire
// (never authenticated: the MAC trailer never comes).
func corruptBrokenPeer(t *testing.T) *Peer {
	t.Helper()
	peer := playing(newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"}), "n2")
	h := peer.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v1"`)
		w.WriteHeader(http.StatusOK)
		bad := bytes.Repeat([]byte("X"), len(resumePage)/2)
		_, _ = w.Write(bad)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Peer{ID: "n2", Addr: strings.TrimPrefix(srv.URL, "http://")}
}

// An intermediate node B of a climb (continueClimb -> climb) resumed C's
// broken answer and relayed the spliced body to A through its signing
// writer: A got a valid body MAC over bytes B never authenticated, saw no
// Resumed() and (q-rule permitting) stored them. Now only the node the
// client asked resumes: B passes the break down (its proxy aborts the
// response), and A resumes and does not store.
func TestIntermediateLaunderesResumedBody(t *testing.T) {
	ranged := 0
	b := playing(resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged)), "n1") // a reaches it as n1
	c := corruptBrokenPeer(t)
	// B's data handler: what its proxy does with a fill (stream the
	// fetcher's body to the requester).
	bh := b.PeerHandler(func(w http.ResponseWriter, r *http.Request, in proxy.Inbound) {
		out := httptest.NewRequest("GET", "http://h/p/1", nil)
		out.RequestURI = ""
		resp, ok, _ := b.climbTo(r.Context(), out, "", c, 2, nil, 1, proxy.WaitOrder{})
		if !ok {
			http.Error(w, "x", http.StatusBadGateway)
			return
		}
		b.withResume(r.Context(), proxy.FetchRequest{Key: "http://h/p/1", Req: out, Route: in.Route}, resp, false)
		defer resp.Body.Close()
		for k, v := range resp.Header {
			if k != hdrRespAuth && k != hdrBodyAuth && k != "Trailer" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		if _, err := io.Copy(w, resp.Body); err != nil {
			panic(http.ErrAbortHandler) // as the proxy ends a response whose upstream failed (serveFrom)
		}
	}, func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(bh)
	t.Cleanup(srv.Close)
	a := resumeCluster(t, resumeOrigin(t, `"v1"`, new(int)))
	body, wasResumed, err := fetchFromPeer(t, a, &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")})
	if err == nil && !wasResumed && !bytes.Equal(body, resumePage) {
		t.Fatalf("A got an authenticated (MAC ok), non-resumed body of %d bytes that differs from the origin's (B resumed: %d Range requests): A would store it", len(body), ranged)
	}
}
