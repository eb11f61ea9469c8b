// Command tworegion runs the two-region scenario of docs/cluster.md: six
// `edge serve` processes on loopback in two regions of three, every link
// between two nodes a relay (lab/netrelay) that adds 0.25 ms each way
// inside a region and 10 ms each way between regions (round trips of
// 0.5 ms and 20 ms), and the demo origin 60 ms away from both. Clients in
// both regions send their requests to their own region's nodes.
//
// For each configuration (routing mode, selection policy and, optionally,
// per-region homes) and each indicator advertisement interval it starts
// everything fresh, replays the same workload, and prints one row: latency
// of the requests the ingress did not answer from its own store (misses),
// origin requests, probes per request and their hit rate, the bytes that
// crossed between the regions and the indicator bytes served.
//
//	go run ./scripts/tworegion [-setting today|continents] [-workload zipf|moving|crowd|trace|lagged]
//	    [-rate 300] [-duration 20s] [-configs hybrid/fna,hybrid/fna/region,…] [-advertise 10s,1s]
//	    [-json f] [-plot f.png]
//
// -setting continents is two continents: 80 ms between the regions, the
// origin 250 ms away over https (-far-origin: every round trip to it costs
// the 250 ms, a new connection's TLS handshake included), 4 MiB per node
// (512 pages of 8 KiB, well below the working set); flags given explicitly
// still win.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgecache/edge/internal/e2e"
	"github.com/edgecache/edge/internal/promtext"
	"github.com/edgecache/edge/lab/netrelay"
	"github.com/edgecache/edge/load"
	"github.com/edgecache/edge/trace"
)

const secret = "two-region-lab-secret"

// errNoView is a start that did not converge: some node does not see all six.
var errNoView = errors.New("views did not converge in 30 s")

type node struct {
	id, region, pub, adm, clus string
	cmd                        *exec.Cmd
	log                        lockedBuffer // stderr (warnings and errors only)
}

// lockedBuffer is a process's stderr, written by exec's copying goroutine
// and read when the node does not converge.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func main() {
	workload := flag.String("workload", "zipf", "zipf (Zipf background plus a flash crowd on one page), moving (Zipf plus a flash crowd on a new page every 5 s that starts in eu and reaches us 2.5 s later), crowd (half Zipf background, half a crowd over a new set of 200 pages every 5 s, whose requests us repeats -lag after eu), trace, or lagged (the trace in eu, and in us the same trace -lag behind)")
	setting := flag.String("setting", "today", "today (the flags' defaults) or continents (80 ms between regions, origin +250 ms, 4 MiB per node)")
	lag := flag.Duration("lag", 3*time.Second, "lagged and crowd: how far us trails eu")
	rate := flag.Float64("rate", 300, "requests per second, over all clients")
	duration := flag.Duration("duration", 20*time.Second, "measured load per configuration")
	warmup := flag.Duration("warmup", 0, "load before the measurement (same workload, continued), so that misses are not mostly first requests")
	tracePath := flag.String("trace", "../shared/traces/cache/web07.trace.xz", "trace for -workload trace")
	format := flag.String("format", "int32be", "trace format")
	cacheSize := flag.String("cache-size", "16MiB", "per-node cache")
	interDelay := flag.Duration("inter", 10*time.Millisecond, "one-way delay between the regions")
	intraDelay := flag.Duration("intra", 250*time.Microsecond, "one-way delay inside a region")
	originLatency := flag.Duration("origin-latency", 60*time.Millisecond, "the origin's added latency")
	farFlag := flag.Bool("far-origin", false, "serve the origin over https behind a relay that adds -origin-latency to every round trip (a distant origin), instead of a pause added to each response of a plain-HTTP origin (default with -setting continents)")
	configsFlag := flag.String("configs", "hybrid/fna,hybrid/fno,hybrid/off,ring/fna,tree/fna", "routing-mode/selection[/region][/nofirsthop]: /region gives each page a home per region (routing.home: region), /nofirsthop asks the climb's first hop only after the probes (cluster.first_hop_with_probes: false; /firsthop, the default, beside them)")
	advertiseFlag := flag.String("advertise", "", "indicator advertisement intervals to run each configuration at (indicators.advertise_max, e.g. 10s,3s,1s; empty: the default)")
	jsonOut := flag.String("json", "", "also write the rows as JSON here")
	plotOut := flag.String("plot", "", "draw miss latency per configuration into this PNG")
	extra := flag.String("serve-args", "", "extra edge serve arguments for every node")
	bin := flag.String("edge", "bin/edge", "edge binary")
	replot := flag.String("replot", "", "only draw -plot from the rows of this -json file (no run)")
	flag.Parse()
	var settingEnv []string
	switch *setting {
	case "today":
	case "continents":
		// A node this small takes objects up to 1 MiB (the default, 8 MiB,
		// is refused above cache.max_bytes without a disk tier).
		settingEnv = append(settingEnv, "EDGE_CACHE_MAX_OBJECT_BYTES=1MiB")
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["inter"] {
			*interDelay = 40 * time.Millisecond
		}
		if !set["origin-latency"] {
			*originLatency = 250 * time.Millisecond
		}
		if !set["far-origin"] {
			*farFlag = true
		}
		if !set["cache-size"] {
			*cacheSize = "4MiB" // the smallest a node takes with 1 MiB slices: 512 pages of 8 KiB
		}
	default:
		fail(fmt.Errorf("-setting %q: want today or continents", *setting))
	}
	if *replot != "" {
		var saved struct{ Rows []row }
		b, err := os.ReadFile(*replot)
		if err == nil {
			err = json.Unmarshal(b, &saved)
		}
		if err == nil {
			err = plotRows(*plotOut, *workload, saved.Rows)
		}
		if err != nil {
			fail(err)
		}
		return
	}

	var path func(i int, rng *rand.Rand) string
	desc := ""
	readTrace := func() []trace.Request {
		f, err := trace.ParseFormat(*format)
		if err != nil {
			fail(err)
		}
		reqs, err := trace.ReadAll(*tracePath, f, int(*rate*(duration.Seconds()+warmup.Seconds())))
		if err != nil {
			fail(err)
		}
		return reqs
	}
	// lagged maps the i-th request to its region's own request count, us's
	// lag behind eu's: requests go round-robin over eu-1..3, us-1..3, so
	// with lagged and crowd us asks for what eu asked lag earlier (a crowd
	// crossing the ocean). Negative: us, before the lag is reached.
	behind := int(*rate / 2 * lag.Seconds())
	lagged := func(i int) int {
		j := i/6*3 + i%3
		if i%6 >= 3 {
			j -= behind
		}
		return j
	}
	switch *workload {
	case "zipf":
		z := load.NewZipf(0.8, 20000)
		path = func(i int, rng *rand.Rand) string {
			if rng.Float64() < 0.2 {
				return "/size/8192?k=flash"
			}
			return "/size/8192?k=" + strconv.Itoa(z.Sample(rng))
		}
		desc = "Zipf(0.8) over 20,000 pages of 8 KiB, 20 % to one flash-crowd page"
	case "moving":
		z := load.NewZipf(0.8, 20000)
		window := int(*rate * 5) // a new crowd page every 5 s
		path = func(i int, rng *rand.Rand) string {
			k, at := i/window, i%window
			eu := i%6 < 3 // requests go round-robin over eu-1..3, us-1..3
			if rng.Float64() < 0.2 && (eu || at >= window/2) {
				return "/size/8192?k=crowd-" + strconv.Itoa(k)
			}
			return "/size/8192?k=" + strconv.Itoa(z.Sample(rng))
		}
		desc = "Zipf(0.8) over 20,000 pages of 8 KiB; 20 % to a crowd page that changes every 5 s, asked in eu first and in us from 2.5 s on"
	case "crowd":
		// A crowd that crosses the ocean over many pages, where moving
		// has one page at a time (which leaves the other region's copies
		// almost nothing to save: docs/cluster.md). The shape was fixed
		// before its first run: half of each region's requests go to a
		// Zipf background of its own, half to the crowd, a set of 200
		// pages (Zipf(0.8) within it) replaced every 5 s; us repeats
		// eu's crowd requests lag later, the same pages in the same
		// order, as lagged does with a trace.
		background := load.NewZipf(0.8, 20000)
		inSet := load.NewZipf(0.8, 200)
		window := int(*rate / 2 * 5)
		crowdAt := func(j int) (string, bool) {
			if j < 0 {
				return "", false // us, before the lag is reached: background
			}
			r := rand.New(rand.NewPCG(uint64(j), 0x63726f7764)) // the j-th crowd draw, the same in both regions
			if r.Float64() >= 0.5 {
				return "", false
			}
			return "/size/8192?k=crowd-" + strconv.Itoa(j/window) + "-" + strconv.Itoa(inSet.Sample(r)), true
		}
		path = func(i int, rng *rand.Rand) string {
			if p, ok := crowdAt(lagged(i)); ok {
				return p
			}
			return "/size/8192?k=" + strconv.Itoa(background.Sample(rng))
		}
		desc = fmt.Sprintf("half Zipf(0.8) over 20,000 pages of 8 KiB, half a crowd over a new set of 200 pages every 5 s, repeated in us %v after eu", *lag)
	case "trace":
		reqs := readTrace()
		path = func(i int, _ *rand.Rand) string {
			return "/size/8192?k=" + url.QueryEscape(reqs[i%len(reqs)].Key)
		}
		desc = fmt.Sprintf("%s replayed (keys as 8 KiB pages)", *tracePath)
	case "lagged":
		reqs := readTrace()
		// The eu half walks the trace, the us half walks it lag behind.
		path = func(i int, _ *rand.Rand) string {
			j := lagged(i)
			if j < 0 {
				j += len(reqs) // before the lag is reached, us replays the trace's end
			}
			return "/size/8192?k=" + url.QueryEscape(reqs[j%len(reqs)].Key)
		}
		desc = fmt.Sprintf("%s replayed in eu and %v later in us (keys as 8 KiB pages)", *tracePath, *lag)
	default:
		fail(fmt.Errorf("workload %q: want zipf, moving, crowd, trace or lagged", *workload))
	}
	var far *farOrigin
	originDesc := fmt.Sprintf("origin +%v", *originLatency)
	if *farFlag {
		var err error
		if far, err = newFarOrigin(); err != nil {
			fail(err)
		}
		defer far.Close()
		originDesc = fmt.Sprintf("origin over https %v away (each round trip)", *originLatency)
	}
	fmt.Printf("two regions of 3 nodes, RTT %.1f ms inside and %.0f ms between, %s; %s; %.0f req/s, %v warm-up then %v measured; cache %s per node; %s\n",
		2*float64(*intraDelay)/1e6, 2*float64(*interDelay)/1e6, originDesc, desc, *rate, *warmup, *duration, *cacheSize, time.Now().UTC().Format("2006-01-02"))
	advertise := []string{""}
	if *advertiseFlag != "" {
		advertise = strings.Split(*advertiseFlag, ",")
		for _, a := range advertise {
			if _, err := time.ParseDuration(a); err != nil {
				fail(fmt.Errorf("-advertise %q: %w", a, err))
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tadvertise\tmisses\tmiss mean ms\tmiss p99 ms\tnot-hit mean ms\tall p50 ms\torigin requests\tprobes/req\tprobe hit rate\tcross-region KB\tindicator KB\terrors\t")
	var rows []row
	for _, adv := range advertise {
		for _, cfg := range strings.Split(*configsFlag, ",") {
			parts := strings.Split(cfg, "/")
			if len(parts) < 2 {
				fail(fmt.Errorf("config %q: want mode/selection[/region][/nofirsthop]", cfg))
			}
			env := append([]string{}, settingEnv...)
			for _, opt := range parts[2:] {
				switch opt {
				case "region":
					env = append(env, "EDGE_ROUTING_HOME=region")
				case "firsthop", "nofirsthop":
					env = append(env, "EDGE_CLUSTER_FIRST_HOP_WITH_PROBES="+strconv.FormatBool(opt == "firsthop"))
				default:
					fail(fmt.Errorf("config %q: %q is none of region, firsthop, nofirsthop", cfg, opt))
				}
			}
			if adv != "" {
				env = append(env, "EDGE_INDICATORS_ADVERTISE_MAX="+adv)
			}
			r, err := runOne(*bin, parts[0], parts[1], *extra, env, *cacheSize, *interDelay, *intraDelay, *originLatency, far, *rate, *warmup, *duration, path)
			if errors.Is(err, errNoView) {
				// A node's port, free when chosen, can still be taken
				// before the node binds it (by another program choosing
				// below the ephemeral range): start everything afresh once.
				fmt.Fprintf(os.Stderr, "%s: %v; starting again\n", cfg, err)
				r, err = runOne(*bin, parts[0], parts[1], *extra, env, *cacheSize, *interDelay, *intraDelay, *originLatency, far, *rate, *warmup, *duration, path)
			}
			if err != nil {
				fail(fmt.Errorf("%s: %w", cfg, err))
			}
			miss := r.sum.ByResultLatency["miss"]
			rw := row{Config: cfg, Advertise: adv, Misses: miss.Count, MissMeanMs: miss.Mean, MissP99Ms: miss.P99, P50Ms: r.sum.P50ms,
				NotHit: r.sum.NotHit.Count, NotHitMeanMs: r.sum.NotHit.Mean, NotHitP99Ms: r.sum.NotHit.P99,
				Origin: r.origin, CrossKB: float64(r.crossBytes) / 1000,
				IndicatorKB: r.indicatorBytes / 1000, Errors: r.sum.Errors}
			r.probes.fill(&rw, r.sum.Requests)
			rows = append(rows, rw)
			shown := adv
			if shown == "" {
				shown = "default"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.3f\t%.1f%%\t%.0f\t%.0f\t%d\t\n", cfg, shown, rw.Misses, rw.MissMeanMs, rw.MissP99Ms, rw.NotHitMeanMs, rw.P50Ms,
				rw.Origin, rw.ProbesPerReq, 100*rw.ProbeHitRate, rw.CrossKB, rw.IndicatorKB, rw.Errors)
			fmt.Fprintf(os.Stderr, "%s at %s done: %+v\n", cfg, shown, rw)
		}
	}
	if err := tw.Flush(); err != nil {
		fail(err)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"scenario": desc, "origin": originDesc, "far_origin": *farFlag, "date": time.Now().UTC().Format("2006-01-02"), "rows": rows}, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
	if *plotOut != "" {
		if err := plotRows(*plotOut, *workload, rows); err != nil {
			fail(err)
		}
	}
}

// row is one configuration's outcome at one advertisement interval.
type row struct {
	Config     string  `json:"config"`
	Advertise  string  `json:"advertise,omitempty"`
	Misses     int     `json:"misses"`
	MissMeanMs float64 `json:"miss_mean_ms"`
	MissP99Ms  float64 `json:"miss_p99_ms"`
	// NotHit*: every request not answered from the ingress's own store
	// (load.Summary.NotHit), the same population in every configuration;
	// the miss columns leave out the collapsed and the failed.
	NotHit       int     `json:"not_hit"`
	NotHitMeanMs float64 `json:"not_hit_mean_ms"`
	NotHitP99Ms  float64 `json:"not_hit_p99_ms"`
	P50Ms        float64 `json:"p50_ms"`
	Origin       int     `json:"origin_requests"`
	ProbesPerReq float64 `json:"probes_per_request"`
	ProbeHitRate float64 `json:"probe_hit_rate"`
	// Negative-indication probes apart (a subset of the above): per
	// request, the share that hit, and the share of the climbs they raced
	// (cluster.negative_probes beside_climb) that a negative hit won.
	NegProbesPerReq float64 `json:"negative_probes_per_request"`
	NegProbeHitRate float64 `json:"negative_probe_hit_rate"`
	RacesPerReq     float64 `json:"climb_races_per_request"`
	RacesWonByProbe float64 `json:"climb_races_won_by_probe"`
	// The climb's first hop asked beside the probes (/firsthop): per
	// request, and the share that hit.
	FirstHopPerReq  float64 `json:"first_hop_probes_per_request"`
	FirstHopHitRate float64 `json:"first_hop_probe_hit_rate"`
	CrossKB         float64 `json:"cross_region_kb"`
	IndicatorKB     float64 `json:"indicator_kb"`
	Errors          int64   `json:"errors"`
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

type result struct {
	sum            load.Summary
	origin         int
	probes         probeCounts
	crossBytes     int64
	indicatorBytes float64
}

// probeCounts sums the nodes' probe counters.
type probeCounts struct {
	probes, hits, negProbes, negHits, races, racesWon, firstHop, firstHopHits, cancelled float64
}

// add counts one series of a node's metrics if it is a probe or climb
// race counter (edge_peer_probes_total, edge_peer_probe_climb_races_total).
func (c *probeCounts) add(series string, v float64) {
	switch {
	case strings.HasPrefix(series, "edge_peer_probes_total{"):
		hit := strings.Contains(series, `outcome="hit"`)
		c.probes += v
		if hit {
			c.hits += v
		}
		if strings.Contains(series, `outcome="cancelled"`) {
			c.cancelled += v
		}
		if strings.Contains(series, `indication="negative"`) {
			c.negProbes += v
			if hit {
				c.negHits += v
			}
		}
	case strings.HasPrefix(series, "edge_peer_first_hop_probes_total{"):
		c.firstHop += v
		if strings.Contains(series, `outcome="hit"`) {
			c.firstHopHits += v
		}
	case strings.HasPrefix(series, "edge_peer_probe_climb_races_total{"):
		c.races += v
		if strings.Contains(series, `winner="negative_probe"`) {
			c.racesWon += v
		}
	}
}

func (c probeCounts) minus(o probeCounts) probeCounts {
	return probeCounts{c.probes - o.probes, c.hits - o.hits, c.negProbes - o.negProbes, c.negHits - o.negHits, c.races - o.races, c.racesWon - o.racesWon,
		c.firstHop - o.firstHop, c.firstHopHits - o.firstHopHits, c.cancelled - o.cancelled}
}

// fill sets a row's probe figures for a run of n requests.
func (c probeCounts) fill(rw *row, n int64) {
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	rw.ProbesPerReq = ratio(c.probes, float64(n))
	// Of the probes answered: one cancelled (another answer won first,
	// now and then the first hop's) says nothing of the peer.
	rw.ProbeHitRate = ratio(c.hits, c.probes-c.cancelled)
	rw.NegProbesPerReq = ratio(c.negProbes, float64(n))
	rw.NegProbeHitRate = ratio(c.negHits, c.negProbes)
	rw.RacesPerReq = ratio(c.races, float64(n))
	rw.RacesWonByProbe = ratio(c.racesWon, c.races)
	rw.FirstHopPerReq = ratio(c.firstHop, float64(n))
	rw.FirstHopHitRate = ratio(c.firstHopHits, c.firstHop)
}

// freeAddr is a loopback port below the ephemeral range, free for TCP and
// UDP (a node's cluster port takes both): a port from :0 is an ephemeral
// one, which the thirty relays' own sockets, bound on :0 before the nodes
// start, took often enough that one start in four did not converge.
func freeAddr() string {
	addr, err := e2e.FreeLoopbackAddr()
	if err != nil {
		fail(err)
	}
	return addr
}

func runOne(bin, mode, sel, extra string, env []string, cacheSize string, inter, intra, originLatency time.Duration, far *farOrigin, rate float64, warmup, d time.Duration,
	path func(int, *rand.Rand) string) (result, error) {
	var r result
	originAddr := freeAddr()
	originArgs := []string{"origin", "--listen", originAddr, "--latency", originLatency.String(), "--jitter", "0s"}
	originURL, stats, statsClient := "http://"+originAddr, "http://"+originAddr+"/_stats", http.DefaultClient
	if far != nil {
		originArgs = []string{"origin", "--listen", originAddr, "--latency", "0s", "--jitter", "0s", "--tls-cert", far.cert, "--tls-key", far.key}
		rl, err := netrelay.Listen("127.0.0.1:0", originAddr, netrelay.Faults{Delay: originLatency / 2})
		if err != nil {
			return r, err
		}
		defer rl.Close()
		originURL, stats, statsClient = "https://"+rl.Addr(), "https://"+originAddr+"/_stats", far.client
		env = append(append([]string{}, env...), "EDGE_ORIGIN_CA_FILE="+far.cert)
	}
	origin := exec.Command(bin, originArgs...)
	if err := origin.Start(); err != nil {
		return r, err
	}
	defer stop(origin)
	var nodes []*node
	for i := range 6 {
		region := "eu"
		if i >= 3 {
			region = "us"
		}
		nodes = append(nodes, &node{id: fmt.Sprintf("%s-%d", region, i%3+1), region: region, pub: freeAddr(), adm: freeAddr(), clus: freeAddr()})
	}
	// One relay per ordered pair: a's view of b goes through relay(a, b).
	var cross []*netrelay.Relay
	peersOf := map[string][]string{}
	for _, a := range nodes {
		peersOf[a.id] = append(peersOf[a.id], a.id+"="+a.clus)
		for _, b := range nodes {
			if a == b {
				continue
			}
			f := netrelay.Faults{Delay: intra}
			if a.region != b.region {
				f.Delay = inter
			}
			rl, err := netrelay.Listen("127.0.0.1:0", b.clus, f)
			if err != nil {
				return r, err
			}
			defer rl.Close()
			if a.region != b.region {
				cross = append(cross, rl)
			}
			peersOf[a.id] = append(peersOf[a.id], b.id+"="+rl.Addr())
		}
	}
	for _, n := range nodes {
		args := []string{"serve", "--origin", originURL, "--listen", n.pub, "--admin-listen", n.adm, "--node-id", n.id,
			"--cluster-listen", n.clus, "--peers", strings.Join(peersOf[n.id], ","), "--secret", secret,
			"--routing-mode", mode, "--selection", sel, "--cache-size", cacheSize, "--log-level", "warn"}
		args = append(args, strings.Fields(extra)...)
		n.cmd = exec.Command(bin, args...)
		n.cmd.Env = append(append(os.Environ(), "EDGE_CLUSTER_REGION="+n.region), env...)
		n.cmd.Stderr = &n.log
		if err := n.cmd.Start(); err != nil {
			return r, err
		}
		defer stop(n.cmd)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for scrape(n.adm)["edge_view_members"] != 6 {
			if time.Now().After(deadline) {
				return r, fmt.Errorf("%s: %w; its log: %s", n.id, errNoView, lastLines(n.log.String(), 5))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // RTT estimates settle
	var targets []string
	for _, n := range nodes {
		targets = append(targets, "http://"+n.pub)
	}
	counters := func() (c probeCounts, crossB int64, origin int, indicatorB float64) {
		for _, n := range nodes {
			for k, v := range scrape(n.adm) {
				if strings.HasPrefix(k, "edge_indicator_advertisement_bytes_total") {
					indicatorB += v
				}
				c.add(k, v)
			}
		}
		for _, rl := range cross {
			crossB += rl.Forward.Load() + rl.Backward.Load()
		}
		return c, crossB, originTotal(statsClient, stats), indicatorB
	}
	// The measured load continues the workload's sequence where the warm-up
	// left it, rounded down to a multiple of the six nodes: load.Run sends
	// its i-th request to node i mod 6, and a workload that tells regions
	// apart by its index (moving) must see the same node.
	warmN := int(rate*warmup.Seconds()) / 6 * 6
	if warmup > 0 {
		load.Run(context.Background(), load.Config{Targets: targets, Rate: rate, Duration: warmup, MaxInflight: 4000, Timeout: 10 * time.Second, Path: path, Seed: workloadSeed})
	}
	c0, cross0, originReqs0, ind0 := counters()
	r.sum = load.Run(context.Background(), load.Config{Targets: targets, Rate: rate, Duration: d, MaxInflight: 4000, Timeout: 10 * time.Second,
		Path: func(i int, rng *rand.Rand) string { return path(i+warmN, rng) }, Seed: workloadSeed + 1})
	c1, crossBytes, originReqs, ind := counters()
	r.probes = c1.minus(c0)
	r.indicatorBytes = ind - ind0
	r.crossBytes, r.origin = crossBytes-cross0, originReqs-originReqs0
	return r, nil
}

func stop(c *exec.Cmd) {
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

func scrape(admin string) map[string]float64 {
	m, err := promtext.Scrape(context.Background(), "http://"+admin+"/metrics")
	if err != nil {
		return map[string]float64{}
	}
	return m
}

func originTotal(client *http.Client, url string) int {
	resp, err := client.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st struct {
		Total int `json:"total"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st.Total
}

// workloadSeed seeds the random draws of the Zipf-based workloads, so that
// every configuration of a run gets the same requests (a review found each
// drawing its own from the clock).
const workloadSeed = 20261207
