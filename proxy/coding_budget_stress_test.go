package proxy

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/coding"
)

// Many clients over HTTP/1.1 and HTTP/2, every coding path, ranges,
// conditionals, HEAD and clients that leave mid-body; afterwards nothing
// may stay charged, and every whole 200 must decode to the origin's body.
func TestCodingBudgetBalancesUnderStress(t *testing.T) {
	if testing.Short() {
		t.Skip("1,200 requests over HTTP/1.1 and HTTP/2")
	}
	// Under the race detector (make test) a quarter of the clients, for
	// every path still; the full load runs without it.
	// It also scales every body and limit down by four (which bodies
	// outgrow max_object_bytes, the decoded-form limit), the buffer budget
	// less (below), and makes stored brotli forms at level 1, whose coder
	// reservation (4 MiB, against 13 MiB at level 5: coding/budget.go)
	// fits it, so that br forms are still made: coding 30 MiB bodies under
	// the race detector took 145 s of make test's loaded run.
	clients, perClient, scale := 48, 25, 1
	if raceDetector {
		clients, perClient, scale = 16, 12, 4
	}
	rnd := make([]byte, 300<<10/scale)
	_, _ = cryptorand.Read(rnd)
	bodies := map[string][]byte{
		"c": []byte(page(200 << 10 / scale)),
		"g": []byte(page(3 << 20 / scale)),
		"G": []byte(page(12 << 20 / scale)),
		"b": []byte(page(1 << 20 / scale)),
		"u": []byte(page(500 << 10 / scale)),
		"L": []byte(page(10 << 20 / scale)),
		"r": rnd,
		"z": []byte(page(2 << 20 / scale)),
	}
	enc := map[string]string{}
	for k, v := range bodies {
		switch k {
		case "g", "G":
			enc[k] = gzipOf(v)
		case "b":
			enc[k] = brotliOf(v)
		}
	}
	origin := func(w http.ResponseWriter, r *http.Request) {
		kind, n, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		body, ok := bodies[kind]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html")
		h.Set("ETag", `"`+kind+n+`"`)
		h.Set("Cache-Control", "max-age=600")
		if kind == "b" || kind == "u" {
			h.Set("Cache-Control", "no-store")
		}
		if r.Header.Get("If-None-Match") == `"`+kind+n+`"` {
			w.WriteHeader(304)
			return
		}
		out := body
		if e, ok := enc[kind]; ok {
			h.Set("Content-Encoding", map[string]string{"g": "gzip", "G": "gzip", "b": "br"}[kind])
			out = []byte(e)
		}
		if kind == "z" {
			// chunked, slow
			for i := 0; i < len(out); i += 64 << 10 {
				_, _ = w.Write(out[i:min(i+64<<10, len(out))])
				w.(http.Flusher).Flush()
				time.Sleep(2 * time.Millisecond)
			}
			return
		}
		h.Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = w.Write(out)
	}
	osrv := httptest.NewServer(http.HandlerFunc(origin))
	defer osrv.Close()
	cfg := DefaultConfig()
	withCompression(&cfg)
	stream, _ := coding.NewStreamCodec(coding.Levels{Br: 4, Zstd: 3, Gzip: 6})
	cfg.Compression.Stream = stream
	cfg.Compression.MaxDecodedBytes /= int64(scale)
	cfg.MaxObjectBytes /= int64(scale)
	cfg.MaxBufferedBytes = 40 << 20
	if raceDetector {
		// The coders' reservations do not shrink with the bodies: 16 MiB
		// (not 10) leaves the budget as tight as the full run's, where
		// forms are made and fills are still refused.
		cfg.MaxBufferedBytes = 16 << 20
	}
	if raceDetector {
		cfg.Compression.Codec, _ = coding.NewCodec(coding.Levels{Br: 1, Zstd: coding.DefaultLevels.Zstd, Gzip: coding.DefaultLevels.Gzip})
	}
	store := NewStore(64<<20/int64(scale), 8)
	h := New(cfg, store, &originFetcher{base: osrv.URL, client: &http.Client{Transport: &http.Transport{}}}, NewMetrics(prometheus.NewRegistry(), store), nil)

	srv1 := httptest.NewServer(h)
	defer srv1.Close()
	srv2 := httptest.NewUnstartedServer(h)
	srv2.EnableHTTP2 = true
	srv2.StartTLS()
	defer srv2.Close()
	c1 := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxConnsPerHost: 0}}
	c2 := srv2.Client()
	c2.Transport.(*http.Transport).DisableCompression = true
	c2.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	c2.Transport.(*http.Transport).ForceAttemptHTTP2 = true

	kinds := []string{"c", "g", "G", "b", "u", "L", "r", "z"}
	aes := []string{"", "br", "gzip", "zstd", "identity", "br, gzip", "gzip;q=0, identity"}
	var mu sync.Mutex
	bad := 0
	codes := map[string]int{}
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range perClient {
				kind := kinds[rng.Intn(len(kinds))]
				n := rng.Intn(3)
				path := fmt.Sprintf("/%s/%d", kind, n)
				method := "GET"
				if rng.Intn(8) == 0 {
					method = "HEAD"
				}
				base, client := srv1.URL, c1
				if rng.Intn(2) == 0 {
					base, client = srv2.URL, c2
				}
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, method, base+path, nil)
				ae := aes[rng.Intn(len(aes))]
				if ae != "" {
					req.Header.Set("Accept-Encoding", ae)
				}
				special := rng.Intn(6)
				switch special {
				case 0:
					req.Header.Set("Range", "bytes=10-2000")
				case 1:
					tag := `"` + kind + strconv.Itoa(n)
					if ae == "br" {
						tag += "-br"
					}
					req.Header.Set("If-None-Match", tag+`"`)
				}
				leave := rng.Intn(5) == 0
				resp, err := client.Do(req)
				if err != nil {
					cancel()
					continue
				}
				var got []byte
				if leave {
					buf := make([]byte, 1000)
					_, _ = io.ReadFull(resp.Body, buf)
					cancel()
				} else {
					got, err = io.ReadAll(resp.Body)
				}
				resp.Body.Close()
				cancel()
				mu.Lock()
				codes[fmt.Sprintf("%s %d %s", kind, resp.StatusCode, resp.Header.Get("Content-Encoding"))]++
				mu.Unlock()
				if leave || err != nil || method == "HEAD" || resp.StatusCode != 200 || special == 0 {
					continue
				}
				ce, ok := coding.OfBody(resp.Header["Content-Encoding"])
				if !ok {
					t.Errorf("%s AE %q: Content-Encoding %q", path, ae, resp.Header["Content-Encoding"])
					continue
				}
				if ce != coding.Identity && !strings.Contains(ae, ce.String()) {
					t.Errorf("%s AE %q: got coding %s it did not accept", path, ae, ce)
				}
				codec, _ := coding.NewCodec(coding.DefaultLevels)
				dec, derr := codec.Decode(ce, got, 64<<20)
				if derr != nil || !bytes.Equal(dec, bodies[kind]) {
					mu.Lock()
					bad++
					mu.Unlock()
					t.Errorf("%s AE %q: body (%s, %d bytes) differs: %v", path, ae, ce, len(got), derr)
				}
				if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(got)) {
					t.Errorf("%s AE %q: Content-Length %s for %d bytes", path, ae, cl, len(got))
				}
				if !strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Accept-Encoding") {
					t.Errorf("%s AE %q: no Vary: Accept-Encoding", path, ae)
				}
			}
		}()
	}
	wg.Wait()
	c1.CloseIdleConnections()
	c2.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for h.Buffered() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		h.Wait()
	}
	t.Logf("outcomes: %v", codes)
	for _, ce := range []coding.Encoding{coding.Br, coding.Gzip} {
		if n := testutil.ToFloat64(h.metrics.compression.in[opEncode][ce]); n == 0 {
			t.Errorf("no stored %s form was made: the run does not test the forms' charges", ce)
		}
	}
	if b := h.Buffered(); b != 0 {
		t.Errorf("Buffered %d after every request ended", b)
	}
}
