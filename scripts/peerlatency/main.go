// Command peerlatency measures what it costs a client when the page it asks
// for lives on a peer rather than on the node it entered: a 3-node demo
// cluster, pages of 4 KiB filled at their home, then for each page one
// request through a node that does not hold it (answered by the home over
// the peer protocol) and one through the home (a local hit). It prints
// both latency distributions and the difference of their medians.
//
//	go run ./scripts/peerlatency [-pages 400] [-profile DIR]
//
// With -profile, each node's CPU profile over the measured requests is
// written to DIR/edge-N.pprof.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgecache/edge/internal/demoproc"
	"github.com/edgecache/edge/internal/promtext"
)

func main() {
	pages := flag.Int("pages", 400, "pages measured")
	bin := flag.String("edge", "bin/edge", "edge binary")
	profileDir := flag.String("profile", "", "write each node's CPU profile over the measured requests to this directory")
	profileSeconds := flag.Int("profile-seconds", 10, "length of the CPU profiles")
	traceNodes := flag.Bool("trace", false, "with -profile, take each node's execution trace instead of its CPU profile (edge-N.trace)")
	flag.Parse()
	const adminToken = "edge-demo-admin-token" // edge demo's default
	if *traceNodes && *profileDir == "" {
		fmt.Fprintln(os.Stderr, "-trace writes into the -profile directory: give -profile DIR")
		os.Exit(2)
	}
	if *profileDir != "" {
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	demo, err := demoproc.Start(*bin, 3, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer demo.Stop()
	ids := []string{"edge-1", "edge-2", "edge-3"}
	pub := map[string]string{"edge-1": "127.0.0.1:8080", "edge-2": "127.0.0.1:8081", "edge-3": "127.0.0.1:8082"}
	time.Sleep(3 * time.Second) // views converge
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var headerWait []time.Duration // peer answers: until the response header, of the whole
	var lastHeader time.Duration
	get := func(addr, path string, field ...string) (time.Duration, string) {
		t := time.Now()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return 0, ""
		}
		if len(field) == 2 {
			req.Header.Set(field[0], field[1])
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		th := time.Since(t)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lastHeader = th
		return time.Since(t), resp.Header.Get("Cache-Status")
	}
	// Warm the connections.
	for _, id := range ids {
		get(pub[id], "/size/10?warm="+id)
	}
	var profiles sync.WaitGroup
	if *profileDir != "" {
		for i, admin := range demo.Admins() {
			profiles.Go(func() {
				kind, file := "profile", fmt.Sprintf("%s/edge-%d.pprof", *profileDir, i+1)
				if *traceNodes {
					kind, file = "trace", fmt.Sprintf("%s/edge-%d.trace", *profileDir, i+1)
				}
				if err := cpuProfile(admin, adminToken, kind, *profileSeconds, file); err != nil {
					fmt.Fprintln(os.Stderr, "profile:", err)
				}
			})
		}
	}
	var local, peer, viaNetHTTP []time.Duration
	for i := range *pages {
		path := fmt.Sprintf("/size/4096?k=%d", i)
		home := homeOf("http://127.0.0.1:8080"+path, adminToken)
		if home == "" {
			demo.Stop() // os.Exit skips the deferred Stop: the demo's nodes would outlive the run
			fmt.Fprintln(os.Stderr, "no route explanation")
			os.Exit(1)
		}
		get(pub[home], path) // filled at its home
		other := ids[(slices.Index(ids, home)+1)%3]
		d, status := get(pub[other], path) // first request there: the home answers
		if strings.Contains(status, "fwd=") {
			peer = append(peer, d)
			headerWait = append(headerWait, lastHeader)
		}
		d, status = get(pub[home], path)
		if strings.HasSuffix(status, "; hit") {
			local = append(local, d)
		}
		// The same hit with a conditional that does not match: the
		// public read loop hands it to net/http and the full handler,
		// which is what a peer hit costs the home without its own loop.
		d, status = get(pub[home], path, "If-None-Match", `"other"`)
		if strings.HasSuffix(status, "; hit") {
			viaNetHTTP = append(viaNetHTTP, d)
		}
	}
	profiles.Wait()
	p := func(ds []time.Duration, q float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	fmt.Printf("3 nodes, 4 KiB pages, %s\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("local hit at the home: %d requests, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms\n", len(local), p(local, .5), p(local, .9), p(local, .99))
	fmt.Printf("the same hit via net/http: %d requests, p50 %.3f ms\n", len(viaNetHTTP), p(viaNetHTTP, .5))
	fmt.Printf("answered by a peer:    %d requests, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms\n", len(peer), p(peer, .5), p(peer, .9), p(peer, .99))
	fmt.Printf("  of which until its header: p50 %.3f ms\n", p(headerWait, .5))
	var loop, served float64
	for _, admin := range demo.Admins() {
		loop += metric(admin, "edge_peer_loop_hits_total")
		served += metric(admin, "edge_peer_requests_total")
	}
	fmt.Printf("peer requests served: %.0f, of which on the cluster listener's read loop: %.0f\n", served, loop)
	fmt.Printf("peer p50 − local p50 = %.3f ms (target ≤ 0.5 ms)\n", p(peer, .5)-p(local, .5))
}

// metric sums a counter's series (all labels) on a node's /metrics.
func metric(admin, name string) float64 {
	m, err := promtext.Scrape(context.Background(), "http://"+admin+"/metrics")
	if err != nil {
		return 0
	}
	var sum float64
	for series, v := range m {
		if series == name || strings.HasPrefix(series, name+"{") {
			sum += v
		}
	}
	return sum
}

// homeOf asks node 1's route explorer for a URL's home (it needs the
// admin token: the explorer tells which URLs were asked).
func homeOf(u, token string) string {
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9180/status/route.json?url="+url.QueryEscape(u), nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var r struct {
		Route struct {
			Home string `json:"home"`
		} `json:"route"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return r.Route.Home
}

// cpuProfile saves the CPU profile (kind "profile") or execution trace
// (kind "trace") of the node with the given admin
// address over the next seconds to path.
func cpuProfile(admin, token, kind string, seconds int, path string) error {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", admin, kind, seconds), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", admin, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
