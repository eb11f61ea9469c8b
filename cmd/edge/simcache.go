package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/lab/cachesim"
	"github.com/edgecache/edge/trace"
)

func simCacheCmd() *cobra.Command {
	var (
		file, format, costs, policies, sweep, csvOut, plotOut string
		requests                                              int
		asJSON                                                bool
		c                                                     cachesim.Config
	)
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Indicator-based cache selection on a trace: opt, fno, fna, fna-hist, fna-home, fna-learned, fna-rate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := trace.ParseFormat(format)
			if err != nil {
				return usageError{err}
			}
			if file == "" {
				return usageError{errors.New("--trace FILE is required")}
			}
			if c.Costs, err = parseFloats(costs); err != nil {
				return usageError{fmt.Errorf("--costs: %w", err)}
			}
			reqs, err := trace.ReadAll(file, f, requests)
			if err != nil {
				return err
			}
			keys := make([]uint64, len(reqs))
			for i, r := range reqs {
				keys[i] = r.ID
			}
			pols := strings.Split(policies, ",")
			if sweep != "" {
				return runSweep(cmd.OutOrStdout(), keys, c, pols, sweep, csvOut, plotOut)
			}
			res, err := cachesim.Simulate(keys, c, pols)
			if err != nil {
				return usageError{err}
			}
			if asJSON {
				out := map[string]any{"requests": len(keys), "policies": map[string]cachesim.Result{}}
				for _, r := range res {
					out["policies"].(map[string]cachesim.Result)[r.Policy] = r
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(cmd.OutOrStdout(), "%d requests, %d caches of %d, bpe %g, U %d, costs %s, M %g, fnr estimator %s, %d client(s), faithful %v, own fills %v\n", len(keys), c.Caches, c.CacheSize, c.BPE, c.UpdateInterval, costs, c.MissPenalty, c.FNREstimator, max(c.Clients, 1), c.Faithful, c.OwnFills)
			fmt.Fprintln(tw, "policy\tcost/req\tcost/opt\thit ratio\tfn ratio\tfp ratio\tasked/req\tneg probes/req\tadv B/req\t")
			for _, r := range res {
				fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.4f\t%.4f\t%.4f\t%.3f\t%.3f\t%.1f\t\n", r.Policy, r.CostPerRequest, r.CostVsOpt, r.HitRatio, r.FNRatio, r.FPRatio, r.CachesAsked, r.NegativeProbes, r.AdvBytesPerRequest)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&file, "trace", "", "trace file (xz or gzip compressed, or plain)")
	fl.StringVar(&format, "format", "int64be", "int64be, int32be, adaptsize or lines")
	fl.IntVar(&requests, "requests", 0, "use only the first N requests (0: all)")
	fl.IntVar(&c.Caches, "caches", 3, "number of caches")
	fl.IntVar(&c.CacheSize, "cache-size", 10000, "items per cache")
	fl.Float64Var(&c.BPE, "bpe", 14, "indicator bits per cached element")
	fl.IntVar(&c.UpdateInterval, "update-interval", 1000, "insertions between advertisements (U)")
	fl.StringVar(&costs, "costs", "1,2,3", "access cost of each cache")
	fl.Float64Var(&c.MissPenalty, "miss-penalty", 100, "miss penalty M")
	fl.IntVar(&c.Replicas, "replicas", 1, "home caches per key")
	fl.Float64Var(&c.Explore, "explore", 0.01, "fna-hist: chance per request of probing the cheapest negative cache")
	fl.Var(&c.FNREstimator, "fnr-estimator", "how caches estimate fnr: bits (the paper), count (keys inserted since the advertisement) or exact (held keys the snapshot misses)")
	fl.IntVar(&c.Clients, "clients", 1, "ingress nodes sharing the caches, each with its own replicas and estimates")
	fl.BoolVar(&c.OwnFills, "own-fills", false, "each client reads the keys its own misses placed at a cache since that cache's last advertisement as positively indicated (a local update of its replica), for every policy")
	fl.BoolVar(&c.Faithful, "faithful", false, "the authors' simulator and estimator path: home = key mod n, a re-insertion after a false-negative miss counts towards U, a counting up-to-date filter that forgets evicted keys, and (fpr, fnr) reaching a client only with an advertisement or an answer")
	fl.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fl.StringVar(&policies, "policies", "opt,fno,fna", "comma-separated: opt, fno, fna, fna-hist, fna-home, fna-learned, fna-rate; neg-oracle (a bound: fno that knows the truth behind each negative indication)")
	fl.StringVar(&sweep, "sweep", "", "update-interval=16,64,256, bpe=5..15 or miss-penalty=50,100,500 (CSV on stdout or --csv)")
	fl.StringVar(&csvOut, "csv", "", "sweep: write the CSV here instead of stdout")
	fl.StringVar(&plotOut, "plot", "", "sweep: draw cost/opt against the swept value into this PNG")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for part := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", part)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseSweep parses "name=a,b,c" or "name=lo..hi" (integers, step 1).
func parseSweep(s string) (string, []float64, error) {
	name, vals, ok := strings.Cut(s, "=")
	if !ok || (name != "update-interval" && name != "bpe" && name != "miss-penalty") {
		return "", nil, fmt.Errorf("--sweep %q: want update-interval=…, bpe=… or miss-penalty=…", s)
	}
	if lo, hi, ok := strings.Cut(vals, ".."); ok {
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a > b || b-a > 1000 {
			return "", nil, fmt.Errorf("--sweep %q: bad range", s)
		}
		var out []float64
		for v := a; v <= b; v++ {
			out = append(out, float64(v))
		}
		return name, out, nil
	}
	out, err := parseFloats(vals)
	if err != nil {
		return "", nil, err
	}
	if name == "update-interval" {
		// A whole number of insertions: 1.9 would run as 1 and be printed
		// as 1.9.
		for _, v := range out {
			if v != math.Trunc(v) || v < 1 {
				return "", nil, fmt.Errorf("--sweep %q: update-interval %v: want a whole number of insertions ≥ 1", s, v)
			}
		}
	}
	return name, out, nil
}

type sweepPoint struct {
	value  float64
	policy string
	res    cachesim.Result
}

func runSweep(stdout io.Writer, keys []uint64, c cachesim.Config, pols []string, sweep, csvOut, plotOut string) error {
	name, vals, err := parseSweep(sweep)
	if err != nil {
		return usageError{err}
	}
	var points []sweepPoint
	for _, v := range vals {
		cc := c
		switch name {
		case "bpe":
			cc.BPE = v
		case "miss-penalty":
			cc.MissPenalty = v
		default:
			cc.UpdateInterval = int(v)
		}
		res, err := cachesim.Simulate(keys, cc, pols)
		if err != nil {
			return usageError{err}
		}
		for _, r := range res {
			points = append(points, sweepPoint{v, r.Policy, r})
		}
	}
	w := stdout
	var file *os.File
	if csvOut != "" {
		if file, err = os.Create(csvOut); err != nil {
			return err
		}
		w = file
	}
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{name, "policy", "cost_per_request", "cost_vs_opt", "hit_ratio", "fn_ratio", "fp_ratio", "caches_asked", "adv_bytes_per_request", "advertisements"})
	for _, p := range points {
		r := p.res
		_ = cw.Write([]string{strconv.FormatFloat(p.value, 'g', -1, 64), p.policy,
			f4(r.CostPerRequest), f4(r.CostVsOpt), f4(r.HitRatio), f4(r.FNRatio), f4(r.FPRatio), f4(r.CachesAsked), f4(r.AdvBytesPerRequest), strconv.Itoa(r.Advertisements)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	if file != nil {
		if err := file.Close(); err != nil {
			return err
		}
	}
	if plotOut != "" {
		return plotSweep(plotOut, name, points)
	}
	return nil
}

func f4(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
