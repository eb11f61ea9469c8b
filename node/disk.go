package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/disk"
	"github.com/edgecache/edge/proxy"
)

// openDisk opens the disk tier named by cache.disk.path, rebuilding its
// index before anything is served, so that the first indicator advertised
// already covers both tiers, and registers its metrics.
func openDisk(cfg *config.Config, store *proxy.Store, reg prometheus.Registerer, log *slog.Logger) (*disk.Tier, error) {
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "edge_disk_op_seconds", Help: "Disk tier read and write latency (a write is one whole object file).",
		Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1},
	}, []string{"op"})
	read, write := lat.WithLabelValues("read"), lat.WithLabelValues("write")
	t, err := disk.Open(disk.Options{
		Dir: cfg.Cache.DiskPath, MaxBytes: cfg.Cache.DiskMaxBytes, Log: log, KeyScheme: proxy.DiskKeyScheme(cfg.Cache.KeyScheme, cfg.Cache.SortQuery),
		ObserveRead:  func(d time.Duration) { read.Observe(d.Seconds()) },
		ObserveWrite: func(d time.Duration) { write.Observe(d.Seconds()) },
	})
	if err != nil {
		return nil, &config.Error{Key: "cache.disk.path", Value: cfg.Cache.DiskPath, Reason: err.Error()}
	}
	rc := t.Recovery()
	log.Info("disk tier recovered", "dir", cfg.Cache.DiskPath, "from_snapshot", rc.FromSnapshot, "objects", rc.Objects, "bytes", rc.Bytes,
		"discarded", rc.Discarded, "other_key_version", rc.Rekeyed, "interrupted_writes", rc.TempFiles, "seconds", rc.Duration.Seconds())
	store.AttachDisk(t, proxy.TierOptions{PromoteHits: cfg.Cache.DiskPromoteHits})
	stat := func(f func(disk.Stats) float64) func() float64 { return func() float64 { return f(t.Stats()) } }
	gauge := func(name, help string, f func(disk.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, stat(f))
	}
	counter := func(name, help string, f func(disk.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, stat(f))
	}
	errs := prometheus.NewDesc("edge_disk_errors_total", "Disk tier errors by kind: read and write I/O errors, corrupt records found on read.", []string{"kind"}, nil)
	reg.MustRegister(lat,
		gauge("edge_disk_bytes", "Bytes of the disk tier's files.", func(s disk.Stats) float64 { return float64(s.Bytes) }),
		gauge("edge_disk_budget_bytes", "The disk tier's byte budget.", func(s disk.Stats) float64 { return float64(s.Budget) }),
		gauge("edge_disk_objects", "Responses (variants) on disk.", func(s disk.Stats) float64 { return float64(s.Objects) }),
		gauge("edge_disk_queue_bytes", "Bodies waiting to be written to disk.", func(s disk.Stats) float64 { return float64(s.QueueBytes) }),
		gauge("edge_disk_up", "1 while the disk tier is in use, 0 while it is down after repeated I/O errors.", func(s disk.Stats) float64 {
			if s.Up {
				return 1
			}
			return 0
		}),
		gauge("edge_disk_recovery_seconds", "Time the last startup took to rebuild the disk index.", func(s disk.Stats) float64 { return s.RecoverySeconds }),
		gauge("edge_disk_recovery_discarded", "Files the last startup found partial or corrupt and removed.", func(s disk.Stats) float64 { return float64(s.RecoveryDiscarded) }),
		gauge("edge_disk_recovery_rekeyed", "Files the last startup removed because an older release wrote them under another cache-key version.", func(s disk.Stats) float64 { return float64(s.RecoveryRekeyed) }),
		counter("edge_disk_hits_total", "RAM misses answered from disk.", func(s disk.Stats) float64 { return float64(s.Hits) }),
		counter("edge_disk_misses_total", "RAM misses the disk could not answer.", func(s disk.Stats) float64 { return float64(s.Misses) }),
		counter("edge_disk_writes_total", "Objects written to disk.", func(s disk.Stats) float64 { return float64(s.Writes) }),
		counter("edge_disk_dropped_writes_total", "Writes not made: queue full, object larger than the tier, or tier down.", func(s disk.Stats) float64 { return float64(s.Dropped) }),
		counter("edge_disk_evictions_total", "Objects removed from disk to stay under the budget.", func(s disk.Stats) float64 { return float64(s.Evictions) }),
		counter("edge_disk_promotions_total", "Disk hits copied into RAM.", func(disk.Stats) float64 { return float64(store.Promoted()) }),
		errorsCollector{desc: errs, tier: t},
	)
	return t, nil
}

// errorsCollector exports the tier's error counters as one labelled family.
type errorsCollector struct {
	desc *prometheus.Desc
	tier *disk.Tier
}

func (c errorsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c errorsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.tier.Stats()
	for kind, v := range map[string]uint64{"read": s.ReadErrors, "write": s.WriteErrors, "corrupt": s.Corrupt} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), kind)
	}
}

// closeDisk flushes the disk tier's queued writes, so that a graceful
// restart keeps every stored response.
func (n *Node) closeDisk(ctx context.Context) error {
	t := n.proxy.Store().Disk()
	if t == nil {
		return nil
	}
	if err := t.Close(ctx); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// DiskStatus is the disk tier on the status page.
type DiskStatus struct {
	disk.Stats
	Path     string `json:"path"`
	Promoted uint64 `json:"promoted"`
}
