package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/lab/ringsim"
	"github.com/edgecache/edge/routing"
)

func simCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "sim", Short: "Simulations of the routing, indicator and failure-detection algorithms"}
	cmd.AddCommand(simRingCmd(), simTreesCmd(), simCacheCmd(), simTiersCmd(), simClusterCmd())
	return cmd
}

func simRingCmd() *cobra.Command {
	var c ringsim.RingConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ring",
		Short: "Consistent-hash ring: balance, monotonicity, spread and load under partial views",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := ringsim.SimulateRing(c)
			if err != nil {
				return usageError{err}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "nodes\t%d\tvnodes %d, keys %d\n", res.Nodes, res.VNodes, res.Keys)
			fmt.Fprintf(tw, "balance max/mean\t%.3f\tmin/mean %.3f\n", res.BalanceMaxMean, res.BalanceMinMean)
			fmt.Fprintf(tw, "arc share max/mean\t%.3f\tmin/mean %.3f\n", res.ArcMaxMean, res.ArcMinMean)
			fmt.Fprintf(tw, "add a node: moved\t%d\t(expected ≈ %.0f), between survivors %d\n", res.AddMoved, res.AddExpectedShare, res.AddMovedBetweenSurvivors)
			fmt.Fprintf(tw, "remove a node: moved\t%d\tbetween survivors %d\n", res.RemoveMoved, res.RemoveMovedBetweenSurvivors)
			fmt.Fprintf(tw, "views\t%d\teach %.0f%% of the nodes (t = %.2f), t·log2 C = %.1f\n", res.Views, 100*res.ViewFraction, 1/res.ViewFraction, res.Bound)
			fmt.Fprintf(tw, "spread max\t%d\tmean %.2f\n", res.SpreadMax, res.SpreadMean)
			fmt.Fprintf(tw, "load max/mean\t%.2f\t(%d keys)\n", res.LoadMaxRatio, res.LoadMax)
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&c.Nodes, "nodes", 100, "nodes in the full view")
	f.IntVar(&c.VNodes, "vnodes", routing.DefaultVNodes, "points per node")
	f.IntVar(&c.Keys, "keys", 100000, "keys")
	f.IntVar(&c.Views, "views", 10, "random partial views")
	f.Float64Var(&c.ViewFraction, "view-fraction", 0.5, "fraction of the nodes in each view (1/t)")
	f.Uint64Var(&c.Seed, "seed", 1, "random seed")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func simTreesCmd() *cobra.Command {
	var c ringsim.TreeConfig
	var placement string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "trees",
		Short: "Random trees vs plain consistent hashing in the paper's static batch model",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := routing.ParsePlacement(placement)
			if err != nil {
				return usageError{err}
			}
			c.Placement = p
			if c.Hot == (c.ZipfS > 0) {
				return usageError{errors.New("give exactly one of --hot and --zipf S (with --pages P)")}
			}
			res, err := ringsim.SimulateTrees(c)
			if err != nil {
				return usageError{err}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "scheme\t%s\tplacement %s, C=%d d=%d q=%d, %d requests over %d pages\n", res.Scheme, res.Placement, res.Caches, res.Arity, res.Q, res.Requests, res.DistinctPages)
			fmt.Fprintf(tw, "busiest cache\t%d msgs\t%.2f × R/C\n", res.MaxLoad, res.MaxLoadRatio)
			fmt.Fprintf(tw, "messages per request\t%.3f\t\n", res.MsgsPerRequest)
			fmt.Fprintf(tw, "origin fetches\t%d\tlargest per page %d\n", res.OriginFetches, res.MaxOriginFetchesPerPage)
			fmt.Fprintf(tw, "stored copies\t%d\t\n", res.Copies)
			fmt.Fprintf(tw, "hops\tmean %.2f\tmax %d\n", res.MeanHops, res.MaxHops)
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&c.Caches, "caches", 1000, "caches C")
	f.IntVar(&c.Arity, "d", 4, "tree arity d")
	f.IntVar(&c.Q, "q", 2, "requests a cache forwards before storing")
	f.IntVar(&c.Requests, "requests", 100000, "requests R")
	f.BoolVar(&c.Hot, "hot", false, "every request is for one page")
	f.Float64Var(&c.ZipfS, "zipf", 0, "Zipf exponent s of page popularity")
	f.IntVar(&c.Pages, "pages", 10000, "pages for --zipf")
	f.StringVar(&placement, "placement", "paper", "paper or distinct")
	f.StringVar(&c.Scheme, "scheme", "tree", "tree, ring (one owner per page) or hybrid (ring until a page is hot, then tree)")
	f.IntVar(&c.HotThreshold, "hot-threshold", 64, "hybrid: requests a page gets through its rank-2 cache before it spreads over its tree")
	f.IntVar(&c.VNodes, "vnodes", routing.DefaultVNodes, "ring points per cache")
	f.Uint64Var(&c.Seed, "seed", 1, "random seed")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
