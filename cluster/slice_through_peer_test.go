package cluster

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
)

// TestPeerNeverRelaysAPersonalSliceUnderThePublicHeader: the home holds a
// sliced object's manifest (public). Alice, with a token, asks the ingress
// for a slice neither holds. When slices were fetched with the reader's
// credentials, the home got her private copy, did not store it, but
// answered the ingress under the manifest's header (public, max-age); the
// ingress stored her bytes under the slice key and Bob, anonymous, got
// them. Slices are now fetched as the shared object's pieces, without
// credentials; one that may not be shared is never sent under the
// manifest's header.
func TestPeerNeverRelaysAPersonalSliceUnderThePublicHeader(t *testing.T) {
	const size = 192 << 10
	lm := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	pc := proxy.DefaultConfig()
	pc.SliceBytes = 64 << 10
	pc.MaxObjectBytes = 64 << 10
	_, homePH, _, plain, in := peerHitHome(t, pc, func(w http.ResponseWriter, r *http.Request) {
		body := bytes.Repeat([]byte("generic."), size/8)
		cc := "public, max-age=3600"
		if r.Header.Get("Authorization") != "" {
			body = bytes.Repeat([]byte("ALICE-SECRET."), size/13+1)[:size]
			cc = "private, max-age=60"
		}
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("Content-Type", "application/pdf")
		http.ServeContent(w, r, "", lm, bytes.NewReader(body))
	})
	store := proxy.NewStore(4<<20, 4)
	ingress := proxy.New(pc, store, viaPeer{in, plain}, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	srv := httptest.NewServer(ingress)
	t.Cleanup(srv.Close)
	get := func(rng string, hdr ...string) (int, string, http.Header) {
		req, _ := http.NewRequest("GET", srv.URL+"/doc.pdf", nil)
		req.Host = "h"
		req.Header.Set("Range", rng)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, _ := get("bytes=0-99")
	if code != 206 || !strings.HasPrefix(body, "generic.") {
		t.Fatalf("anonymous first read: %d %q", code, body[:min(40, len(body))])
	}
	ingress.Wait()
	homePH.Wait()
	rng := "bytes=" + strconv.Itoa(64<<10) + "-" + strconv.Itoa(64<<10+99)
	code, body, hdr := get(rng, "Authorization", "Bearer alice")
	t.Logf("alice: %d %q cc %q status %q", code, body[:min(26, len(body))], hdr.Get("Cache-Control"), hdr.Get("Cache-Status"))
	ingress.Wait()
	homePH.Wait()
	code, body, hdr = get(rng)
	t.Logf("bob: %d %q status %q", code, body[:min(26, len(body))], hdr.Get("Cache-Status"))
	if strings.Contains(body, "ALICE") {
		t.Fatalf("bob (anonymous) got alice's private bytes through the cluster: %d %q Cache-Status %q", code, body[:min(40, len(body))], hdr.Get("Cache-Status"))
	}
}
