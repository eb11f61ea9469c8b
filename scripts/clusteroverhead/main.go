// Command clusteroverhead measures what an all-to-all cluster costs each
// node as it grows: real `edge demo` clusters of 3, 5, 10 and 20 processes
// on this machine, idle (heartbeats only) and then under a steady insert
// rate (indicator advertisements and pulls, measured after a warm-up that
// takes the first full-filter pulls out). It prints, per size, the
// heartbeat packets and bytes per second per node, the indicator bytes per
// second per node, the CPU per node, and the ring rebuild time, and fits
// the per-peer costs that docs/cluster.md extrapolates from.
//
//	go run ./scripts/clusteroverhead [-sizes 3,5,10,20] [-idle 10s] [-insert-rate 200]
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgecache/edge/internal/demoproc"
	"github.com/edgecache/edge/internal/promtext"
	"github.com/edgecache/edge/load"
)

func main() {
	sizes := flag.String("sizes", "3,5,10,20", "cluster sizes")
	idle := flag.Duration("idle", 10*time.Second, "idle measurement window")
	busy := flag.Duration("busy", 10*time.Second, "insert-rate measurement window")
	insertRate := flag.Float64("insert-rate", 200, "requests per second for new pages (each a fresh key: an insertion)")
	bin := flag.String("edge", "bin/edge", "edge binary")
	serveArgs := flag.String("serve-args", "", "extra edge serve arguments, e.g. \"--monitoring subset\"")
	flag.Parse()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Printf("overheads (serve args %q), %s, %d cores; idle %s, then %.0f new pages/s for %s\n", *serveArgs, time.Now().UTC().Format("2006-01-02"),
		numCPU(), *idle, *insertRate, *busy)
	fmt.Fprintln(tw, "nodes\theartbeat pkt/s/node\theartbeat B/s/node\tB/packet\tCPU idle ms/s/node\tindicator B/s/node (steady, inserting)\tCPU inserting ms/s/node\tring rebuild µs\t")
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := measure(tw, *bin, *serveArgs, n, *idle, *busy, *insertRate); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		_ = tw.Flush() // row by row: a long run shows what it has
		fmt.Fprintf(os.Stderr, "%d nodes done\n", n)
	}
	_ = tw.Flush()
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// sums adds a metric over every node's admin listener.
func sums(admins []string, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, a := range admins {
		m, err := promtext.Scrape(context.Background(), "http://"+a+"/metrics")
		if err != nil {
			continue
		}
		for k, v := range m {
			for _, name := range names {
				if k == name || strings.HasPrefix(k, name+"{") {
					out[k] += v
				}
			}
		}
	}
	return out
}

func measure(tw *tabwriter.Writer, bin, serveArgs string, n int, idle, busy time.Duration, insertRate float64) error {
	// The origin moves off 8090, which the 11th node's public port takes.
	demo, err := demoproc.Start(bin, n, serveArgs, "--origin-listen", "127.0.0.1:8070")
	if err != nil {
		return err
	}
	defer demo.Stop()
	admins, targets := demo.Admins(), demo.Publics()
	// Converged: every node's view holds every node. On a small machine a
	// large cluster may keep a few peers flapping; after two minutes the
	// measurement goes ahead and says so.
	deadline := time.Now().Add(120 * time.Second)
	for {
		m := sums(admins, "edge_view_members")
		if m["edge_view_members"] == float64(n*n) || (n == 1 && len(m) > 0) {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "%d nodes: views hold %.0f of %d members after 2 minutes; measuring anyway\n", n, m["edge_view_members"], n*n)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // past startup
	names := []string{"edge_heartbeat_packets_total", "edge_heartbeat_bytes_total", "process_cpu_seconds_total",
		"edge_indicator_advertisement_bytes_total", "edge_view_rebuild_seconds_sum", "edge_view_rebuild_seconds_count"}
	// Each node is scraped at about the same offset into both sweeps, so
	// its window is the time between the sweeps' starts, not idle (the
	// sweep over 40 nodes takes most of a second on a loaded machine).
	ta := time.Now()
	a := sums(admins, names...)
	time.Sleep(idle)
	tb := time.Now()
	b := sums(admins, names...)
	idleWindow := tb.Sub(ta)
	per := func(m1, m2 map[string]float64, k string, d time.Duration) float64 {
		var v float64
		for key := range m2 {
			if key == k || strings.HasPrefix(key, k+"{") {
				v += m2[key] - m1[key]
			}
		}
		return v / d.Seconds() / float64(n)
	}
	pkts := per(a, b, `edge_heartbeat_packets_total{direction="sent"}`, idleWindow)
	bytes := per(a, b, `edge_heartbeat_bytes_total{direction="sent"}`, idleWindow)
	cpuIdle := per(a, b, "process_cpu_seconds_total", idleWindow) * 1000
	// Inserting: every request a page no node has seen. The first
	// advertisement each peer pulls is the full filter; the measurement
	// starts after a warm-up of the same length, in the steady state of
	// deltas.
	start := rand.Uint64N(1 << 40)
	done := make(chan struct{})
	go func() {
		load.Run(context.Background(), load.Config{Targets: targets, Rate: insertRate, Duration: 2 * busy, MaxInflight: 1000, Timeout: 10 * time.Second,
			Path: func(i int, _ *rand.Rand) string { return "/p/" + strconv.FormatUint(start+uint64(i), 10) }})
		close(done)
	}()
	time.Sleep(busy)
	tc := time.Now()
	c := sums(admins, names...)
	time.Sleep(busy)
	td := time.Now()
	d := sums(admins, names...)
	busyWindow := td.Sub(tc)
	<-done
	ind := per(c, d, "edge_indicator_advertisement_bytes_total", busyWindow)
	cpuBusy := per(c, d, "process_cpu_seconds_total", busyWindow) * 1000
	rebuild := 0.0
	if cnt := d["edge_view_rebuild_seconds_count"]; cnt > 0 {
		rebuild = d["edge_view_rebuild_seconds_sum"] / cnt * 1e6
	}
	bpp := 0.0
	if pkts > 0 {
		bpp = bytes / pkts
	}
	fmt.Fprintf(tw, "%d\t%.1f\t%.0f\t%.0f\t%.1f\t%.0f\t%.1f\t%.1f\t\n", n, pkts, bytes, bpp, cpuIdle, ind, cpuBusy, rebuild)
	return nil
}
