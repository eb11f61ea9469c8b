package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/lab/tiersim"
	"github.com/edgecache/edge/trace"
)

func simTiersCmd() *cobra.Command {
	var file, format, ram, disks, part string
	var objSize int64
	var limit int
	cmd := &cobra.Command{
		Use:   "tiers",
		Short: "RAM + disk tiers on a trace: LRU vs TinyLFU admission on disk, promotion on the 1st or 2nd disk hit",
		Long: `Replays a trace through the model of the RAM tier written through to the disk tier and
prints object and byte hit ratios, the share of hits from RAM, and the bytes written to disk,
for each disk budget, admission policy and promotion rule. --part first|second replays only
one half of the trace, so that a policy can be chosen on one half and reported on the other.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := trace.ParseFormat(format)
			if err != nil {
				return usageError{err}
			}
			raw, err := trace.ReadAll(file, f, limit)
			if err != nil {
				return err
			}
			switch part {
			case "first":
				raw = raw[:len(raw)/2]
			case "second":
				raw = raw[len(raw)/2:]
			case "all":
			default:
				return usageError{fmt.Errorf("--part %q: want all, first or second", part)}
			}
			reqs := make([]tiersim.Request, len(raw))
			for i, q := range raw {
				size := q.Size
				if size <= 0 {
					size = objSize
				}
				reqs[i] = tiersim.Request{ID: q.ID, Size: size}
			}
			ramBytes, err := config.ParseSize(ram)
			if err != nil {
				return usageError{fmt.Errorf("--ram: %w", err)}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "trace %s (%s half), %d requests, RAM %s\n", file, part, len(reqs), ram)
			fmt.Fprintln(tw, "disk\tadmission\tpromote on\tobject hit\tbyte hit\tRAM share of hits\tdisk written")
			base, _ := tiersim.Simulate(reqs, tiersim.Config{RAMBytes: ramBytes, Admission: "lru", PromoteHits: 1})
			fmt.Fprintf(tw, "none\t-\t-\t%.4f\t%.4f\t1\t0\n", base.ObjectHitRatio, base.ByteHitRatio)
			for _, d := range strings.Split(disks, ",") {
				diskBytes, err := config.ParseSize(d)
				if err != nil {
					return usageError{fmt.Errorf("--disk %q: %w", d, err)}
				}
				for _, adm := range []string{"lru", "tinylfu"} {
					for _, promote := range []int{1, 2} {
						r, err := tiersim.Simulate(reqs, tiersim.Config{RAMBytes: ramBytes, DiskBytes: diskBytes, Admission: adm, PromoteHits: promote})
						if err != nil {
							return err
						}
						share := 0.0
						if r.Hits > 0 {
							share = float64(r.RAMHits) / float64(r.Hits)
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\t%.4f\t%.4f\t%.3f\t%d MiB\n", d, adm, promote, r.ObjectHitRatio, r.ByteHitRatio, share, r.DiskWriteBytes>>20)
					}
				}
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&file, "trace", "", "trace file")
	fl.StringVar(&format, "format", "adaptsize", "trace format: int64be, int32be, adaptsize, lines")
	fl.IntVar(&limit, "trace-limit", 0, "read at most this many requests (0: all)")
	fl.StringVar(&ram, "ram", "64MiB", "RAM tier budget")
	fl.StringVar(&disks, "disk", "64MiB,256MiB,2GiB", "disk tier budgets, comma-separated")
	fl.Int64Var(&objSize, "object-size", 16<<10, "object size for traces without sizes")
	fl.StringVar(&part, "part", "all", "all, first or second half of the trace")
	_ = cmd.MarkFlagRequired("trace")
	return cmd
}
