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
	var period time.Duration
	var monitors, indicatorPeers int
	var gossipBytes float64
	var budget float64
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Per-node cost of all-to-all heartbeats and indicators against bounded-subset monitoring, 3 to 10000 nodes",
		Long: `A model fed by per-peer costs measured on real processes (go run ./scripts/clusteroverhead;
the defaults are this machine's figures from docs/cluster.md). All-to-all is cluster.monitoring:
all; bounded is cluster.monitoring: subset, each node heartbeating --monitors neighbours with
SWIM-style gossip of suspicions piggybacked on the heartbeats, and pulling indicators only from
the --indicator-peers peers whose heartbeats it receives.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.PeriodSec = period.Seconds()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "nodes\tscheme\theartbeat pkt/s\theartbeat KB/s\tCPU % of a core\tindicator KB/s\tdetection rounds\t")
			for _, n := range []int{3, 5, 10, 20, 100, 1000, 10000} {
				for _, s := range []struct {
					name string
					sch  clustersim.Scheme
				}{{"all-to-all", clustersim.Scheme{}}, {"bounded", clustersim.Scheme{Monitors: monitors, Indicator: indicatorPeers, GossipBytes: gossipBytes}}} {
					r, err := clustersim.Model(c, s.sch, n)
					if err != nil {
						return usageError{err}
					}
					fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.1f\t%.2f\t%.1f\t%.0f\t\n", n, s.name, r.PacketsPerSec, r.BytesPerSec/1000, 100*r.CPUSec, r.IndicatorBytesPerSec/1000, r.DetectRounds)
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
	f.Float64Var(&c.BaseCPUSec, "base-cpu", 0.015, "CPU seconds per second of an idle node (measured)")
	f.Float64Var(&c.IndicatorBPerSec, "indicator-bytes", 950, "indicator bytes per second to one peer (measured in steady state at 67 insertions/s per node: about 14 bytes per insertion)")
	f.IntVar(&monitors, "monitors", 8, "peers each node heartbeats in the bounded scheme (cluster.monitor_peers)")
	f.IntVar(&indicatorPeers, "indicator-peers", 8, "peers each node pulls indicators from in the bounded scheme (its neighbours)")
	f.Float64Var(&gossipBytes, "gossip-bytes", 58, "rumor bytes per heartbeat in the bounded scheme (measured: 174 B per packet against 116)")
	f.Float64Var(&budget, "budget", 0.05, "share of one core all-to-all may take, for the crossover")
	return cmd
}
