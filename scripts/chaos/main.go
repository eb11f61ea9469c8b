// Command chaos runs the network-fault lab (lab/chaos): a 5-node edge
// cluster with each node in its own network namespace, under Zipf load
// with a flash crowd from a client namespace, through every fault scenario
// — crash, partition of one node and of a minority, one-way partition,
// 5 % and 20 % loss, loss bursts, +50 ms delay, jitter, 300 ms spikes, a
// flapping link — and prints one table per fault. The first detector runs
// the cluster; the others run beside it on every node as shadow detectors
// (cluster.shadow_detectors: the same heartbeats, the same allowance for
// the node's own delays, recorded and never acted on), so every detector
// is judged on the very same arrivals in one pass of the scenarios (about
// 6 minutes). With -compare each detector instead runs the cluster itself
// in the detector-sensitive scenarios (about 20 minutes), so that its
// client errors and reroutes are its own. Node 1's heartbeats are recorded
// (`edge fd record` inside the lab) and replayed through `edge fd replay`,
// so live and predicted mistakes and detection times stand side by side.
//
// Needs root (namespaces, nftables): `make chaos`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/lab/chaos"
	"github.com/edgecache/edge/lab/fdlab"
)

const s = time.Second

// scenarios is the full fault list; quick ones are marked for -compare.
func scenarios() []struct {
	chaos.Scenario
	compare bool
} {
	type sc = struct {
		chaos.Scenario
		compare bool
	}
	return []sc{
		{chaos.Scenario{Name: "crash", Duration: 14 * s, Steps: []chaos.Step{{Fault: chaos.Crash{Node: 4}, At: 3 * s, For: 6 * s}}}, true},
		{chaos.Scenario{Name: "partition-one", Duration: 12 * s, Steps: []chaos.Step{{Fault: chaos.Partition{Group: []int{4}}, At: 3 * s, For: 5 * s}}}, true},
		{chaos.Scenario{Name: "partition-minority", Duration: 12 * s, Steps: []chaos.Step{{Fault: chaos.Partition{Group: []int{3, 4}}, At: 3 * s, For: 5 * s}}}, false},
		{chaos.Scenario{Name: "one-way", Duration: 12 * s, Steps: []chaos.Step{{Fault: chaos.OneWay{From: 4, To: 0}, At: 3 * s, For: 5 * s}}}, false},
		{chaos.Scenario{Name: "loss-5", Duration: 64 * s, Steps: []chaos.Step{{Fault: chaos.Loss{Share: 0.05}, At: 2 * s, For: 60 * s}}}, true},
		{chaos.Scenario{Name: "loss-20", Duration: 24 * s, Steps: []chaos.Step{{Fault: chaos.Loss{Share: 0.20}, At: 2 * s, For: 20 * s}}}, true},
		{chaos.Scenario{Name: "loss-bursts", Duration: 22 * s, Steps: []chaos.Step{{Fault: chaos.Loss{Share: 0.6}, At: 2 * s, For: 16 * s, Every: 4 * s, On: s}}}, true},
		{chaos.Scenario{Name: "delay-50", Duration: 64 * s, Steps: []chaos.Step{{Fault: chaos.Delay{Delay: 50 * time.Millisecond}, At: 2 * s, For: 60 * s}}}, true},
		{chaos.Scenario{Name: "jitter", Duration: 24 * s, Steps: []chaos.Step{{Fault: chaos.Delay{Delay: 20 * time.Millisecond, Jitter: 60 * time.Millisecond}, At: 2 * s, For: 20 * s}}}, false},
		{chaos.Scenario{Name: "spikes-300", Duration: 22 * s, Steps: []chaos.Step{{Fault: chaos.Delay{Delay: 300 * time.Millisecond}, At: 2 * s, For: 15 * s, Every: 5 * s, On: s}}}, true},
		{chaos.Scenario{Name: "flap", Duration: 22 * s, Steps: []chaos.Step{{Fault: chaos.Partition{Group: []int{4}}, At: 2 * s, For: 16 * s, Every: 4 * s, On: 2 * s}}}, false},
	}
}

type row struct {
	detector string
	shadow   bool // run beside the cluster's detector, not acted on
	res      *chaos.Result
	replay   *fdlab.Result // the recorded trace of node 1, replayed
}

func main() {
	bin := flag.String("edge", "bin/edge", "edge binary")
	detectors := flag.String("detectors", "ml,chen,phi,bertier,twowindows", "detectors: the first runs the cluster in every scenario, the others as shadow detectors beside it (or, with -compare, each runs the cluster in the -compare set); a detector may carry cluster.detector_params after slashes, e.g. ml/loss_model=2/loss_budget=0")
	only := flag.String("scenarios", "", "comma-separated scenario names (default all)")
	compare := flag.Bool("compare", false, "run the detector-sensitive scenarios again with each other detector running the cluster, instead of as shadows")
	traces := flag.String("traces", "", "directory for the recorded heartbeat traces (default a temporary one)")
	jsonOut := flag.String("json", "", "write every result as JSON here")
	accessLogs := flag.String("access-logs", "", "directory for the nodes' access logs (per detector run, overwritten)")
	warmup := flag.Duration("warmup", 12*time.Second, "heartbeats exchanged before each scenario's load and faults: detectors past their first 100 heartbeats, as in a running cluster")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := *traces
	if dir == "" {
		d, err := os.MkdirTemp("", "edge-chaos-")
		if err != nil {
			fail(err)
		}
		defer func() { _ = os.RemoveAll(d) }()
		dir = d
	}
	var want []string
	if *only != "" {
		want = strings.Split(*only, ",")
	}
	results := map[string][]row{} // scenario → rows
	var order []string
	dets := strings.Split(*detectors, ",")
	var shadows []string
	if !*compare {
		shadows = dets[1:]
	}
	for k, det := range dets {
		if k > 0 && !*compare {
			break
		}
		if ctx.Err() != nil {
			break
		}
		var list []chaos.Scenario
		for _, sc := range scenarios() {
			if (want == nil || slices.Contains(want, sc.Name)) && (k == 0 || sc.compare) {
				list = append(list, sc.Scenario)
			}
		}
		if len(list) == 0 {
			continue
		}
		// Every scenario on a fresh cluster: a fault's after-effects (a
		// margin grown on a lossy link, a detector's learned history) must
		// not carry into the next scenario's figures.
		for _, sc := range list {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "chaos: %s / %s (%v)\n", det, sc.Name, sc.Duration)
			rs, err := runScenario(ctx, *bin, det, shadows, *warmup, *accessLogs, filepath.Join(dir, strings.ReplaceAll(det, "/", "_")+"-"+sc.Name+".csv"), sc)
			if ctx.Err() != nil {
				break // interrupted: print what was measured
			}
			if err != nil {
				fail(err)
			}
			if _, ok := results[sc.Name]; !ok {
				order = append(order, sc.Name)
			}
			results[sc.Name] = append(results[sc.Name], rs...)
		}
	}
	print(os.Stdout, order, results)
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			fail(err)
		}
		all := map[string][]map[string]any{}
		for name, rows := range results {
			for _, r := range rows {
				all[name] = append(all[name], map[string]any{"detector": r.detector, "shadow": r.shadow, "live": r.res, "replay": r.replay})
			}
		}
		enc := json.NewEncoder(f)
		enc.SetIndent("", " ")
		_ = enc.Encode(all)
		_ = f.Close()
	}
	if ctx.Err() != nil {
		os.Exit(130)
	}
}

// runScenario starts a lab with the detector (and the shadow detectors
// beside it), records node 1's heartbeats (`edge fd record` inside the
// lab), runs the scenario, and replays the recording's scenario window
// through each detector. It returns the detector's row, then the shadows'.
func runScenario(ctx context.Context, bin, det string, shadows []string, warmup time.Duration, accessLogs, trace string, sc chaos.Scenario) ([]row, error) {
	name, params := splitDetector(det)
	lab, err := chaos.Start(ctx, chaos.Options{Bin: bin, Detector: name, DetectorParams: strings.Join(params, ","), Shadows: shadows, Warmup: warmup, AccessLogDir: accessLogs})
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	stopRec, err := lab.Record(ctx, trace)
	if err != nil {
		return nil, err
	}
	res, err := lab.Run(ctx, sc)
	recErr := stopRec()
	if err != nil {
		fmt.Fprintln(os.Stderr, "n1 stderr:", lab.Stderr("n1"))
		return nil, err
	}
	if recErr != nil {
		fmt.Fprintln(os.Stderr, "chaos: recording:", recErr)
	}
	rows := []row{{detector: det, res: res}}
	for _, sr := range res.Shadows {
		rows = append(rows, row{detector: sr.Detector, shadow: true, res: sr})
	}
	res.Shadows = nil // each is its own row
	for i := range rows {
		if recErr == nil {
			rows[i].replay = replay(bin, trace, rows[i].detector, res.From, res.To)
		}
	}
	return rows, nil
}

// splitDetector splits a -detectors entry "name/k=v/…" into the detector
// and its cluster.detector_params.
func splitDetector(spec string) (string, []string) {
	parts := strings.Split(spec, "/")
	return parts[0], parts[1:]
}

// replay runs `edge fd replay` over the window [from, to) of a recorded
// trace with the detector.
func replay(bin, trace, det string, from, to time.Time) *fdlab.Result {
	name, params := splitDetector(det)
	args := []string{"fd", "replay", "--trace", trace, "--detector", name, "--period", "100ms", "--json",
		"--from-ns", fmt.Sprint(from.UnixNano()), "--to-ns", fmt.Sprint(to.UnixNano())}
	// The live nodes run with the default cluster.loss_budget and
	// cluster.loss_estimator unless the detector's parameters set them; so
	// does the replay.
	p, err := fdetect.ParseParams(params)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: detector %s: %v\n", det, err)
		return nil
	}
	p.AddDefaults(fdetect.Params{fdetect.LossBudgetParam: fdetect.DefaultLossBudget, fdetect.LossEstimatorParam: float64(fdetect.DefaultLossEstimator)})
	for _, name := range slices.Sorted(maps.Keys(p)) {
		args = append(args, "--param", fmt.Sprintf("%s=%g", name, p[name]))
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: edge fd replay %s: %v\n", trace, err)
		return nil
	}
	var rr fdlab.ReplayResult
	if err := json.Unmarshal(out, &rr); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: edge fd replay output: %v\n", err)
		return nil
	}
	return &rr.Overall
}

func print(w io.Writer, order []string, results map[string][]row) {
	for _, name := range order {
		rows := results[name]
		fmt.Fprintf(w, "\n### %s: %s\n\n", name, describe(rows[0].res))
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		fmt.Fprintln(tw, "| detector\t| requests\t| client errors\t| wrong/stale\t| detect p50 / max ms\t| detect p50: reaching others / cut off from all\t| missed\t| heal max ms\t| false susp. (live)\t| per link-hour\t| per pair-onset max\t| clear max ms\t| n1 false (live)\t| n1 mistakes (replay)\t| replay detect ms\t| origin/page/side max\t| rerouted (wrongly)\t| peer answers from origin (crawls)\t| false deaths\t| deaths (cut, crashed; agreed)\t| dead everywhere ms\t| members whole ms\t|")
		fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
		for _, r := range rows {
			res := r.res
			var det, alone, heal, clear []float64
			missed, notHealed, falseS, n1False, perPair, errs, perSide := 0, 0, res.BaselineSuspicions, 0, 0, 0, 0
			for _, st := range res.Steps {
				det = append(det, st.DetectMs...)
				alone = append(alone, st.AloneMs...)
				heal = append(heal, st.HealMs...)
				clear = append(clear, st.ClearMs...)
				missed += st.Missed
				notHealed += st.NotHealed
				falseS += st.FalseSuspicions
				if len(st.FalseByObserver) > 0 {
					n1False += st.FalseByObserver[0]
				}
				perPair = max(perPair, st.PerPairOnsetMax)
				perSide = max(perSide, st.OriginPerPageSideMax)
			}
			errs = int(res.Load.Errors) - res.ErrorsOutside // an error in flight across two faults counts once
			label := r.detector
			if r.shadow {
				// The load is the run's: its errors are the cluster
				// detector's, not this one's.
				label += " (shadow)"
			}
			stale := "no"
			if res.Load.MaxAgeS > 60 {
				stale = fmt.Sprintf("Age %d s", res.Load.MaxAgeS)
			}
			healS := fmtMax(heal)
			if notHealed > 0 {
				healS += fmt.Sprintf(" (%d not)", notHealed)
			}
			rep, repDet := "–", "–"
			if r.replay != nil {
				rep = fmt.Sprint(r.replay.Mistakes)
				repDet = fmt.Sprintf("%.0f", r.replay.DetectMeanMs)
			}
			side := "–"
			if perSide > 0 {
				side = fmt.Sprint(perSide)
			}
			rerouted, falseDeaths, deaths, deadEverywhere, membersWhole := membership(r)
			fmt.Fprintf(tw, "| %s\t| %d\t| %d (%d in faults)\t| %d / %s\t| %s / %s\t| %s\t| %d\t| %s\t| %d\t| %.2f\t| %d\t| %s\t| %d\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t|\n",
				label, res.Load.Requests, res.Load.Errors, errs, res.Load.Wrong, stale,
				fmtP50(det), fmtMax(det), bySide(det, alone), missed, healS, falseS, float64(falseS)/(res.LinkSeconds/3600), perPair, fmtMax(clear),
				n1False, rep, repDet, side, rerouted, fromOrigin(r), falseDeaths, deaths, deadEverywhere, membersWhole)
		}
		_ = tw.Flush()
	}
}

// fromOrigin is the run's peer answers finished from the origin (after a
// break, a stall or a crawl), with the crawls on a lossy link apart; a
// shadow detector's row gets a dash.
func fromOrigin(r row) string {
	if r.shadow {
		return "–"
	}
	pr := r.res.PeerResumes
	return fmt.Sprintf("%d (%d)", pr["ok"]+pr["raced"]+pr["crawl_raced"], pr["crawl_raced"])
}

// bySide splits the detections det into those by observers that still
// reach another node and those (alone, a subset of det) by observers cut
// off from every other node, as p50s: a partition's island cannot tell its
// isolation from a delay on every link (the shared-silence hold).
func bySide(det, alone []float64) string {
	if len(alone) == 0 {
		return "–"
	}
	rest := slices.Clone(det)
	for _, a := range alone {
		if i := slices.Index(rest, a); i >= 0 {
			rest = slices.Delete(rest, i, i+1)
		}
	}
	return fmtP50(rest) + " / " + fmtP50(alone)
}

// membership formats the run's routing and memberlist figures: requests
// rerouted (and rerouted by suspicions that were wrong), false deaths (in
// steps and outside them), deaths a cut or crash explains, the slowest
// crash's time to dead everywhere, and the slowest return to a whole
// membership after a fault. They are the run's, not a shadow detector's:
// shadows get dashes.
func membership(r row) (rerouted, falseDeaths, deaths, deadEverywhere, whole string) {
	if r.shadow {
		return "–", "–", "–", "–", "–"
	}
	rerouted = fmt.Sprintf("%d (%d)", r.res.Rerouted, r.res.ReroutedWrongly)
	f, d, agreed, notHealed := r.res.BaselineDeaths, 0, 0, 0
	var dead, heal []float64
	for _, st := range r.res.Steps {
		f += st.FalseDeaths
		d += st.Deaths
		agreed += st.AgreedDeaths
		dead = append(dead, st.DeadEverywhereMs...)
		heal = append(heal, st.MemberHealMs...)
		notHealed += st.MemberNotHealed
	}
	whole = fmtMax(heal)
	if notHealed > 0 {
		whole += fmt.Sprintf(" (%d not)", notHealed)
	}
	deaths = fmt.Sprint(d)
	if agreed > 0 {
		deaths += fmt.Sprintf(" (%d agreed)", agreed)
	}
	return rerouted, fmt.Sprint(f), deaths, fmtMax(dead), whole
}

func describe(r *chaos.Result) string {
	var f []string
	for _, st := range r.Steps {
		f = append(f, fmt.Sprintf("%s ×%d", st.Fault, st.Onsets))
	}
	return strings.Join(f, "; ")
}

func fmtP50(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	c := slices.Clone(v)
	sort.Float64s(c)
	return fmt.Sprintf("%.0f", c[len(c)/2])
}

func fmtMax(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", slices.Max(v))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(1)
}
