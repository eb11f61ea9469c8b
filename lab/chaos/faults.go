package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgecache/edge/lab/netrelay"
)

// Fault is one way the network (or a node) misbehaves while it is on.
// Nodes are numbered from 0.
type Fault interface {
	String() string
	// drops returns the nftables input rules of node i while the fault is
	// on (nil: none).
	drops(l *Lab, i int) []string
	// link returns what the relay carrying i's traffic to j does.
	link(i, j int) netrelay.Faults
	// crashes reports whether node i is killed while the fault is on.
	crashes(i int) bool
	// cut reports whether observer o loses peer p while the fault is on:
	// a suspicion of p by o is then a detection, not a mistake.
	cut(o, p int) bool
}

// Partition cuts Group off from the other nodes, both ways. The origin and
// the clients still reach every node.
type Partition struct{ Group []int }

func (f Partition) String() string { return "partition " + nodeList(f.Group) }
func (f Partition) drops(l *Lab, i int) []string {
	in := slices.Contains(f.Group, i)
	var other []int
	for j := range l.Nodes() {
		if slices.Contains(f.Group, j) != in {
			other = append(other, j)
		}
	}
	return []string{fmt.Sprintf("ip saddr %s drop", l.addrSet(other))}
}
func (Partition) link(int, int) netrelay.Faults { return netrelay.Faults{} }
func (Partition) crashes(int) bool              { return false }
func (f Partition) cut(o, p int) bool {
	return slices.Contains(f.Group, o) != slices.Contains(f.Group, p)
}

// OneWay drops everything From sends to To: To stops hearing From, From
// still hears To (and TCP between them breaks both ways, as its replies
// are lost).
type OneWay struct{ From, To int }

func (f OneWay) String() string {
	return fmt.Sprintf("one-way %s ↛ %s", nodeName(f.From), nodeName(f.To))
}
func (f OneWay) drops(l *Lab, i int) []string {
	if i != f.To {
		return nil
	}
	return []string{fmt.Sprintf("ip saddr %s drop", l.nodes[f.From].Addr)}
}
func (OneWay) link(int, int) netrelay.Faults { return netrelay.Faults{} }
func (OneWay) crashes(int) bool              { return false }
func (f OneWay) cut(o, p int) bool           { return o == f.To && p == f.From }

// Loss drops a share of the packets between nodes, in the kernel (TCP
// retransmits, heartbeats are lost), both ways on every peer link.
type Loss struct{ Share float64 }

func (f Loss) String() string { return fmt.Sprintf("loss %.0f%%", 100*f.Share) }
func (f Loss) drops(l *Lab, i int) []string {
	var peers []int
	for j := range l.Nodes() {
		if j != i {
			peers = append(peers, j)
		}
	}
	// numgen draws per packet; 10,000 steps give 0.01 % resolution.
	return []string{fmt.Sprintf("ip saddr %s numgen random mod 10000 < %d drop", l.addrSet(peers), int(f.Share*10000+0.5))}
}
func (Loss) link(int, int) netrelay.Faults { return netrelay.Faults{} }
func (Loss) crashes(int) bool              { return false }
func (Loss) cut(int, int) bool             { return false }

// Delay adds one-way delay (and jitter) on every peer link, heartbeats and
// peer HTTP alike.
type Delay struct{ Delay, Jitter time.Duration }

func (f Delay) String() string {
	if f.Jitter > 0 {
		return fmt.Sprintf("delay +%v ±%v", f.Delay, f.Jitter)
	}
	return fmt.Sprintf("delay +%v", f.Delay)
}
func (Delay) drops(*Lab, int) []string { return nil }
func (f Delay) link(int, int) netrelay.Faults {
	return netrelay.Faults{Delay: f.Delay, Jitter: f.Jitter}
}
func (Delay) crashes(int) bool  { return false }
func (Delay) cut(int, int) bool { return false }

// Crash kills Node (SIGKILL) and restarts it when the fault ends.
type Crash struct{ Node int }

func (f Crash) String() string              { return "crash " + nodeName(f.Node) }
func (Crash) drops(*Lab, int) []string      { return nil }
func (Crash) link(int, int) netrelay.Faults { return netrelay.Faults{} }
func (f Crash) crashes(i int) bool          { return i == f.Node }
func (f Crash) cut(o, p int) bool           { return p == f.Node && o != f.Node }

func nodeList(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, nodeName(n))
	}
	return strings.Join(s, ",")
}

// addrSet is an nftables anonymous set of the nodes' addresses.
func (l *Lab) addrSet(nodes []int) string {
	var s []string
	for _, n := range nodes {
		s = append(s, l.nodes[n].Addr.String())
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

// apply makes the network match the faults in active: every node's
// nftables rules, every relay's faults, and which nodes run.
func (l *Lab) apply(ctx context.Context, active []Fault) error {
	// Every node's rules load at once (each nft run takes tens of
	// milliseconds), so a fault starts nearly together everywhere.
	errs := make([]error, len(l.nodes))
	var wg sync.WaitGroup
	for i := range l.nodes {
		var rules []string
		for _, f := range active {
			rules = append(rules, f.drops(l, i)...)
		}
		text := strings.Join(rules, "\n  ")
		if l.rules[i] == text {
			continue
		}
		// One transaction: the old table goes and the new one comes at once.
		set := "table inet chaos {}\ndelete table inet chaos\n"
		if text != "" {
			set += "table inet chaos {\n chain in {\n  type filter hook input priority 0; policy accept;\n  " + text + "\n }\n}\n"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = l.nodes[i].Nft(ctx, set); errs[i] == nil {
				l.rules[i] = text
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, row := range l.relays {
		for j, r := range row {
			if r == nil {
				continue
			}
			var lf netrelay.Faults
			for _, f := range active {
				x := f.link(i, j)
				lf.Delay = max(lf.Delay, x.Delay)
				lf.Jitter = max(lf.Jitter, x.Jitter)
			}
			if r.Faults() != lf {
				r.Set(lf)
			}
		}
	}
	for i := range l.nodes {
		down := slices.ContainsFunc(active, func(f Fault) bool { return f.crashes(i) })
		l.mu.Lock()
		_, running := l.procs[nodeName(i)]
		l.mu.Unlock()
		switch {
		case down && running:
			l.kill(nodeName(i))
		case !down && !running:
			if err := l.startNode(ctx, i); err != nil {
				return err
			}
		}
	}
	return nil
}
