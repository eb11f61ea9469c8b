// Package chaos is the network-fault lab: an edge cluster with each node in
// its own network namespace (lab/netns), a demo origin and a load client in
// two more, and faults between the nodes — partitions and one-way
// partitions and kernel-level packet loss as nftables rules, delay, jitter
// and spikes in a relay on every peer link (lab/netrelay: this kernel has no
// netem), crashes as SIGKILL. A scenario is a script of faults with start
// times and durations, run under a Zipf load with a flash crowd; the lab
// reads every node's view of every peer from its status page and scores
// detection time, false suspicions, convergence after a heal, client
// errors, wrong or stale content, and origin requests per page per side of
// a partition.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgecache/edge/lab/netns"
	"github.com/edgecache/edge/lab/netrelay"
)

// prefixTag starts the names of the lab's namespaces.
const prefixTag = "ch"

// Ports every node uses on its own address (each node has its own stack).
const (
	publicPort  = 8080
	adminPort   = 9090
	clusterPort = 7946
	recordPort  = 7950
	originPort  = 8090
)

// Options configures a lab.
type Options struct {
	Bin            string        // edge binary
	Nodes          int           // cluster size (default 5)
	Heartbeat      time.Duration // cluster.heartbeat_period (default 100 ms)
	Detector       string        // cluster.detector (default ml)
	DetectorParams string        // cluster.detector_params
	// Shadows are cluster.shadow_detectors: detectors every node runs
	// beside Detector on the same heartbeats, scored like it (Result.Shadows).
	Shadows []string
	// Warmup is how long Run lets the converged cluster exchange
	// heartbeats before the load and the faults start, so that the
	// detectors are judged as a running cluster has them, not brand new.
	Warmup        time.Duration
	OriginLatency time.Duration // the demo origin's added latency (default 20 ms)
	Prefix        string        // namespace prefix (default "ch" and the process id)
	AccessLogDir  string        // if set, every node writes its access log here (n1.log, …)
	Log           *slog.Logger
}

func (o *Options) defaults() {
	if o.Nodes == 0 {
		o.Nodes = 5
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 100 * time.Millisecond
	}
	if o.Detector == "" {
		o.Detector = "ml"
	}
	if o.OriginLatency == 0 {
		o.OriginLatency = 20 * time.Millisecond
	}
	if o.Prefix == "" {
		netns.SweepOrphans(prefixTag)
		o.Prefix = netns.OwnedPrefix(prefixTag)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Lab is a running cluster in namespaces.
type Lab struct {
	opts   Options
	net    *netns.Lab
	nodes  []*netns.Host
	origin *netns.Host
	client *netns.Host
	// relays[i][j] carries node i's traffic to node j (inside node i).
	relays [][]*netrelay.Relay
	secret string
	http   *http.Client // from the client namespace: admin pages, origin stats

	mu     sync.Mutex
	procs  map[string]*proc // by name: "origin", "n1", …, "record"
	stderr map[string]*lockedWriter
	rules  []string // each node's loaded nftables input rules (faults.go)
}

// Start builds the namespaces, starts the origin, the relays and the nodes,
// and waits until every node trusts every other.
func Start(ctx context.Context, o Options) (_ *Lab, err error) {
	o.defaults()
	if o.Nodes < 2 || o.Nodes > 20 {
		return nil, fmt.Errorf("chaos: %d nodes: 2–20", o.Nodes)
	}
	if err := netns.Check(); err != nil {
		return nil, err
	}
	names := make([]string, 0, o.Nodes+2)
	for i := range o.Nodes {
		names = append(names, nodeName(i))
	}
	names = append(names, "origin", "client")
	nl, err := netns.New(ctx, o.Prefix, names)
	if err != nil {
		return nil, err
	}
	l := &Lab{opts: o, net: nl, origin: nl.Host("origin"), client: nl.Host("client"), secret: "chaos-lab-secret-0123456789",
		procs: map[string]*proc{}, stderr: map[string]*lockedWriter{}, rules: make([]string, o.Nodes)}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for i := range o.Nodes {
		l.nodes = append(l.nodes, nl.Host(nodeName(i)))
	}
	l.http = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: l.client.DialContext, MaxIdleConnsPerHost: 4}}
	if err := l.startProc(ctx, "origin", l.origin, "origin", "--listen", fmt.Sprintf("%s:%d", l.origin.Addr, originPort),
		"--latency", o.OriginLatency.String(), "--jitter", "0s"); err != nil {
		return nil, err
	}
	if err := l.waitHTTP(ctx, l.OriginURL()+"/_stats"); err != nil {
		return nil, err
	}
	l.relays = make([][]*netrelay.Relay, o.Nodes)
	for i := range o.Nodes {
		l.relays[i] = make([]*netrelay.Relay, o.Nodes)
		for j := range o.Nodes {
			if i == j {
				continue
			}
			r, err := netrelay.ListenOn(l.nodes[i], "127.0.0.1:0", fmt.Sprintf("%s:%d", l.nodes[j].Addr, clusterPort), netrelay.Faults{})
			if err != nil {
				return nil, err
			}
			l.relays[i][j] = r
			if j == 0 { // the heartbeats node 1 receives also go to a recorder's port
				if err := r.Tee(fmt.Sprintf("%s:%d", l.nodes[0].Addr, recordPort)); err != nil {
					return nil, err
				}
			}
		}
	}
	for i := range o.Nodes {
		if err := l.startNode(ctx, i); err != nil {
			return nil, err
		}
	}
	for i := range o.Nodes {
		if err := l.waitHTTP(ctx, l.adminURL(i)+"/status.json"); err != nil {
			return nil, fmt.Errorf("%w; %s wrote: %s", err, nodeName(i), l.Stderr(nodeName(i)))
		}
	}
	if err := l.WaitConverged(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("chaos: the cluster did not form: %w", err)
	}
	return l, nil
}

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

// Nodes is the cluster size.
func (l *Lab) Nodes() int { return len(l.nodes) }

// PublicURL is node i's client-facing base URL.
func (l *Lab) PublicURL(i int) string {
	return fmt.Sprintf("http://%s:%d", l.nodes[i].Addr, publicPort)
}

func (l *Lab) adminURL(i int) string { return fmt.Sprintf("http://%s:%d", l.nodes[i].Addr, adminPort) }

// OriginURL is the demo origin's base URL.
func (l *Lab) OriginURL() string { return fmt.Sprintf("http://%s:%d", l.origin.Addr, originPort) }

func (l *Lab) startNode(ctx context.Context, i int) error {
	var peers []string
	for j := range l.nodes {
		if j != i {
			peers = append(peers, nodeName(j)+"="+l.relays[i][j].Addr())
		}
	}
	h := l.nodes[i]
	return l.startProc(ctx, nodeName(i), h, "serve",
		"--origin", l.OriginURL(),
		"--listen", fmt.Sprintf("%s:%d", h.Addr, publicPort),
		"--admin-listen", fmt.Sprintf("%s:%d", h.Addr, adminPort),
		"--cluster-listen", fmt.Sprintf("%s:%d", h.Addr, clusterPort),
		"--node-id", nodeName(i), "--peers", strings.Join(peers, ","), "--secret", l.secret,
		"--cache-size", "128MiB", "--log-level", l.logLevel())
}

// nodeEnv is the environment of every node: the detector and heartbeat
// period under test.
func (l *Lab) nodeEnv() []string {
	env := append(os.Environ(), "EDGE_TEST_AS_MAIN=1",
		"EDGE_CLUSTER_HEARTBEAT_PERIOD="+l.opts.Heartbeat.String(),
		"EDGE_CLUSTER_DETECTOR="+l.opts.Detector)
	if l.opts.DetectorParams != "" {
		env = append(env, "EDGE_CLUSTER_DETECTOR_PARAMS="+l.opts.DetectorParams)
	}
	if len(l.opts.Shadows) > 0 {
		env = append(env, "EDGE_CLUSTER_SHADOW_DETECTORS="+strings.Join(l.opts.Shadows, ","))
	}
	return env
}

func (l *Lab) startProc(ctx context.Context, name string, h *netns.Host, args ...string) error {
	// Not CommandContext: a process outlives the call that started it and
	// is stopped by Close or a crash fault.
	cmd := h.Command(context.WithoutCancel(ctx), l.opts.Bin, args...)
	cmd.Env = l.nodeEnv()
	if d := l.opts.AccessLogDir; d != "" && h != l.client {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("chaos: access log directory: %w", err)
		}
		cmd.Env = append(cmd.Env, "EDGE_LOG_ACCESS="+filepath.Join(d, name+".log"))
	}
	stderr := &lockedWriter{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	l.mu.Lock()
	l.procs[name] = p
	l.stderr[name] = stderr
	l.mu.Unlock()
	go func() { _ = cmd.Wait(); close(p.done) }()
	return nil
}

// proc is a process the lab started; done closes when it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// kill stops process name at once (SIGKILL, as a crash).
func (l *Lab) kill(name string) {
	l.mu.Lock()
	p := l.procs[name]
	delete(l.procs, name)
	l.mu.Unlock()
	if p != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Stderr returns what a process wrote to stderr (for a failure report).
func (l *Lab) Stderr(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.stderr[name]; w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.buf.String()
	}
	return ""
}

// Record runs `edge fd record` in node 1's namespace, which receives a copy
// of every heartbeat node 1 receives (after the faults, as node 1 sees
// them), until stop; stop writes the trace CSV to path.
func (l *Lab) Record(ctx context.Context, path string) (stop func() error, err error) {
	if err := l.startProc(ctx, "record", l.nodes[0], "fd", "record", "--listen", fmt.Sprintf("%s:%d", l.nodes[0].Addr, recordPort),
		"--secret", l.secret, "--out", path); err != nil {
		return nil, err
	}
	return func() error {
		l.mu.Lock()
		rec := l.procs["record"]
		delete(l.procs, "record")
		l.mu.Unlock()
		if rec == nil {
			return nil
		}
		_ = syscall.Kill(-rec.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-rec.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-rec.cmd.Process.Pid, syscall.SIGKILL)
			return fmt.Errorf("chaos: edge fd record did not stop: %s", l.Stderr("record"))
		}
		if !rec.cmd.ProcessState.Success() {
			return fmt.Errorf("chaos: edge fd record: %s: %s", rec.cmd.ProcessState, l.Stderr("record"))
		}
		return nil
	}, nil
}

// Close stops every process and removes every namespace. With
// AccessLogDir, each process's stderr is saved there too (name.stderr).
func (l *Lab) Close() {
	defer func() {
		if l.opts.AccessLogDir == "" {
			return
		}
		for _, n := range names(l, l.stderr) {
			_ = os.WriteFile(filepath.Join(l.opts.AccessLogDir, n+".stderr"), []byte(l.Stderr(n)), 0o644)
		}
	}()
	for _, n := range names(l, l.procs) {
		l.kill(n)
	}
	for _, row := range l.relays {
		for _, r := range row {
			if r != nil {
				r.Close()
			}
		}
	}
	if l.net != nil {
		l.net.Close()
	}
}

func (l *Lab) waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := l.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: %s not up: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// peerView is one node's status-page view of one peer.
type peerView struct {
	ID         string `json:"id"`
	Trusted    bool   `json:"trusted"`
	Member     bool   `json:"member"`
	Suspicions uint64 `json:"suspicions"`
	// Rerouted are requests whose home was this peer sent elsewhere while
	// the node suspected it; ReroutedWrongly those of suspicions that
	// turned out wrong.
	Rerouted        uint64       `json:"rerouted_requests"`
	ReroutedWrongly uint64       `json:"rerouted_requests_wrongly"`
	History         []transition `json:"history"`
	// Shadows are the shadow detectors' transitions, by detector.
	Shadows map[string][]transition `json:"shadows"`
}

type transition struct {
	At      time.Time `json:"At"`
	Trusted bool      `json:"Trusted"`
}

// views reads node i's view of its peers.
func (l *Lab) views(ctx context.Context, i int) ([]peerView, error) {
	var s struct {
		Peers []peerView `json:"peers"`
	}
	if err := l.status(ctx, i, &s); err != nil {
		return nil, err
	}
	return s.Peers, nil
}

// status decodes node i's status.json into v.
func (l *Lab) status(ctx context.Context, i int, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.adminURL(i)+"/status.json", nil)
	resp, err := l.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("chaos: %s status: %w", nodeName(i), err)
	}
	return nil
}

// resumes sums the running nodes' peer answers finished from the origin,
// by outcome (status.json peer_body_resumes); a node that does not answer
// (crashed) adds nothing.
func (l *Lab) resumes(ctx context.Context) map[string]int64 {
	sum := map[string]int64{}
	for i := range l.nodes {
		var s struct {
			Resumes map[string]int64 `json:"peer_body_resumes"`
		}
		if l.status(ctx, i, &s) != nil {
			continue
		}
		for outcome, n := range s.Resumes {
			sum[outcome] += n
		}
	}
	return sum
}

// WaitConverged waits until every running node trusts every other.
func (l *Lab) WaitConverged(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		bad := l.disagreement(ctx)
		if bad == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(bad)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// disagreement names a view that is not "everyone trusted", or "".
func (l *Lab) disagreement(ctx context.Context) string {
	for i := range l.nodes {
		vs, err := l.views(ctx, i)
		if err != nil {
			return fmt.Sprintf("%s: %v", nodeName(i), err)
		}
		if len(vs) != len(l.nodes)-1 {
			return fmt.Sprintf("%s knows %d peers", nodeName(i), len(vs))
		}
		for _, v := range vs {
			if !v.Trusted {
				return fmt.Sprintf("%s suspects %s", nodeName(i), v.ID)
			}
		}
	}
	return ""
}

// lockedWriter serialises writes from a process's stderr copier and reads.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 1<<20 {
		return len(p), nil // bounded: a chatty process must not fill memory
	}
	return w.buf.Write(p)
}

// logLevel is the nodes' log level: debug when their logs are kept for a
// diagnosis (AccessLogDir), else warnings only.
func (l *Lab) logLevel() string {
	if l.opts.AccessLogDir != "" {
		return "debug"
	}
	return "warn"
}

// names returns the keys of one of the lab's process maps, read under its lock.
func names[V any](l *Lab, m map[string]V) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(m))
}
