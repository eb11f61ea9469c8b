package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgecache/edge/load"
)

// Step is one fault on a schedule: on at At for For; with Every > 0 it
// flaps instead, on for On at the start of every Every inside [At, At+For).
type Step struct {
	Fault     Fault
	At, For   time.Duration
	Every, On time.Duration
}

// onsets returns the step's on intervals, relative to the scenario start.
func (s Step) onsets() [][2]time.Duration {
	if s.Every <= 0 {
		return [][2]time.Duration{{s.At, s.At + s.For}}
	}
	var out [][2]time.Duration
	for t := s.At; t < s.At+s.For; t += s.Every {
		out = append(out, [2]time.Duration{t, min(t+s.On, s.At+s.For)})
	}
	return out
}

// Scenario is a fault script under load.
type Scenario struct {
	Name     string
	Duration time.Duration // of the load; faults must end before it does
	Steps    []Step
	Rate     float64 // requests per second over all clients (default 200)
	// Timeout is each client request's limit, header and body (default
	// 10 s): a request that has not finished by then is a client error.
	Timeout time.Duration
}

// StepResult scores one step.
type StepResult struct {
	Fault  string
	Onsets int
	// Detection: for each onset and each (observer, peer) pair the fault
	// cuts, the time to the observer's suspicion.
	DetectMs []float64
	// AloneMs are the detections among DetectMs by observers the fault
	// cuts off from every other node (a partition's island): with the
	// shared-silence hold such an observer cannot tell its isolation from
	// a delay on every link, and suspects when the hold ends.
	AloneMs []float64
	Missed  int // cut pairs never suspected while the fault was on
	// HealMs is, per onset, the time from the fault's end until every node
	// trusted every running peer again; NotHealed counts onsets after which
	// that did not happen before the next onset or the end.
	HealMs    []float64
	NotHealed int
	// Suspicions of pairs the fault does not cut, while it was on or
	// within Grace after: mistakes it caused. PerPairOnsetMax is the most
	// any one pair had in one onset; ClearMs how long each lasted.
	FalseSuspicions int
	FalseByObserver []int // the same, by observing node
	PerPairOnsetMax int
	ClearMs         []float64
	// AfterOnsetMs is, per false suspicion, how long after its onset's
	// start it came: the first second of a loss fault (each link's
	// estimates still empty) or later.
	AfterOnsetMs []float64
	// Client errors while the fault was on (and up to 2 s after).
	Errors int
	// For partitions: the most origin requests for one page from one side
	// during an onset, and how many pages went to the origin more than
	// once from one side.
	OriginPerPageSideMax int
	PagesOverOnePerSide  int
	// Membership (memberlist's agreed deaths, as each node's status page
	// shows them, polled every 100 ms): Deaths are removals of a peer by
	// an observer the fault cuts it from, or of a crashed peer;
	// FalseDeaths removals of a running peer by an observer it was not
	// cut from. DeadEverywhereMs is, per crash onset, the time until
	// every running node had removed the crashed one (none if it was back
	// first); MemberHealMs, per onset, the time from the fault's end until
	// every node had every other as a member again.
	Deaths           int
	AgreedDeaths     int // of Deaths: by an observer not cut from the peer, which most nodes were cut from
	FalseDeaths      int
	FalseDeathPairs  []string // each false death as "observer removed peer, +s from the step's onset"
	DeadEverywhereMs []float64
	MemberHealMs     []float64
	MemberNotHealed  int
}

// Result is a scenario's outcome.
type Result struct {
	Name     string
	Detector string
	From, To time.Time // the scenario's span, as a recording's window
	Load     load.Summary
	Steps    []StepResult
	// Suspicions outside every step (and its grace): the baseline mistake
	// count, over LinkSeconds of monitored links.
	BaselineSuspicions int
	LinkSeconds        float64
	// ErrorsOutside are client errors whose requests were in flight during
	// no step's window.
	ErrorsOutside int
	// Rerouted are requests sent to a page's next home because the
	// ingress suspected the home, summed over every node and peer during
	// the scenario; ReroutedWrongly those of suspicions that turned out
	// wrong. Like membership, they are the run's.
	Rerouted, ReroutedWrongly uint64
	// PeerResumes are the peer answers finished from the origin during the
	// scenario, summed over the nodes, by outcome (status.json
	// peer_body_resumes: ok after a break, raced after a stall, crawl_raced
	// for a crawl on a lossy link, …). Like membership, they are the run's.
	PeerResumes map[string]int64 `json:",omitempty"`
	// BaselineDeaths are membership removals outside every step (and its
	// grace): deaths no fault explains. Membership is the run's, so a
	// shadow detector's result leaves the membership figures empty.
	BaselineDeaths     int
	BaselineDeathPairs []string // each as "observer removed peer, +s from the scenario's start"
	// Shadows are the shadow detectors' results (Options.Shadows), scored
	// on their own transitions in the same run: detection, mistakes and
	// healing are theirs; the load, client errors and origin figures are
	// the run's, which only Detector acted on.
	Shadows []*Result `json:",omitempty"`
}

// grace is how long after a fault ends its after-effects count as its own
// (a late suspicion, a healing link).
const grace = 2 * time.Second

type pairKey struct{ o, p int }

// Run plays the scenario: load from the client namespace against every node
// that no step crashes, the steps on schedule, the views polled throughout,
// then scores it.
func (l *Lab) Run(ctx context.Context, sc Scenario) (*Result, error) {
	if sc.Rate == 0 {
		sc.Rate = 200
	}
	if sc.Timeout == 0 {
		sc.Timeout = 10 * time.Second
	}
	var targets []string
	for i := range l.nodes {
		if !slices.ContainsFunc(sc.Steps, func(s Step) bool { return s.Fault.crashes(i) }) {
			targets = append(targets, l.PublicURL(i))
		}
	}
	type event struct {
		at   time.Duration
		step int
		on   bool
	}
	var events []event
	for k, s := range sc.Steps {
		for _, iv := range s.onsets() {
			if iv[1] > sc.Duration {
				return nil, fmt.Errorf("chaos: %s: step %s ends after the load", sc.Name, s.Fault)
			}
			events = append(events, event{iv[0], k, true}, event{iv[1], k, false})
		}
	}
	sort.SliceStable(events, func(a, b int) bool { return events[a].at < events[b].at })

	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(l.opts.Warmup):
	}
	hist := newHistories()
	shadowHist := map[string]*histories{}
	for _, name := range l.opts.Shadows {
		shadowHist[name] = newHistories()
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	var pollWG sync.WaitGroup
	pollWG.Add(1)
	members := newHistories()
	var rr reroutes
	go func() { defer pollWG.Done(); l.poll(pollCtx, hist, shadowHist, members, &rr) }()

	resumesBefore := l.resumes(ctx)
	start := time.Now()
	loadOut := make(chan loadResult, 1)
	go func() { loadOut <- l.runLoad(ctx, targets, sc) }()

	on := make([]int, len(sc.Steps)) // onsets currently on, per step
	// The faults' real intervals: when the network matched the script (an
	// nftables load takes tens of milliseconds), which scoring measures from.
	ivs := make([][][2]time.Time, len(sc.Steps))
	snapshots := map[int][]map[string]map[string]int{}
	var applyErr error
	for _, ev := range events {
		select {
		case <-ctx.Done():
			applyErr = ctx.Err()
		case <-time.After(time.Until(start.Add(ev.at))):
		}
		if applyErr != nil {
			break
		}
		if ev.on {
			on[ev.step]++
		} else {
			on[ev.step]--
		}
		var active []Fault
		for k, n := range on {
			if n > 0 {
				active = append(active, sc.Steps[k].Fault)
			}
		}
		if _, ok := sc.Steps[ev.step].Fault.(Partition); ok {
			snap, _ := l.originByRemote(ctx)
			snapshots[ev.step] = append(snapshots[ev.step], snap)
		}
		if err := l.apply(ctx, active); err != nil {
			applyErr = err
			break
		}
		if ev.on {
			ivs[ev.step] = append(ivs[ev.step], [2]time.Time{time.Now()})
		} else if x := ivs[ev.step]; len(x) > 0 {
			x[len(x)-1][1] = time.Now()
		}
	}
	lr := <-loadOut
	_ = l.apply(context.WithoutCancel(ctx), nil) // whatever happened, heal
	// Views keep being read for a while after the load, so that a fault
	// ending near the end is still seen to heal.
	healWait := time.Now().Add(10 * time.Second)
	for time.Now().Before(healWait) && ctx.Err() == nil && l.disagreement(ctx) != "" {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	stopPoll()
	pollWG.Wait()
	if applyErr != nil {
		return nil, applyErr
	}
	if lr.err != nil {
		return nil, lr.err
	}
	end := time.Now()
	res := &Result{Name: sc.Name, Detector: l.opts.Detector, Load: lr.summary, From: start, To: end}
	l.score(res, sc, ivs, start, lr.start, end, hist, snapshots)
	l.scoreMembership(res, sc, ivs, start, end, members)
	res.Rerouted, res.ReroutedWrongly = rr.all, rr.wrongly
	res.PeerResumes = l.resumes(ctx)
	for outcome, n := range resumesBefore {
		res.PeerResumes[outcome] -= n
	}
	for _, name := range l.opts.Shadows {
		sr := &Result{Name: sc.Name, Detector: name, Load: lr.summary, From: start, To: end}
		l.score(sr, sc, ivs, start, lr.start, end, shadowHist[name], snapshots)
		res.Shadows = append(res.Shadows, sr)
	}
	return res, nil
}

type loadResult struct {
	summary load.Summary
	start   time.Time
	err     error
}

// runLoad runs `edge load` in the client namespace.
func (l *Lab) runLoad(ctx context.Context, targets []string, sc Scenario) loadResult {
	cmd := l.client.Command(ctx, l.opts.Bin, "load", "--target", strings.Join(targets, ","),
		"--zipf", "0.9", "--pages", "2000", "--hot-share", "0.1", "--hot-path", "/p/0",
		"--rate", strconv.FormatFloat(sc.Rate, 'f', -1, 64), "--duration", sc.Duration.String(),
		"--timeout", sc.Timeout.String(), "--verify-pages", "--json", "--host", "www.chaos.test")
	cmd.Env = l.nodeEnv()
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return loadResult{err: fmt.Errorf("chaos: edge load: %w", err)}
	}
	var v struct {
		Summary load.Summary `json:"summary"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return loadResult{err: fmt.Errorf("chaos: edge load output: %w", err)}
	}
	return loadResult{summary: v.Summary, start: start}
}

// originByRemote reads the origin's per-address, per-path request counts.
func (l *Lab) originByRemote(ctx context.Context) (map[string]map[string]int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.OriginURL()+"/_stats?by_remote=1", nil)
	resp, err := l.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		ByRemote map[string]map[string]int `json:"by_remote"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&v)
	return v.ByRemote, err
}

// histories merges the transitions each node reports for each peer: a
// status page keeps the last 20, so it is read often and merged.
type histories struct {
	mu   sync.Mutex
	seen map[pairKey]map[time.Time]bool
}

func newHistories() *histories {
	return &histories{seen: map[pairKey]map[time.Time]bool{}}
}

func (h *histories) add(o, p int, t transition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := pairKey{o, p}
	if h.seen[k] == nil {
		h.seen[k] = map[time.Time]bool{}
	}
	h.seen[k][t.At] = t.Trusted
}

// sorted returns the pair's transitions in time order.
func (h *histories) sorted(o, p int) []transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []transition
	for at, trusted := range h.seen[pairKey{o, p}] {
		out = append(out, transition{At: at, Trusted: trusted})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].At.Before(out[b].At) })
	return out
}

// reroutes sums the growth of every pair's reroute counters across polls;
// a counter that went down belongs to a restarted node and counts from 0.
// Only poll's goroutine uses it until the poll ends.
type reroutes struct {
	prev         map[pairKey][2]uint64
	all, wrongly uint64
}

func (r *reroutes) add(k pairKey, all, wrongly uint64) {
	if r.prev == nil {
		r.prev = map[pairKey][2]uint64{}
	}
	prev, seen := r.prev[k]
	r.prev[k] = [2]uint64{all, wrongly}
	if !seen {
		return // the first poll is the baseline
	}
	grow := func(now, before uint64) uint64 {
		if now < before {
			return now
		}
		return now - before
	}
	r.all += grow(all, prev[0])
	r.wrongly += grow(wrongly, prev[1])
}

// poll reads every node's views every 100 ms until ctx ends: the node's
// own detector's transitions into h, each shadow detector's into shadows,
// and each change of a peer's membership (at the poll that saw it: the
// status page keeps no membership history) into members.
func (l *Lab) poll(ctx context.Context, h *histories, shadows map[string]*histories, members *histories, rr *reroutes) {
	lastMember := map[pairKey]bool{}
	ids := map[string]int{}
	for i := range l.nodes {
		ids[nodeName(i)] = i
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for o := range l.nodes {
			vs, err := l.views(ctx, o)
			if err != nil {
				continue // crashed, or restarting
			}
			for _, v := range vs {
				p, ok := ids[v.ID]
				if !ok {
					continue
				}
				for _, t := range v.History {
					h.add(o, p, t)
				}
				rr.add(pairKey{o, p}, v.Rerouted, v.ReroutedWrongly)
				if was, ok := lastMember[pairKey{o, p}]; !ok || was != v.Member {
					lastMember[pairKey{o, p}] = v.Member
					at := time.Now()
					if !ok {
						at = time.Time{} // the state found at the first poll, not a change
					}
					members.add(o, p, transition{At: at, Trusted: v.Member})
				}
				for name, ts := range v.Shadows {
					if sh := shadows[name]; sh != nil {
						for _, t := range ts {
							sh.add(o, p, t)
						}
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// score turns the merged views, the load summary and the origin snapshots
// into the scenario's result.
func (l *Lab) score(res *Result, sc Scenario, ivs [][][2]time.Time, start, loadStart, end time.Time, h *histories, snapshots map[int][]map[string]map[string]int) {
	n := len(l.nodes)
	// covered reports whether a suspicion of p by o at t belongs to a step
	// (on, or within grace after), and to which.
	owner := func(o, p int, t time.Time) (step int, cut bool) { return ownerAt(sc, ivs, o, p, t) }
	crashedAt := func(i int, t time.Time) bool { return crashedAt(sc, ivs, i, t) }
	// A restarted node distrusts every peer until it hears from it, but
	// records no transition for that: its views start suspected.
	for k, s := range sc.Steps {
		for i := range n {
			if !s.Fault.crashes(i) {
				continue
			}
			for _, iv := range ivs[k] {
				for p := range n {
					if p != i {
						h.add(i, p, transition{At: iv[1], Trusted: false})
					}
				}
			}
		}
	}
	res.Steps = make([]StepResult, len(sc.Steps))
	for k, s := range sc.Steps {
		res.Steps[k] = StepResult{Fault: s.Fault.String(), Onsets: len(ivs[k]), FalseByObserver: make([]int, n)}
	}
	for o := range n {
		for p := range n {
			if o == p {
				continue
			}
			ts := h.sorted(o, p)
			// Mistakes: each suspicion outside a cut of this pair.
			perOnset := map[[2]int]int{}
			for x, t := range ts {
				if t.Trusted || t.At.Before(start) || crashedAt(o, t.At) {
					continue
				}
				k, cut := owner(o, p, t.At)
				if cut {
					continue
				}
				if k < 0 {
					res.BaselineSuspicions++
					continue
				}
				sr := &res.Steps[k]
				sr.FalseSuspicions++
				sr.FalseByObserver[o]++
				onset := onsetOf(ivs[k], t.At)
				if onset >= 0 {
					sr.AfterOnsetMs = append(sr.AfterOnsetMs, ms(t.At.Sub(ivs[k][onset][0])))
				}
				perOnset[[2]int{k, onset}]++
				sr.PerPairOnsetMax = max(sr.PerPairOnsetMax, perOnset[[2]int{k, onset}])
				if x+1 < len(ts) {
					sr.ClearMs = append(sr.ClearMs, ms(ts[x+1].At.Sub(t.At)))
				}
			}
			// Detections: the first suspicion in each cut onset.
			for k, s := range sc.Steps {
				if !s.Fault.cut(o, p) || s.Fault.crashes(o) {
					continue
				}
				for _, iv := range ivs[k] {
					from, to := iv[0], iv[1]
					alone := true
					for q := range n {
						if q != o && !s.Fault.cut(o, q) {
							alone = false
						}
					}
					detected := func(d float64) {
						res.Steps[k].DetectMs = append(res.Steps[k].DetectMs, d)
						if alone {
							res.Steps[k].AloneMs = append(res.Steps[k].AloneMs, d)
						}
					}
					if suspectedAt(ts, from) {
						detected(0)
						continue
					}
					found := false
					for _, t := range ts {
						if !t.Trusted && !t.At.Before(from) && !t.At.After(to) {
							detected(ms(t.At.Sub(from)))
							found = true
							break
						}
					}
					if !found {
						res.Steps[k].Missed++
					}
				}
			}
		}
	}
	// Healing: after each onset, the first moment every pair is trusted.
	for k := range sc.Steps {
		for _, iv := range ivs[k] {
			from := iv[1]
			// Until the next fault starts (this step's next onset or
			// another step's): after that, split views are its doing.
			if at, ok := l.allTrusted(h, from, nextOnset(ivs, from, end)); ok {
				res.Steps[k].HealMs = append(res.Steps[k].HealMs, ms(at.Sub(from)))
			} else {
				res.Steps[k].NotHealed++
			}
		}
	}
	// Client errors by step: a request in flight during a fault's window
	// (sent before its end, failed after its start) is the fault's, so a
	// request cut at once and one that times out 10 s later count alike.
	for i, e := range res.Load.ErrorTimes {
		t := loadStart.Add(time.Duration(e * float64(time.Second)))
		sent := t
		if i < len(res.Load.ErrorStarts) {
			sent = loadStart.Add(time.Duration(res.Load.ErrorStarts[i] * float64(time.Second)))
		}
		inSome := false
		for k := range sc.Steps {
			for _, iv := range ivs[k] {
				if !t.Before(iv[0]) && sent.Before(iv[1].Add(grace)) {
					res.Steps[k].Errors++
					inSome = true
					break // once per step, though flapping onsets' windows overlap
				}
			}
		}
		if !inSome {
			res.ErrorsOutside++
		}
	}
	// Origin requests per page per side, for partitions.
	for k, s := range sc.Steps {
		p, ok := s.Fault.(Partition)
		if !ok {
			continue
		}
		snaps := snapshots[k]
		for x := 0; x+1 < len(snaps); x += 2 {
			l.scoreSides(&res.Steps[k], p, snaps[x], snaps[x+1])
		}
	}
	// Exposure: every ordered pair of running nodes, all along.
	res.LinkSeconds = float64(n*(n-1)) * end.Sub(start).Seconds()
}

// ownerAt returns the step whose fault (on, or within grace after) cuts
// o from p at t, with cut true; else the last step on at t, or -1.
func ownerAt(sc Scenario, ivs [][][2]time.Time, o, p int, t time.Time) (step int, cut bool) {
	step = -1
	for k, s := range sc.Steps {
		for _, iv := range ivs[k] {
			if !t.Before(iv[0]) && t.Before(iv[1].Add(grace)) {
				if s.Fault.cut(o, p) {
					return k, true
				}
				step = k
			}
		}
	}
	return step, false
}

// cutFromMost reports whether fault cuts node p from more than half of the
// other n − 1 nodes: enough of memberlist's probers fail to reach it that
// an agreed death of p is the cluster's decision, not a mistake, even as
// seen by a node on p's side.
func cutFromMost(f Fault, n, p int) bool {
	cut := 0
	for q := range n {
		if q != p && f.cut(q, p) {
			cut++
		}
	}
	return 2*cut > n-1
}

// onsetBefore is the start of the last interval of ivs that began by t.
func onsetBefore(ivs [][2]time.Time, t time.Time) time.Time {
	var at time.Time
	for _, iv := range ivs {
		if !iv[0].After(t) {
			at = iv[0]
		}
	}
	return at
}

// crashedAt reports whether node i was down at t, or restarted less than
// grace before (a restarted node needs a moment to hear its peers).
func crashedAt(sc Scenario, ivs [][][2]time.Time, i int, t time.Time) bool {
	for k, s := range sc.Steps {
		if !s.Fault.crashes(i) {
			continue
		}
		for _, iv := range ivs[k] {
			if !t.Before(iv[0]) && t.Before(iv[1].Add(grace)) {
				return true
			}
		}
	}
	return false
}

// scoreMembership scores memberlist's agreed deaths from the polled
// membership changes: a removal is explained by a crash of the peer or a
// cut between the pair (while the fault is on or within grace after),
// else it is a false death; then, per crash onset, how long until every
// running node removed the crashed one, and per onset how long until the
// membership was whole again.
func (l *Lab) scoreMembership(res *Result, sc Scenario, ivs [][][2]time.Time, start, end time.Time, members *histories) {
	n := len(l.nodes)
	for o := range n {
		for p := range n {
			if o == p {
				continue
			}
			for _, t := range members.sorted(o, p) {
				if t.Trusted || t.At.Before(start) || crashedAt(sc, ivs, o, t.At) {
					continue
				}
				// A crash cuts every observer from the crashed node.
				step, explained := ownerAt(sc, ivs, o, p, t.At)
				switch {
				case explained:
					res.Steps[step].Deaths++
				case step >= 0 && cutFromMost(sc.Steps[step].Fault, n, p):
					// memberlist's death is the cluster's decision: once the
					// nodes cut from p agree, it reaches p's own side too.
					res.Steps[step].Deaths++
					res.Steps[step].AgreedDeaths++
				case step >= 0:
					res.Steps[step].FalseDeaths++
					res.Steps[step].FalseDeathPairs = append(res.Steps[step].FalseDeathPairs,
						fmt.Sprintf("%s removed %s, +%.1fs", nodeName(o), nodeName(p), t.At.Sub(onsetBefore(ivs[step], t.At)).Seconds()))
				default:
					res.BaselineDeaths++
					res.BaselineDeathPairs = append(res.BaselineDeathPairs,
						fmt.Sprintf("%s removed %s, +%.1fs", nodeName(o), nodeName(p), t.At.Sub(start).Seconds()))
				}
			}
		}
	}
	for k, s := range sc.Steps {
		for _, iv := range ivs[k] {
			for p := range n {
				if !s.Fault.crashes(p) {
					continue
				}
				// The last running observer's first removal of p while
				// it was down.
				var last time.Time
				all := true
				for o := range n {
					if o == p || s.Fault.crashes(o) {
						continue
					}
					var first time.Time
					for _, t := range members.sorted(o, p) {
						if !t.Trusted && !t.At.Before(iv[0]) && t.At.Before(iv[1]) {
							first = t.At
							break
						}
					}
					if first.IsZero() {
						all = false
						break
					}
					last = maxTime(last, first)
				}
				if all {
					res.Steps[k].DeadEverywhereMs = append(res.Steps[k].DeadEverywhereMs, ms(last.Sub(iv[0])))
				}
			}
			if at, ok := l.allTrusted(members, iv[1], nextOnset(ivs, iv[1], end)); ok {
				res.Steps[k].MemberHealMs = append(res.Steps[k].MemberHealMs, ms(at.Sub(iv[1])))
			} else {
				res.Steps[k].MemberNotHealed++
			}
		}
	}
}

// nextOnset is the first fault onset after from (of any step), or end.
func nextOnset(ivs [][][2]time.Time, from, end time.Time) time.Time {
	until := end
	for _, other := range ivs {
		for _, o := range other {
			if o[0].After(from) && o[0].Before(until) {
				until = o[0]
			}
		}
	}
	return until
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (l *Lab) scoreSides(sr *StepResult, p Partition, before, after map[string]map[string]int) {
	side := map[string]int{} // address → side
	for i, h := range l.nodes {
		if slices.Contains(p.Group, i) {
			side[h.Addr.String()] = 1
		}
	}
	counts := map[[2]string]int{} // (side, path) → origin requests
	for addr, paths := range after {
		if _, node := l.nodeByAddr(addr); !node {
			continue
		}
		for path, c := range paths {
			if d := c - before[addr][path]; d > 0 {
				counts[[2]string{strconv.Itoa(side[addr]), path}] += d
			}
		}
	}
	for _, c := range counts {
		sr.OriginPerPageSideMax = max(sr.OriginPerPageSideMax, c)
		if c > 1 {
			sr.PagesOverOnePerSide++
		}
	}
}

func (l *Lab) nodeByAddr(addr string) (int, bool) {
	for i, h := range l.nodes {
		if h.Addr.String() == addr {
			return i, true
		}
	}
	return 0, false
}

// allTrusted returns when the views settled whole in [from, until): the
// start of the last stretch in which every pair's last transition says
// trusted and that lasts to until. A suspicion after a first whole moment
// (a late detection of the fault) starts the wait again.
func (l *Lab) allTrusted(h *histories, from, until time.Time) (time.Time, bool) {
	n := len(l.nodes)
	candidates := []time.Time{from}
	all := map[pairKey][]transition{}
	for o := range n {
		for p := range n {
			if o != p {
				ts := h.sorted(o, p)
				all[pairKey{o, p}] = ts
				for _, t := range ts {
					if t.At.After(from) && t.At.Before(until) {
						candidates = append(candidates, t.At)
					}
				}
			}
		}
	}
	slices.SortFunc(candidates, func(a, b time.Time) int { return a.Compare(b) })
	var settled time.Time
	for _, c := range candidates {
		whole := true
		for _, ts := range all {
			if suspectedAt(ts, c) {
				whole = false
				break
			}
		}
		switch {
		case !whole:
			settled = time.Time{}
		case settled.IsZero():
			settled = c
		}
	}
	return settled, !settled.IsZero()
}

// suspectedAt reports whether the last transition at or before t is a
// suspicion.
func suspectedAt(ts []transition, t time.Time) bool {
	s := false
	for _, x := range ts {
		if x.At.After(t) {
			break
		}
		s = !x.Trusted
	}
	return s
}

func onsetOf(ivs [][2]time.Time, t time.Time) int {
	for x, iv := range ivs {
		if !t.Before(iv[0]) && t.Before(iv[1].Add(grace)) {
			return x
		}
	}
	return -1
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
