package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/lab/clustersim"
)

func simClusterCmd() *cobra.Command {
	var c clustersim.Costs
	var period, probe time.Duration
	var monitors, indicatorPeers int
	var budget float64
	m := clustersim.DefaultMembership
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Per-node cost of all-to-all heartbeats and indicators against bounded monitoring with memberlist, 3 to 10000 nodes",
		Long: `A model fed by per-packet costs measured on real processes (go run ./scripts/clusteroverhead
and go run ./scripts/membership; the defaults are this machine's figures from docs/cluster.md).
All-to-all is cluster.monitoring: all, every node heartbeating every other; bounded is
cluster.monitoring: subset, each node heartbeating --monitors neighbours for its routing view and
pulling indicators from --indicator-peers peers. In both, memberlist keeps the membership (one probe per
--probe-interval, push/pull anti-entropy, suspicion timeout --suspicion-mult × max(1, log10 n) ×
the probe interval). "dead everywhere" is the time until every node has removed a crashed one
from the ring.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.PeriodSec = period.Seconds()
			m.ProbeIntervalSec = probe.Seconds()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "nodes\tscheme\tpkt/s\tof which membership\tKB/s\tCPU % of a core\tindicator KB/s\tout of monitors' views s\tdead everywhere s\t")
			for _, n := range []int{3, 5, 10, 24, 100, 1000, 10000} {
				for _, s := range []struct {
					name string
					sch  clustersim.Scheme
				}{{"all-to-all", clustersim.Scheme{Membership: m}}, {"bounded", clustersim.Scheme{Monitors: monitors, Indicator: indicatorPeers, Membership: m}}} {
					r, err := clustersim.Model(c, s.sch, n)
					if err != nil {
						return usageError{err}
					}
					fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\t%.1f\t\n", n, s.name, r.PacketsPerSec, r.MembershipPacketsPerSec,
						r.BytesPerSec/1000, 100*r.CPUSec, r.IndicatorBytesPerSec/1000, r.LocalDropSec, r.DeadEverywhereSec)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "all-to-all heartbeats pass %.0f%% of a core per node at %d nodes\n", 100*budget, clustersim.Crossover(c, budget))
			return err
		},
	}
	f := cmd.Flags()
	f.DurationVar(&period, "period", 100*time.Millisecond, "heartbeat period")
	f.Float64Var(&c.PacketBytes, "packet-bytes", 116, "bytes per heartbeat (measured)")
	f.Float64Var(&c.PacketCPUSec, "packet-cpu", 140e-6, "CPU seconds to send one heartbeat and receive one (measured)")
	f.Float64Var(&c.BaseCPUSec, "base-cpu", 0.004, "CPU seconds per second of an idle node (measured: 0.40 % of a core)")
	f.Float64Var(&c.IndicatorBPerSec, "indicator-bytes", 950, "indicator bytes per second to one peer (measured in steady state at 67 insertions/s per node: about 14 bytes per insertion)")
	f.IntVar(&monitors, "monitors", 4, "peers each node heartbeats in the bounded scheme (cluster.monitor_peers)")
	f.IntVar(&indicatorPeers, "indicator-peers", 4, "peers each node pulls indicators from in the bounded scheme (its neighbours)")
	f.DurationVar(&probe, "probe-interval", time.Second, "memberlist's probe interval (cluster.membership_probe_interval)")
	f.Float64Var(&m.SuspicionMult, "suspicion-mult", m.SuspicionMult, "memberlist's suspicion multiplier (cluster.membership_suspicion_mult)")
	f.Float64Var(&m.ProbeBytes, "probe-bytes", m.ProbeBytes, "bytes of one membership packet, encrypted, with what it piggybacks (measured at 100 nodes)")
	f.Float64Var(&m.MemberBytes, "member-bytes", m.MemberBytes, "bytes of one member's state in a push/pull exchange")
	f.Float64Var(&budget, "budget", 0.05, "share of one core all-to-all may take, for the crossover")
	return cmd
}
