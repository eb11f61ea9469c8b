package cluster

import (
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// olderPeer answers every data request as a signed 200 the way a release
// before cache-key versions did: no Edge-Key-Version, or the given one.
func olderPeer(t *testing.T, secret []byte, version string) *Peer {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce := r.Header.Get(hdrNonce)
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=600")
		h.Set("Vary", "Origin")
		h.Set("Content-Type", "text/plain")
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		h.Set("Trailer", hdrBodyAuth)
		if version != "" {
			h.Set(hdrKeyVer, version)
		}
		body := []byte("the variant the old mapping stored")
		mac := newBodyMAC(secret, nonce)
		mac.Write(body)
		h.Set(hdrRespAuth, responseMAC(secret, nonce, http.StatusOK, h))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		h.Set(hdrBodyAuth, hex.EncodeToString(mac.Sum(nil)))
	}))
	t.Cleanup(srv.Close)
	return &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}
}

// TestAPeerOfAnotherKeyVersionIsNeverStoredFrom: during a rolling upgrade
// that changes how requests map to keys, an older peer answers for the
// new key what it stored under the old mapping (a variant poisoned
// through the hole the upgrade closes). Its answer, authentic as it is,
// is refused; a peer of this version is taken, and the field is the hop's,
// never the page's.
func TestAPeerOfAnotherKeyVersionIsNeverStoredFrom(t *testing.T) {
	in := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	patient(in)
	ask := func(p *Peer) (*http.Response, error) {
		req := httptest.NewRequest("GET", "http://h/api", nil)
		req.Header.Set("Origin", "https://app.example")
		out := in.peerRequest(req.Context(), req, "http://h/api")
		out.Header.Set(hdrMode, "climb")
		out.Header.Set(hdrHop, "1")
		if got := out.Header.Get(hdrKeyVer); got != proxy.CacheKeyVersion {
			t.Fatalf("peer request says key version %q, want %q", got, proxy.CacheKeyVersion)
		}
		return in.send(out, p)
	}
	for _, v := range []string{"", "1"} {
		if resp, err := ask(olderPeer(t, in.cfg.Secret, v)); !errors.Is(err, errOtherKeyVersion) {
			if resp != nil {
				resp.Body.Close()
			}
			t.Fatalf("an answer keyed under version %q was taken (err %v)", v, err)
		}
	}
	if n := testutil.ToFloat64(in.metrics.PeerRejected.WithLabelValues("answer_key_version")); n != 2 {
		t.Errorf("edge_peer_request_rejections_total{reason=answer_key_version} = %v, want 2", n)
	}
	resp, err := ask(olderPeer(t, in.cfg.Secret, proxy.CacheKeyVersion))
	if err != nil {
		t.Fatalf("an answer of this version was refused: %v", err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, ok := resp.Header[hdrKeyVer]; ok {
		t.Error("the hop's key version would be stored with the page")
	}
}

// TestARequestOfAnotherKeyVersionIsRefused: a node of this version does
// not answer an asker that keys pages another way, on the read loop or in
// PeerHandler; one that names no version (older than versions) is
// answered, and every answer names this node's version.
func TestARequestOfAnotherKeyVersionIsRefused(t *testing.T) {
	home, ph, p, _, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	})
	first, _ := signedGet(t, in, p, "GET", "/p", "climb")
	ph.Wait()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("fill: %d", first.StatusCode)
	}
	before := loopHits(home)
	resp := rawSend(t, p.Addr, rawPeerRequest(t, in, "/p", hdrKeyVer, "1"))[0]
	if resp.StatusCode != http.StatusServiceUnavailable || loopHits(home) != before {
		t.Errorf("a request of key version 1: %d, loop hits %d→%d (want 503, unchanged)", resp.StatusCode, before, loopHits(home))
	}
	if n := testutil.ToFloat64(home.metrics.PeerRejected.WithLabelValues("key_version")); n != 1 {
		t.Errorf("rejections counted: %v", n)
	}
	for _, fields := range [][]string{nil, {hdrKeyVer, proxy.CacheKeyVersion}} {
		resp := rawSend(t, p.Addr, rawPeerRequest(t, in, "/p", fields...))[0]
		if resp.StatusCode != http.StatusOK || resp.Header.Get(hdrKeyVer) != proxy.CacheKeyVersion {
			t.Errorf("request with %q: %d, key version %q", fields, resp.StatusCode, resp.Header.Get(hdrKeyVer))
		}
	}
	if loopHits(home) != before+2 {
		t.Errorf("loop hits %d, want %d: both hits answered on the loop", loopHits(home), before+2)
	}
}
