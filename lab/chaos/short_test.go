package chaos_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/prereq"
	"github.com/edgecache/edge/lab/chaos"
	"github.com/edgecache/edge/lab/netns"
)

// TestChaosShort is the short version of `make chaos`: five edge processes,
// each in its own network namespace, under Zipf load from a client
// namespace, through a partition of one node, a one-way partition and 20 %
// packet loss. It holds what must hold on any machine: no client error,
// no wrong or stale content, every cut link suspected and healed, at most
// a fetch or two per page per side of the partition. The timing targets
// (1 s detection, 2 s convergence, no false suspicion at 5 % loss) are
// measured by `make chaos` on a quiet machine (docs/cluster.md); here the
// bounds are loose, for a loaded CI machine.
//
// `make test` runs it apart, after the race run (EDGE_CHAOS_APART skips it
// there). Beside the race-detected packages, on two cores with two busy
// loops, one clean-clone run (b4e1c5b) starved the nodes until they
// suspected each other before the partition began (detections of 0 ms),
// and a home moved twice: 3 origin fetches for a page from one side. With
// two busy loops alone it passed 5 runs in 5, and 3 in 3 beside the race
// suite of proxy, cluster and node; the failure was not reproduced. The
// bound below is what a node sees when it is given its heartbeats' CPU.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven namespaces and six processes")
	}
	if os.Getenv("EDGE_CHAOS_APART") != "" {
		t.Skip("make test runs this apart from the race run (make chaos-short)")
	}
	if err := netns.Check(); err != nil {
		prereq.Missing(t, "network namespaces and nftables (root)", err)
	}
	bin := filepath.Join(t.TempDir(), "edge")
	// Without the race detector: the nodes are measured, not checked.
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/edgecache/edge/cmd/edge").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// EDGE_CHAOS_LOGS=dir keeps every node's access log and debug log
	// there, for a diagnosis of a failure.
	lab, err := chaos.Start(ctx, chaos.Options{Bin: bin, AccessLogDir: os.Getenv("EDGE_CHAOS_LOGS")})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	const s = time.Second
	res, err := lab.Run(ctx, chaos.Scenario{Name: "short", Duration: 17 * s, Timeout: 30 * s, Steps: []chaos.Step{
		{Fault: chaos.Partition{Group: []int{4}}, At: 2 * s, For: 3 * s},
		{Fault: chaos.OneWay{From: 4, To: 0}, At: 8 * s, For: 2 * s},
		{Fault: chaos.Loss{Share: 0.2}, At: 13 * s, For: 3 * s},
	}})
	if err != nil {
		t.Fatalf("%v\nn1: %s", err, lab.Stderr("n1"))
	}
	l := res.Load
	if l.Requests == 0 || l.Wrong != 0 || l.MaxAgeS > 60 {
		t.Errorf("load: %d requests, %d wrong, largest Age %d s; want no wrong or stale content", l.Requests, l.Wrong, l.MaxAgeS)
	}
	// Errors: none outside the faults, and few inside (a request counts
	// for a fault when it was in flight during it). The client waits 30 s,
	// not make chaos's 10 s: with the whole suite on two loaded cores,
	// every process here is starved, and 8–27 requests in 3,400 once
	// timed out at 10 s although every node had written its whole answer
	// within 7.1 s (their access logs, EDGE_CHAOS_LOGS); with 30 s, eight
	// busy loops gave 0 errors, the slowest request 4.2–6.5 s. What this
	// gives up: a peer stream that waits out its 10 s idle limit and is
	// then resumed passes here (cluster/resume_test.go holds the stall
	// races); a hung answer still fails at 30 s.
	if res.ErrorsOutside != 0 || l.Errors*200 > l.Requests {
		t.Errorf("load: %d errors (%v at %v s, sent at %v s), %d of them outside every fault; want none outside the faults and under 0.5 %%",
			l.Errors, l.ErrorKinds, l.ErrorTimes, l.ErrorStarts, res.ErrorsOutside)
	}
	p, ow := res.Steps[0], res.Steps[1]
	// 4 observers lose n5 and n5 loses 4; one-way: n1 loses n5.
	if p.Missed != 0 || len(p.DetectMs) != 8 || slices.Max(p.DetectMs) > 3000 {
		t.Errorf("partition: detections %v ms, %d missed; want all 8 links within 3 s", p.DetectMs, p.Missed)
	}
	if ow.Missed != 0 || len(ow.DetectMs) != 1 || ow.DetectMs[0] > 3000 {
		t.Errorf("one-way: detections %v ms, %d missed; want n1 to suspect n5 within 3 s", ow.DetectMs, ow.Missed)
	}
	for _, st := range res.Steps[:2] {
		if st.NotHealed != 0 || len(st.HealMs) == 0 || slices.Max(st.HealMs) > 5000 {
			t.Errorf("%s: healed after %v ms, %d not; want every view whole again within 5 s", st.Fault, st.HealMs, st.NotHealed)
		}
	}
	// One fetch per page per side is what make chaos measures; a loaded
	// machine's late heartbeats can move a home once more.
	if p.OriginPerPageSideMax > 2 {
		t.Errorf("partition: a page reached the origin %d times from one side; want at most 2", p.OriginPerPageSideMax)
	}
	t.Logf("partition detect %v ms heal %v ms; one-way detect %v ms; loss 20%%: %d false suspicions; %d requests, %d errors, p99 %.1f ms, slowest %.1f ms",
		p.DetectMs, p.HealMs, ow.DetectMs, res.Steps[2].FalseSuspicions, l.Requests, l.Errors, l.P99ms, l.MaxMs)
	_ = os.Remove(bin)
}
