package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot/plotter"

	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/lab/fdlab"
)

func fdCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "fd", Short: "Failure detectors: generate traces, replay and tune detectors"}
	cmd.AddCommand(fdGenCmd(), fdReplayCmd(), fdSweepCmd(), fdRecordCmd(), fdSendCmd())
	return cmd
}

func fdGenCmd() *cobra.Command {
	c := fdlab.DefaultGenConfig()
	var out string
	var sendTimes []string
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Generate a heartbeat trace with stalls, heavy-tailed delay, regime shifts, loss bursts and clock drift",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.SendTimes = nil
			for _, path := range sendTimes {
				st, err := loadSendTimes(path)
				if err != nil {
					return err
				}
				c.SendTimes = append(c.SendTimes, st)
			}
			if len(sendTimes) > 0 && !cmd.Flags().Changed("duration") {
				c.Duration = 0 // each file whole
			}
			as, err := fdlab.Generate(c)
			if err != nil {
				return usageError{err}
			}
			if out == "" || out == "-" {
				return fdlab.WriteTrace(cmd.OutOrStdout(), as)
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := fdlab.WriteTrace(f, as); err != nil {
				_ = f.Close()
				return err
			}
			return f.Close()
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&c.Seed, "seed", c.Seed, "random seed")
	f.DurationVar(&c.Duration, "duration", c.Duration, "trace length")
	f.DurationVar(&c.Period, "period", c.Period, "heartbeat period Δ")
	f.IntVar(&c.Links, "links", c.Links, "links (senders)")
	f.DurationVar(&c.StallEvery, "stall-every", c.StallEvery, "mean time between sender stalls")
	f.DurationVar(&c.ShiftEvery, "shift-every", c.ShiftEvery, "mean time between delay regime shifts")
	f.Float64Var(&c.QueueRho, "queue-rho", c.QueueRho, "autocorrelation of the queueing delay per heartbeat (0: i.i.d. delays only)")
	f.DurationVar(&c.JitterScale, "jitter", c.JitterScale, "scale of the i.i.d. Pareto jitter")
	f.Float64Var(&c.JitterShape, "jitter-shape", c.JitterShape, "Pareto shape of the jitter (smaller: heavier tail)")
	f.DurationVar(&c.ShiftMax, "shift-max", c.ShiftMax, "a delay regime shift adds up to this much")
	f.DurationVar(&c.StallMax, "stall-max", c.StallMax, "longest sender stall")
	f.Float64Var(&c.GoodToBad, "good-to-bad", c.GoodToBad, "per-heartbeat chance of entering a loss burst")
	f.Float64Var(&c.LossBad, "loss-bad", c.LossBad, "loss probability inside a burst")
	f.Float64Var(&c.LossGood, "loss-good", c.LossGood, "loss probability outside bursts (i.i.d. loss; --good-to-bad 0 for no bursts)")
	f.StringVar(&c.Sender, "sender", c.Sender, "how the sender keeps time: tick (a ticker; heartbeats due in a stall leave together) or sleep (sleeps a period after each send: a random walk, and a stall delays every later heartbeat)")
	f.DurationVar(&c.SenderJitter, "sender-jitter", c.SenderJitter, "mean wake-up lateness of a sleeping sender (--sender sleep)")
	f.StringSliceVar(&sendTimes, "send-times", nil, "real senders' heartbeats, one link per file: the failure detector benchmark platform's sentinterval.csv (numseq,timestamp_start_send,timestamp_end_send; PlanetLab senders); the WAN is modelled as without them, the stall and sender flags are unused, and each file is used whole unless --duration is given")
	f.StringVar(&out, "out", "-", "output CSV file")
	return cmd
}

// loadSendTimes reads a sentinterval.csv, naming the file in its error.
func loadSendTimes(path string) ([]fdlab.SendTime, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	st, err := fdlab.ReadSendTimes(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

func loadArrivals(path string) ([]fdlab.Arrival, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return fdlab.ReadTrace(f)
}

func fdReplayCmd() *cobra.Command {
	var file, name string
	var params []string
	var period time.Duration
	var asJSON bool
	var fromNs, toNs int64
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay a trace through a detector: P_A, T_D, mistakes, detection time, cost",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := fdetect.ParseParams(params)
			if err != nil {
				return usageError{err}
			}
			if _, err := fdlab.New(name, int64(period), p); err != nil {
				return usageError{err}
			}
			as, err := loadArrivals(file)
			if err != nil {
				return err
			}
			if fromNs < 0 || toNs < 0 || (toNs != 0 && toNs <= fromNs) {
				return usageError{errors.New("--from-ns and --to-ns: a window of receive times, from before to (0: open)")}
			}
			res, err := fdlab.ReplayWindow(as, int64(period), func() (fdetect.Detector, error) { return fdlab.New(name, int64(period), p) }, fromNs, toNs)
			if err != nil {
				return err
			}
			if res.Overall.Heartbeats == 0 {
				// A row of zeros reads like a detector that never met its
				// target; say instead that nothing was measured.
				if fromNs != 0 || toNs != 0 {
					return fmt.Errorf("edge fd replay: no heartbeat received in the window [%d, %d) ns", fromNs, toNs)
				}
				return fmt.Errorf("edge fd replay: no heartbeat measured: each link's first %d are its warm-up", fdlab.Warmup)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "link\theartbeats\tlost\tP_A\tP_A(arrived)\tT_D ms\tP_A(time)\tT_D(Chen) ms\tmistakes\tλ_M per s\tT_M ms\tdetect ms\tp99 ms\tns/hb\t")
			row := func(n string, r fdlab.Result) {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.5f\t%.5f\t%.1f\t%.6f\t%.1f\t%d\t%.4f\t%.1f\t%.1f\t%.1f\t%.0f\t\n", n, r.Heartbeats, r.Lost, r.PA, r.PAArrived, r.TDms, r.PATime, r.TDChenMs, r.Mistakes, r.MistakeRate, r.MistakeMeanMs, r.DetectMeanMs, r.DetectP99Ms, r.NsPerHeartbeat)
			}
			var links []string
			for l := range res.Links {
				links = append(links, l)
			}
			sort.Strings(links)
			for _, l := range links {
				row(l, res.Links[l])
			}
			row("overall", res.Overall)
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "trace", "", "trace CSV (site,seq,send_ns,recv_ns)")
	f.StringVar(&name, "detector", "ml", strings.Join(fdlab.Names, ", "))
	f.StringArrayVar(&params, "param", nil, "detector parameter name=value (repeatable)")
	f.DurationVar(&period, "period", 100*time.Millisecond, "heartbeat period of the trace")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.Int64Var(&fromNs, "from-ns", 0, "measure only arrivals received at or after this time (Unix ns; earlier ones are observed): one fault scenario of a long recording")
	f.Int64Var(&toNs, "to-ns", 0, "measure only arrivals received before this time (Unix ns; 0: to the end)")
	return cmd
}

func fdSweepCmd() *cobra.Command {
	var file, name, plotOut, metricName, knob string
	var params []string
	var target float64
	var period time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Find the detector knob with the smallest T_D at a target P_A",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" && plotOut == "" {
				return usageError{errors.New("--detector is required (or --plot for all)")}
			}
			base, err := fdetect.ParseParams(params)
			if err != nil {
				return usageError{err}
			}
			metric, err := fdlab.ParseMetric(metricName)
			if err != nil {
				return usageError{fmt.Errorf("--metric: %w", err)}
			}
			as, err := loadArrivals(file)
			if err != nil {
				return err
			}
			if metric == fdlab.MetricChen && !slices.ContainsFunc(as, func(a fdlab.Arrival) bool { return a.Delay != 0 }) {
				fmt.Fprintln(cmd.ErrOrStderr(), "edge fd sweep: the trace has no delay_ns column: Chen's T_D leaves out the one-way delay")
			}
			if plotOut != "" {
				if name == "" && len(base) > 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "edge fd sweep: --param applies to --detector's curve; without --detector the curves ignore it")
				}
				var ss []series
				for _, d := range fdlab.Names {
					if fdetect.MainKnob[d] == "" {
						continue // ml-seed has no knob to trace a curve with
					}
					var curveBase fdetect.Params
					label := d
					if d == name && len(base) > 0 {
						curveBase = base // --param is for --detector's curve
						label = fmt.Sprintf("%s (%s)", d, base)
					}
					pts, err := fdlab.Curve(as, d, int64(period), 24, curveBase, metric)
					if err != nil {
						return err
					}
					var xy plotter.XYs
					for _, p := range pts {
						if p[1] > 0 {
							xy = append(xy, plotter.XY{X: p[0], Y: p[1]})
						}
					}
					ss = append(ss, series{label, xy})
				}
				if err := drawLines(plotOut, "failure detectors: detection time vs mistakes", "T_D (ms)", "1 − P_A", false, true, ss); err != nil {
					return err
				}
				if name == "" {
					return nil
				}
			}
			res, err := fdlab.Sweep(as, name, int64(period), target, base, metric, knob)
			if err != nil {
				return usageError{err}
			}
			if res.Heartbeats == 0 {
				return fmt.Errorf("edge fd sweep: no heartbeat measured: each link's first %d are its warm-up", fdlab.Warmup)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			found := ""
			if !res.Found {
				found = " (target not reached in the knob's range)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s = %.6g → P_A %.5f, T_D %.1f ms (%s metric)%s\n", res.Detector, res.Param, res.Value, res.PA, res.TDms, metric, found)
			if res.Param == fdlab.PauseQuantile {
				fmt.Fprintf(cmd.OutOrStdout(), "  quantile %.6g, pause %.1f ms\n", res.Params["quantile"], res.Params["pause_ms"])
			}
			fmt.Fprintf(cmd.OutOrStdout(), "  λ_M %.5f mistakes/s, T_M %.1f ms\n", res.MistakeRate, res.MistakeDurationMs)
			if need := 1 / (1 - target); target < 1 && float64(res.Heartbeats) < 10*need {
				// Ten expected mistakes are the least that tells a
				// P_A of target from a better or worse one.
				fmt.Fprintf(cmd.ErrOrStderr(), "edge fd sweep: measured on %d heartbeats, where a P_A of %g expects one mistake in %.0f: too few to tell (want %.0f or more)\n", res.Heartbeats, target, need, 10*need)
			}
			printNodeConfig(cmd.OutOrStdout(), res, base, period)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "trace", "", "trace CSV")
	f.StringVar(&name, "detector", "", strings.Join(fdlab.Names, ", "))
	f.Float64Var(&target, "target-pa", 0.998, "target P_A")
	f.StringVar(&knob, "knob", "", "search this parameter instead of the detector's main knob (ml: quantile, pause_ms, or quantile+pause_ms: the quantile up to 0.99, then the pause; ml by Chen's metric defaults to quantile+pause_ms with time_objective=1, by the seed's metric to quantile with loss_model=2)")
	f.StringVar(&metricName, "metric", "seed", "seed (P_A = share of predictions, one per arrival, that the next arrival met: a lost heartbeat is unsafe unless the margin covered its gap; T_D = slack), seed-arrived (the same over received heartbeats only) or chen (P_A = share of time trusted, T_D = crash to suspicion)")
	f.DurationVar(&period, "period", 100*time.Millisecond, "heartbeat period of the trace")
	f.StringVar(&plotOut, "plot", "", "draw every detector's (T_D, 1 − P_A) curve along the knob and with the parameters a sweep by --metric uses into this PNG")
	f.StringArrayVar(&params, "param", nil, "other detector parameters name=value (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printNodeConfig prints the sweep's point as a node's configuration, in
// YAML to merge: the heartbeat period, the detector, and every parameter
// the replay ran with, including loss_budget=0 where the operator did not
// set one, since a node otherwise wraps its detector in the loss-aware
// margin (cluster.loss_budget) that the replay left out, and the replay's
// loss estimator beside a budget, since a node otherwise takes
// cluster.loss_estimator's. It says what the sweep added on its own
// (SweepDefaults), and prints nothing to copy where the target was not
// reached.
func printNodeConfig(w io.Writer, res fdlab.SweepResult, base fdetect.Params, period time.Duration) {
	if !res.Found {
		fmt.Fprintln(w, "  the target was not reached: no setting to copy into a node")
		return
	}
	if res.AtRangeBottom {
		fmt.Fprintf(w, "  every %s tried met the target: the margin comes from the other parameters (a loss budget, a pause), and this value is the search's floor\n", res.Param)
	}
	node := fdetect.Params{}
	for k, v := range res.Params {
		node[k] = v
	}
	budget, budgetSet := node[fdetect.LossBudgetParam]
	if !budgetSet {
		node[fdetect.LossBudgetParam] = 0
	}
	if _, ok := node[fdetect.LossEstimatorParam]; !ok && budget > 0 {
		// The replay's estimator (fdetect.New's default), not whatever
		// cluster.loss_estimator the node has.
		node[fdetect.LossEstimatorParam] = float64(fdetect.LossRate)
	}
	fmt.Fprintf(w, "  for a node's config (edge.yaml; merge into its cluster: section):\n    cluster:\n      heartbeat_period: %s\n      detector: %s\n      detector_params: %q\n", period, res.Detector, node.String())
	if added := sweepAdded(base, res.Params, res.Param); len(added) > 0 {
		fmt.Fprintf(w, "  the sweep set %s for this metric, which a node does not run unless detector_params say so\n", added)
	}
	if !budgetSet {
		fmt.Fprintf(w, "  loss_budget=0: the replay ran without the node's loss-aware margin (cluster.loss_budget, default %g); to tune with it, sweep with --param loss_budget=%g\n", fdetect.DefaultLossBudget, fdetect.DefaultLossBudget)
	}
}

// sweepAdded returns the parameters a sweep's chosen point sets that the
// operator neither passed nor searched: SweepDefaults' additions (ml's
// loss model by the seed metric, its time objective by Chen's), which a
// node's detector does not turn on by itself.
func sweepAdded(base, chosen fdetect.Params, knob string) fdetect.Params {
	added := fdetect.Params{}
	for k, v := range chosen {
		if _, set := base[k]; set || k == knob || (knob == fdlab.PauseQuantile && (k == "quantile" || k == "pause_ms")) {
			continue
		}
		added[k] = v
	}
	return added
}
