// Command membership measures cluster membership with real processes on
// this machine (docs/cluster.md, "Membership at 3, 24 and 100 nodes"): it
// starts a demo origin and N `edge serve` processes with a light
// configuration (small caches and indicators), each given the first three
// as seeds, and reads every node's log (JSON) for the membership events,
// so that measuring costs the nodes nothing. It reports:
//
//   - startup: until every node has every other in its membership;
//
//   - join: a new node, until it is a member at every node;
//
//   - crash: a SIGKILLed node, until it is out of the routing view of
//     every node that heartbeated it (its local detector) and out of the
//     membership everywhere (memberlist's agreed death);
//
//   - restart: the same node again, until it is a member everywhere;
//
//   - soak: with nothing killed for -soak (optionally with both cores
//     kept busy, -busy), the false deaths (member left) and local
//     suspicions, and per node per second the CPU, heartbeat packets and
//     membership packets.
//
//     go run ./scripts/membership -nodes 24 [-soak 10m] [-busy] [-json out.json]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgecache/edge/internal/promtext"
)

// event is one membership line of one node's log.
type event struct {
	at       time.Time
	observer string
	msg      string
	peer     string
	peers    string // "configured peers not in the membership leave the ring"
}

type node struct {
	id, pub, adm, peer string
	cmd                *exec.Cmd
	started            time.Time
}

type run struct {
	bin, origin string
	logDir      string // each node's log is also written here, if set
	seeds       []string
	extra       []string
	mu          sync.Mutex
	events      []event
	nodes       map[string]*node
}

func main() {
	n := flag.Int("nodes", 24, "cluster size")
	soak := flag.Duration("soak", time.Minute, "time with nothing killed, for false deaths and the cost per node")
	busy := flag.Bool("busy", false, "keep every core busy (one spinning process per core) during the soak")
	bin := flag.String("edge", "bin/edge", "edge binary")
	serveArgs := flag.String("serve-args", "", "extra edge serve arguments")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	rollingRate := flag.Float64("rolling-rate", 0, "after the soak, restart every node in turn (drained from the load's rotation, SIGTERM, started again, back in rotation once ready and a member everywhere) under this many requests per second; 0 skips it")
	logDir := flag.String("log-dir", "", "also write each node's log (JSON) to a file in this directory")
	base := flag.Int("port-base", 30000, "node i listens on base+i (public), base+1000+i (admin), base+2000+i (cluster)")
	flag.Parse()
	if *logDir != "" {
		if err := os.MkdirAll(*logDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "membership: -log-dir:", err)
			os.Exit(2)
		}
	}
	r := &run{bin: *bin, nodes: map[string]*node{}, extra: strings.Fields(*serveArgs), logDir: *logDir}
	res, err := r.measure(*n, *base, *soak, *busy, *rollingRate)
	r.stopAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "membership:", err)
		os.Exit(1)
	}
	res.print(os.Stdout)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "membership:", err)
			os.Exit(1)
		}
	}
}

// results are the figures, durations in seconds.
type results struct {
	Nodes         int     `json:"nodes"`
	Date          string  `json:"date"`
	Busy          bool    `json:"busy"`
	StartupS      float64 `json:"startup_converged_s"`
	JoinS         float64 `json:"join_everywhere_s"`
	CrashLocalS   float64 `json:"crash_out_of_monitors_views_s"`
	CrashMonitors int     `json:"crash_monitors"`
	CrashDeadS    float64 `json:"crash_dead_everywhere_s"`
	RestartS      float64 `json:"restart_back_everywhere_s"`
	SoakS         float64 `json:"soak_s"`
	// FalseDeaths counts "member left" lines, one per observer; a
	// node declared dead is logged by nearly every other, so the
	// distinct deaths are FalseDeathEpisodes (a node's lines within 15 s
	// of each other are one death) of FalseDeadNodes nodes.
	FalseDeaths        int      `json:"soak_false_deaths"`
	FalseDeathEpisodes int      `json:"soak_false_death_episodes"`
	FalseDeadNodes     []string `json:"soak_false_dead_nodes,omitempty"`
	LocalSuspicions    int      `json:"soak_local_suspicions"`
	CPUPerNode         float64  `json:"cpu_cores_per_node"`
	HeartbeatPPS       float64  `json:"heartbeat_packets_per_node_s"`
	GossipPPS          float64  `json:"membership_packets_per_node_s"`
	GossipBPS          float64  `json:"membership_bytes_per_node_s"`
	// SchedDelay is how late this script's own 10 ms sleeps woke during
	// the soak: the run queue a process on this machine waited in.
	SchedDelayP99Ms float64 `json:"soak_sched_delay_p99_ms"`
	SchedDelayMaxMs float64 `json:"soak_sched_delay_max_ms"`
	// FalseDeathAtS is when each false death began, seconds into the soak.
	FalseDeathAtS []float64 `json:"soak_false_death_at_s,omitempty"`
	// Rolling is the rolling restart under load, if asked for.
	Rolling *rollingResult `json:"rolling_restart,omitempty"`
}

func (r results) print(w io.Writer) {
	fmt.Fprintf(w, "%d nodes (%s, busy %v)\n", r.Nodes, r.Date, r.Busy)
	fmt.Fprintf(w, "  startup: every node a member everywhere after %.2f s\n", r.StartupS)
	fmt.Fprintf(w, "  join: a new node a member everywhere after %.2f s\n", r.JoinS)
	fmt.Fprintf(w, "  SIGKILL: out of its %d monitors' routing views after %.2f s; dead everywhere after %.2f s\n", r.CrashMonitors, r.CrashLocalS, r.CrashDeadS)
	fmt.Fprintf(w, "  restart: a member everywhere again after %.2f s\n", r.RestartS)
	fmt.Fprintf(w, "  soak %.0f s: %d false deaths (%d observer lines, nodes %v, at %.0f s), %d local suspicions; a sleep woke up to %.0f ms late (p99 %.0f ms)\n",
		r.SoakS, r.FalseDeathEpisodes, r.FalseDeaths, r.FalseDeadNodes, r.FalseDeathAtS, r.LocalSuspicions, r.SchedDelayMaxMs, r.SchedDelayP99Ms)
	fmt.Fprintf(w, "  per node: %.2f %% of a core, %.0f heartbeat packets/s, %.1f membership packets/s (%.0f B/s)\n",
		100*r.CPUPerNode, r.HeartbeatPPS, r.GossipPPS, r.GossipBPS)
	if rr := r.Rolling; rr != nil {
		fmt.Fprintf(w, "  rolling restart of %d nodes at %.0f req/s: %d requests, %d client errors %v, %d wrong, %d false deaths; per node %.1f s (max %.1f s); p99 %.1f ms\n",
			rr.Restarted, rr.Rate, rr.Load.Requests, rr.Load.Errors, rr.Load.ErrorKinds, rr.Load.Wrong, rr.FalseDeaths, rr.MeanS, rr.MaxS, rr.Load.P99ms)
	}
}

func (r *run) measure(n, base int, soak time.Duration, busy bool, rollingRate float64) (results, error) {
	res := results{Nodes: n, Date: time.Now().UTC().Format("2006-01-02"), Busy: busy}
	r.origin = fmt.Sprintf("127.0.0.1:%d", base)
	origin := exec.Command(r.bin, "origin", "--listen", r.origin, "--latency", "2ms")
	if err := origin.Start(); err != nil {
		return res, err
	}
	defer func() { _ = origin.Process.Kill(); _ = origin.Wait() }()
	ids := make([]string, 0, n+1)
	for i := 1; i <= n+1; i++ {
		id := fmt.Sprintf("m%03d", i)
		ids = append(ids, id)
		r.nodes[id] = &node{id: id, pub: fmt.Sprintf("127.0.0.1:%d", base+i), adm: fmt.Sprintf("127.0.0.1:%d", base+1000+i), peer: fmt.Sprintf("127.0.0.1:%d", base+2000+i)}
	}
	for _, id := range ids[:min(3, n)] {
		r.seeds = append(r.seeds, id+"="+r.nodes[id].peer)
	}
	members := ids[:n]
	t0 := time.Now()
	for _, id := range members {
		if err := r.start(id); err != nil {
			return res, err
		}
	}
	// Startup: the seeds are members from the configuration; every other
	// node joins, and is logged as such, at every node.
	if err := r.waitMembers(members, t0, 5*time.Minute); err != nil {
		return res, fmt.Errorf("startup: %w", err)
	}
	res.StartupS = r.lastJoin(members, members[min(3, n):], t0).Seconds()
	time.Sleep(5 * time.Second)

	joiner := ids[n]
	tj := time.Now()
	if err := r.start(joiner); err != nil {
		return res, err
	}
	all := ids
	if err := r.waitMembers(all, tj, 2*time.Minute); err != nil {
		return res, fmt.Errorf("join: %w", err)
	}
	res.JoinS = r.lastJoin(all, []string{joiner}, tj).Seconds()
	time.Sleep(5 * time.Second)

	victim := all[len(all)/2]
	tk := time.Now()
	_ = r.nodes[victim].cmd.Process.Signal(syscall.SIGKILL)
	_ = r.nodes[victim].cmd.Wait()
	survivors := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == victim })
	deadline := time.Now().Add(time.Minute)
	for {
		if d, ok := r.lastEvent(survivors, "member left", victim, tk); ok {
			res.CrashDeadS = d.Seconds()
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("crash: %s not dead everywhere within a minute", victim)
		}
		time.Sleep(200 * time.Millisecond)
	}
	local, monitors := r.localDrop(survivors, victim, tk)
	res.CrashLocalS, res.CrashMonitors = local.Seconds(), monitors
	time.Sleep(3 * time.Second)
	tr := time.Now()
	if err := r.start(victim); err != nil {
		return res, err
	}
	if err := r.waitMembers(all, tr, 2*time.Minute); err != nil {
		return res, fmt.Errorf("restart: %w", err)
	}
	res.RestartS = r.lastJoin(all, []string{victim}, tr).Seconds()
	time.Sleep(10 * time.Second)

	// Soak: nothing is killed; every "member left" is a false death.
	var stopBusy func()
	if busy {
		stopBusy = spin()
	}
	ts := time.Now()
	cpu0 := r.cpu(all)
	hb0, g0, gb0 := r.counters(all)
	delays := sleepOvershoots(soak)
	cpu1 := r.cpu(all)
	hb1, g1, gb1 := r.counters(all)
	el := time.Since(ts).Seconds()
	if stopBusy != nil {
		stopBusy()
	}
	res.SoakS = el
	res.SchedDelayP99Ms, res.SchedDelayMaxMs = delays.p99, delays.max
	res.CPUPerNode = (cpu1 - cpu0) / el / float64(len(all))
	res.HeartbeatPPS = (hb1 - hb0) / el / float64(len(all))
	res.GossipPPS = (g1 - g0) / el / float64(len(all))
	res.GossipBPS = (gb1 - gb0) / el / float64(len(all))
	r.mu.Lock()
	lastLeft := map[string]time.Time{}
	evs := slices.Clone(r.events)
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	for _, e := range evs {
		if e.at.Before(ts) {
			continue
		}
		switch e.msg {
		case "member left":
			res.FalseDeaths++
			// One death is the lines about a node within 15 s of the
			// first (not of the last: a node dying again and again is
			// several deaths).
			if first, ok := lastLeft[e.peer]; !ok || e.at.Sub(first) > 15*time.Second {
				res.FalseDeathEpisodes++
				res.FalseDeathAtS = append(res.FalseDeathAtS, e.at.Sub(ts).Seconds())
				if !ok {
					res.FalseDeadNodes = append(res.FalseDeadNodes, e.peer)
				}
				lastLeft[e.peer] = e.at
			}
		case "peer suspected":
			res.LocalSuspicions++
		}
	}
	r.mu.Unlock()
	if rollingRate > 0 {
		rr, err := r.rolling(all, rollingRate)
		res.Rolling = &rr
		if err != nil {
			return res, fmt.Errorf("rolling restart: %w", err)
		}
	}
	return res, nil
}

// start runs node id and reads its log.
func (r *run) start(id string) error {
	nd := r.nodes[id]
	args := []string{"serve", "--origin", "http://" + r.origin, "--listen", nd.pub, "--admin-listen", nd.adm,
		"--node-id", id, "--cluster-listen", nd.peer, "--peers", strings.Join(r.seeds, ","),
		"--secret", "membership-measurement-secret", "--cache-size", "8MiB", "--log-level", "info"}
	cmd := exec.Command(r.bin, append(args, r.extra...)...)
	cmd.Env = append(os.Environ(), "EDGE_LOG_FORMAT=json", "EDGE_INDICATORS_CAPACITY=1000", "GOMAXPROCS=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	nd.cmd, nd.started = cmd, time.Now()
	if r.logDir != "" {
		f, err := os.Create(filepath.Join(r.logDir, fmt.Sprintf("%s-%d.log", id, time.Now().UnixNano())))
		if err != nil {
			return err
		}
		go func() { r.read(id, io.TeeReader(stderr, f)); _ = f.Close() }()
		return nil
	}
	go r.read(id, stderr)
	return nil
}

// read records the membership lines of one node's log.
func (r *run) read(id string, in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			Peer  string    `json:"peer"`
			Peers string    `json:"peers"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Msg {
		case "member joined", "member left", "peer suspected", "configured peers not in the membership leave the ring":
			r.mu.Lock()
			r.events = append(r.events, event{at: line.Time, observer: id, msg: line.Msg, peer: line.Peer, peers: line.Peers})
			r.mu.Unlock()
		}
	}
}

// lastEvent is how long after since the last of observers logged msg
// about peer (each observer's first such line after since); false if
// one has not yet.
func (r *run) lastEvent(observers []string, msg, peer string, since time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := map[string]time.Time{}
	for _, e := range r.events {
		if e.msg == msg && e.peer == peer && !e.at.Before(since) {
			if at, ok := first[e.observer]; !ok || e.at.Before(at) {
				first[e.observer] = e.at
			}
		}
	}
	var worst time.Duration
	for _, o := range observers {
		if o == peer {
			continue
		}
		at, ok := first[o]
		if !ok {
			return 0, false
		}
		worst = max(worst, at.Sub(since))
	}
	return worst, true
}

// lastJoin is when the last of joiners became a member at the last
// observer, after since.
func (r *run) lastJoin(observers, joiners []string, since time.Time) time.Duration {
	var worst time.Duration
	for _, j := range joiners {
		d, _ := r.lastEvent(observers, "member joined", j, since)
		worst = max(worst, d)
	}
	return worst
}

// waitMembers waits until every node of ids has exactly the others of
// ids as members, as its log tells (the seeds from its configuration,
// then every "member joined" and "member left"): polling every node's
// metrics would be the heaviest load on the machine at 100 nodes.
func (r *run) waitMembers(ids []string, since time.Time, within time.Duration) error {
	deadline := since.Add(within)
	for {
		missing := r.unconverged(ids)
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every node has the %d others as members within %v (%s)", len(ids)-1, within, strings.Join(missing, " "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// unconverged lists the nodes of ids whose membership, replayed from
// their logs, is not the others of ids, with how many members each has.
func (r *run) unconverged(ids []string) []string {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sets := map[string]map[string]bool{}
	for _, id := range ids {
		sets[id] = map[string]bool{}
		for _, s := range r.seeds {
			if seed, _, _ := strings.Cut(s, "="); seed != id {
				sets[id][seed] = true
			}
		}
	}
	for _, e := range r.events {
		set := sets[e.observer]
		if set == nil || e.at.Before(r.nodes[e.observer].started) {
			continue
		}
		switch e.msg {
		case "member joined":
			set[e.peer] = true
		case "member left":
			delete(set, e.peer)
		case "configured peers not in the membership leave the ring":
			for _, p := range strings.Split(e.peers, ",") {
				delete(set, p)
			}
		}
	}
	var out []string
	for _, id := range ids {
		ok := len(sets[id]) == len(ids)-1
		for p := range sets[id] {
			ok = ok && want[p]
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s:%d", id, len(sets[id])))
		}
	}
	return out
}

// localDrop is how long the victim's monitors (the nodes that logged a
// suspicion of it) took to take it out of their routing views.
func (r *run) localDrop(survivors []string, victim string, since time.Time) (time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := map[string]time.Time{}
	for _, e := range r.events {
		if e.msg == "peer suspected" && e.peer == victim && !e.at.Before(since) {
			if at, ok := first[e.observer]; !ok || e.at.Before(at) {
				first[e.observer] = e.at
			}
		}
	}
	var worst time.Duration
	for _, at := range first {
		worst = max(worst, at.Sub(since))
	}
	return worst, len(first)
}

func (r *run) scrape(id string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return promtext.Scrape(ctx, "http://"+r.nodes[id].adm+"/metrics")
}

// counters sums heartbeat packets and membership packets and bytes (sent)
// over every node.
func (r *run) counters(ids []string) (hb, gossip, gossipBytes float64) {
	for _, id := range ids {
		if s, err := r.scrape(id); err == nil {
			hb += s[`edge_heartbeat_packets_total{direction="sent"}`]
			gossip += s[`edge_membership_packets_total{direction="sent"}`]
			gossipBytes += s[`edge_membership_bytes_total{direction="sent"}`]
		}
	}
	return hb, gossip, gossipBytes
}

// cpu sums the CPU seconds (user and system) of every node's process.
func (r *run) cpu(ids []string) float64 {
	const tick = 100.0 // USER_HZ
	total := 0.0
	for _, id := range ids {
		nd := r.nodes[id]
		if nd.cmd == nil || nd.cmd.Process == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", nd.cmd.Process.Pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		total += (ut + st) / tick
	}
	return total
}

type overshoots struct{ p99, max float64 }

// sleepOvershoots sleeps 10 ms at a time for d and returns how late the
// wake-ups were, in milliseconds: the scheduling delay a process sees.
func sleepOvershoots(d time.Duration) overshoots {
	var late []float64
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		t := time.Now()
		time.Sleep(10 * time.Millisecond)
		late = append(late, float64(time.Since(t)-10*time.Millisecond)/1e6)
	}
	if len(late) == 0 {
		return overshoots{}
	}
	slices.Sort(late)
	return overshoots{p99: late[len(late)*99/100], max: late[len(late)-1]}
}

// spin keeps every core busy until the returned function is called.
func spin() func() {
	var cmds []*exec.Cmd
	for range runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if c.Start() == nil {
			cmds = append(cmds, c)
		}
	}
	return func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}

func (r *run) stopAll() {
	for _, nd := range r.nodes {
		if nd.cmd != nil && nd.cmd.ProcessState == nil {
			_ = nd.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, nd := range r.nodes {
		if nd.cmd != nil && nd.cmd.ProcessState == nil {
			_ = nd.cmd.Wait()
		}
	}
}
