package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/demosite"
	"github.com/edgecache/edge/load"
	"github.com/edgecache/edge/trace"
)

func loadCmd() *cobra.Command {
	var (
		targets, file, format, hotPath, originStats string
		zipfS, hotShare                             float64
		pages, limit                                int
		sized                                       bool
		asJSON, verify                              bool
		c                                           load.Config
	)
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Open-loop load: Zipf pages or a trace, spread over one or more edge nodes",
		Long: `Send requests at a fixed rate for a duration, to one or more targets in turn.
Keys become demo-origin pages /p/{n}: Zipf ranks, or trace keys. --hot-share sends that
fraction of requests to one page (a flash crowd). With --origin-stats (the demo origin's
/_stats) the summary includes the origin offload.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.Targets = strings.Split(targets, ",")
			if targets == "" || c.Rate <= 0 || c.Duration <= 0 {
				return usageError{errors.New("--target, a positive --rate and --duration are required")}
			}
			var pick func(*rand.Rand) string
			switch {
			case file != "":
				f, err := trace.ParseFormat(format)
				if err != nil {
					return usageError{err}
				}
				reqs, err := trace.ReadAll(file, f, limit)
				if err != nil {
					return err
				}
				if len(reqs) == 0 {
					return fmt.Errorf("--trace %s: no requests in it (format %s)", file, format)
				}
				paths := make([]string, len(reqs))
				for i, r := range reqs {
					paths[i] = "/p/" + strconv.FormatUint(r.ID%1_000_000_000, 10)
					if sized && r.Size > 0 {
						// The demo origin's /size/{bytes}: the object the
						// trace names, at the size it gives.
						paths[i] = "/size/" + strconv.FormatInt(min(r.Size, 64<<20), 10) + "?k=" + strconv.FormatUint(r.ID, 10)
					}
				}
				next := 0
				pick = func(*rand.Rand) string { p := paths[next%len(paths)]; next++; return p }
			case zipfS > 0:
				z := load.NewZipf(zipfS, pages)
				pick = func(r *rand.Rand) string { return "/p/" + strconv.Itoa(1+z.Sample(r)) }
			default:
				return usageError{errors.New("give --zipf S --pages P or --trace FILE --format F")}
			}
			c.Path = func(i int, r *rand.Rand) string {
				if hotShare > 0 && r.Float64() < hotShare {
					return hotPath
				}
				return pick(r)
			}
			if verify {
				c.Verify = demosite.VerifyPage
			}
			before := originTotal(originStats)
			if !asJSON {
				c.Progress = func(s load.Summary) { fmt.Fprint(cmd.ErrOrStderr(), load.Line(s)) }
			}
			s := load.Run(cmd.Context(), c)
			offload := -1.0
			if originStats != "" && s.Requests > 0 {
				offload = 1 - float64(originTotal(originStats)-before)/float64(s.Requests)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"summary": s, "origin_offload": offload})
			}
			fmt.Fprint(cmd.ErrOrStderr(), load.Line(s)+"\n")
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "requests %d in %.1f s (%.0f/s), errors %d, dropped %d\n", s.Requests, s.Elapsed, s.RateAch, s.Errors, s.Dropped)
			if len(s.ErrorKinds) > 0 {
				kinds := slices.Sorted(maps.Keys(s.ErrorKinds))
				fmt.Fprint(w, "errors by kind:")
				for _, k := range kinds {
					fmt.Fprintf(w, "  %s %d", k, s.ErrorKinds[k])
				}
				fmt.Fprintln(w)
			}
			if verify {
				fmt.Fprintf(w, "wrong content %d, largest Age %d s\n", s.Wrong, s.MaxAgeS)
			}
			var keys []string
			for k := range s.ByResult {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprint(w, "by Cache-Status:")
			for _, k := range keys {
				fmt.Fprintf(w, "  %s %d (%.1f%%)", k, s.ByResult[k], 100*float64(s.ByResult[k])/float64(max(s.Requests, 1)))
			}
			fmt.Fprintln(w)
			if offload >= 0 {
				fmt.Fprintf(w, "origin offload %.2f%%\n", 100*offload)
			}
			fmt.Fprintf(w, "latency ms (from each request's scheduled send to its body's end or its failure): p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", s.P50ms, s.P90ms, s.P99ms, s.P999ms, s.MaxMs)
			if s.SenderLagMaxMs >= 10 {
				fmt.Fprintf(w, "the generator sent up to %.0f ms late (its own CPU or a pause): that lateness is in the latencies above\n", s.SenderLagMaxMs)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&targets, "target", "", "base URL(s), comma-separated: requests go to each in turn")
	f.Float64Var(&c.Rate, "rate", 500, "requests per second")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to send")
	f.IntVar(&c.MaxInflight, "max-inflight", 2000, "requests in flight beyond this are dropped (counted)")
	f.DurationVar(&c.Timeout, "timeout", 10*time.Second, "per-request timeout")
	f.Float64Var(&zipfS, "zipf", 0, "Zipf exponent of page popularity")
	f.IntVar(&pages, "pages", 10000, "pages for --zipf")
	f.StringVar(&file, "trace", "", "trace file of keys")
	f.StringVar(&format, "format", "int64be", "trace format: int64be, int32be, adaptsize, lines")
	f.IntVar(&limit, "trace-limit", 0, "read at most this many trace entries (0: all)")
	f.BoolVar(&sized, "sized", false, "for a trace with object sizes (adaptsize): request /size/{bytes}?k={key}, so that each object has its trace size")
	f.Float64Var(&hotShare, "hot-share", 0, "fraction of requests sent to --hot-path (a flash crowd)")
	f.StringVar(&hotPath, "hot-path", "/p/0", "the flash crowd's page")
	f.StringVar(&originStats, "origin-stats", "", "demo origin /_stats URL, for the origin offload")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	f.StringVar(&c.Host, "host", "", "Host header of every request (a site name shared by all targets); default each target's host")
	f.StringVar(&c.AcceptEncoding, "accept-encoding", load.BrowserAcceptEncoding, "Accept-Encoding of every request, a browser's by default; identity (or an empty value) asks for uncompressed bodies")
	f.Float64Var(&c.NoCacheShare, "no-cache-share", 0, "fraction of requests sent as a browser's hard reload (Cache-Control: no-cache, Pragma: no-cache)")
	f.BoolVar(&verify, "verify-pages", false, "check that each /p/{n} answer is the demo origin's page n (entity tag and length); mismatches count as wrong content")
	return cmd
}

// originTotal reads the demo origin's request count (0 if unavailable).
func originTotal(url string) int64 {
	if url == "" {
		return 0
	}
	resp, err := http.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "origin stats:", err)
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Total int64 `json:"total"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st.Total
}
