// Command benchcluster compares routing modes and selection policies on a
// five-node demo cluster under one load: a flash crowd on one page plus a
// Zipf background. For each configuration it starts a fresh cluster (edge
// demo), runs the same open-loop load through every node, scrapes every
// node's metrics and the origin's counts, and prints one row.
//
// With -trace it measures the cluster against its limits instead: a real
// trace replayed through 3 and 5 nodes in the default mode, the same nodes
// with routing off (independent caches: the floor), and one node with the
// combined byte budget (the ideal).
//
//	go run ./scripts/benchcluster [-rate 1200] [-duration 10s] [-nodes 5]
//	go run ./scripts/benchcluster -trace ../shared/traces/cache/web07.trace.xz -format int32be -cache-size 64MiB
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/demosite"
	"github.com/edgecache/edge/internal/demoproc"
	"github.com/edgecache/edge/internal/promtext"
	"github.com/edgecache/edge/load"
	"github.com/edgecache/edge/trace"
)

func main() {
	rate := flag.Float64("rate", 1200, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "load duration per configuration")
	nodes := flag.Int("nodes", 5, "edge nodes")
	hot := flag.Float64("hot-share", 0.3, "share of requests for the flash-crowd page")
	zipfS := flag.Float64("zipf", 0.8, "Zipf exponent of the background")
	pages := flag.Int("pages", 20000, "background pages")
	bin := flag.String("edge", "bin/edge", "edge binary")
	tracePath := flag.String("trace", "", "replay this trace (keys become /p/{key}) against cluster, independent and single-node configurations")
	format := flag.String("format", "int32be", "trace format")
	limit := flag.Int("trace-limit", 30000, "requests of the trace to replay")
	cacheSize := flag.String("cache-size", "16MiB", "per-node cache for -trace")
	traceNodes := flag.String("trace-nodes", "3,5", "for -trace: the cluster sizes compared, comma-separated")
	acceptEncoding := flag.String("accept-encoding", "", "every request's Accept-Encoding (browser: what Chromium and Firefox send; empty: none)")
	objSize := flag.Int("object-size", 8192, "for -trace: every key is /size/{this}?k={key} (0: /p/{key} with the demo's size mix, up to 2 MiB)")
	flag.Parse()
	if *tracePath != "" {
		if *acceptEncoding == "browser" {
			*acceptEncoding = load.BrowserAcceptEncoding
		}
		var sizes []int
		for _, f := range strings.Split(*traceNodes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "-trace-nodes: %q is not a node count\n", f)
				os.Exit(2)
			}
			sizes = append(sizes, n)
		}
		if err := traceMode(*bin, *tracePath, *format, *limit, *cacheSize, *rate, *objSize, sizes, *acceptEncoding); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	configs := []struct{ name, args string }{
		{"hybrid+fna", "--routing-mode hybrid --selection fna"},
		{"hybrid+fno", "--routing-mode hybrid --selection fno"},
		{"tree+fna", "--routing-mode tree --selection fna"},
		{"ring+fna", "--routing-mode ring --selection fna"},
		{"none", "--routing-mode none --selection off"},
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(os.Stdout, "%d nodes, %.0f req/s for %s: %.0f%% to /p/0 (flash crowd), the rest Zipf(%.1f) over %d pages, entering every node in turn\n",
		*nodes, *rate, *duration, 100**hot, *zipfS, *pages)
	fmt.Fprintln(tw, "config\tbusiest/mean\torigin /p/0\torigin total\toffload\tp50 ms\tp99 ms\terrors\tprobes/req\tprobe hit rate\t")
	for _, cfg := range configs {
		row, err := run(*bin, *nodes, cfg.args, *rate, *duration, *hot, *zipfS, *pages)
		if err != nil {
			fmt.Fprintln(os.Stderr, cfg.name+":", err)
			os.Exit(1)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%d\t%.1f%%\t%.2f\t%.2f\t%d\t%.3f\t%.1f%%\t\n", cfg.name, row.busiest, row.originHot, row.originTotal,
			100*row.offload, row.p50, row.p99, row.errors, row.probesPerReq, 100*row.probeHit)
		fmt.Fprintf(os.Stderr, "%s done\n", cfg.name)
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type result struct {
	busiest, offload, p50, p99, probesPerReq, probeHit float64
	originHot, originTotal                             int
	originBytes                                        int64
	errors                                             int64
}

func run(bin string, n int, serveArgs string, rate float64, d time.Duration, hot, zipfS float64, pages int) (result, error) {
	z := load.NewZipf(zipfS, pages)
	path := func(i int, rng *rand.Rand) string {
		if rng.Float64() < hot {
			return "/p/0"
		}
		return "/p/" + strconv.Itoa(1+z.Sample(rng))
	}
	r, _, err := runCluster(bin, n, serveArgs, rate, d, path, "")
	return r, err
}

// runCluster starts a fresh demo cluster of n nodes, sends the load, and
// measures it (also returning the load's summary).
func runCluster(bin string, n int, serveArgs string, rate float64, d time.Duration, path func(int, *rand.Rand) string, acceptEncoding string) (result, load.Summary, error) {
	var r result
	var s load.Summary
	// Every configuration starts cold: no disk tier carried over from the last.
	demo, err := demoproc.Start(bin, n, serveArgs)
	if err != nil {
		return r, s, err
	}
	defer demo.Stop()
	targets, admins := demo.Publics(), demo.Admins()
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range admins {
		for !ready(a, n) {
			if time.Now().After(deadline) {
				return r, s, fmt.Errorf("cluster not ready")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	s = load.Run(context.Background(), load.Config{
		Targets: targets, Rate: rate, Duration: d, MaxInflight: 4000, Timeout: 10 * time.Second, Path: path,
		AcceptEncoding: acceptEncoding,
		Seed:           20261207, // every configuration gets the same requests
	})
	var loads []float64
	var probes, probeHits float64
	for _, a := range admins {
		m := scrape(a)
		total := 0.0
		for k, v := range m {
			if strings.HasPrefix(k, "edge_requests_total{") {
				total += v
			}
			if strings.HasPrefix(k, "edge_peer_probes_total{") {
				probes += v
				if strings.Contains(k, `outcome="hit"`) {
					probeHits += v
				}
			}
		}
		loads = append(loads, total)
	}
	mean, mx := 0.0, 0.0
	for _, l := range loads {
		mean += l
		mx = max(mx, l)
	}
	mean /= float64(len(loads))
	r.busiest = mx / mean
	r.originHot, r.originTotal, r.originBytes = originCounts("http://127.0.0.1:8090/_stats?path=/p/0", "/p/0")
	r.offload = 1 - float64(r.originTotal)/float64(s.Requests)
	r.p50, r.p99, r.errors = s.P50ms, s.P99ms, s.Errors
	r.probesPerReq = probes / float64(s.Requests)
	if probes > 0 {
		r.probeHit = probeHits / probes
	}
	return r, s, nil
}

func ready(admin string, n int) bool {
	m := scrape(admin)
	if n == 1 {
		return len(m) > 0
	}
	return m["edge_view_members"] == float64(n)
}

func scrape(admin string) map[string]float64 {
	m, err := promtext.Scrape(context.Background(), "http://"+admin+"/metrics")
	if err != nil {
		return map[string]float64{}
	}
	return m
}

func originCounts(url, hot string) (int, int, int64) {
	resp, err := http.Get(url)
	if err != nil {
		return -1, -1, -1
	}
	defer resp.Body.Close()
	var st struct {
		Total int            `json:"total"`
		Paths map[string]int `json:"paths"`
		Bytes int64          `json:"bytes_sent"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st.Paths[hot], st.Total, st.Bytes
}

// traceMode replays a trace through the cluster, the same nodes without
// routing, and one node with their combined budget.
func traceMode(bin, path, format string, limit int, cacheSize string, rate float64, objSize int, sizes []int, acceptEncoding string) error {
	f, err := trace.ParseFormat(format)
	if err != nil {
		return err
	}
	reqs, err := trace.ReadAll(path, f, limit)
	if err != nil {
		return err
	}
	per, err := config.ParseSize(cacheSize)
	if err != nil {
		return fmt.Errorf("-cache-size: %w", err)
	}
	d := time.Duration(float64(len(reqs)) / rate * float64(time.Second))
	objects := "pages /p/{key} with the demo's size mix"
	if objSize > 0 {
		objects = fmt.Sprintf("objects of %d bytes", objSize)
	}
	fmt.Printf("trace %s: %d requests at %.0f req/s (%s), %s; per-node cache %s; %s\n",
		path, len(reqs), rate, d.Round(time.Second), objects, cacheSize, time.Now().UTC().Format("2006-01-02"))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tnodes\tcache/node\torigin requests\tvs ideal\tobject hit\tbyte hit\tp50 ms\tp99 ms\tbusiest/mean\terrors\tdropped\t")
	for _, n := range sizes {
		ideal := -1
		for _, c := range []struct {
			name  string
			nodes int
			size  int64
			args  string
		}{
			{"single (ideal)", 1, per * int64(n), "--routing-mode none --selection off"},
			{"cluster (default)", n, per, ""},
			{"independent (floor)", n, per, "--routing-mode none --selection off"},
		} {
			var sent int64
			p := func(i int, _ *rand.Rand) string {
				id := reqs[i%len(reqs)].ID % 1_000_000_000
				if objSize > 0 {
					sent += int64(objSize)
					return "/size/" + strconv.Itoa(objSize) + "?k=" + strconv.FormatUint(id, 10)
				}
				sent += int64(demosite.PageSize(id))
				return "/p/" + strconv.FormatUint(id, 10)
			}
			args := strings.TrimSpace(c.args + " --cache-size " + strconv.FormatInt(c.size, 10))
			r, s, err := runCluster(bin, c.nodes, args, rate, d, p, acceptEncoding)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if ideal < 0 {
				ideal = r.originTotal
			}
			fmt.Fprintf(tw, "%s\t%d\t%d MiB\t%d\t%+.1f%%\t%.4f\t%.4f\t%.2f\t%.2f\t%.2f\t%d\t%d\t\n", c.name, c.nodes, c.size>>20, r.originTotal,
				100*float64(r.originTotal-ideal)/float64(max(ideal, 1)), 1-float64(r.originTotal)/float64(max(s.Requests, 1)),
				1-float64(r.originBytes)/float64(max(sent, 1)), r.p50, r.p99, r.busiest, r.errors, s.Dropped)
			fmt.Fprintf(os.Stderr, "%s (%d nodes) done\n", c.name, c.nodes)
		}
	}
	return tw.Flush()
}
