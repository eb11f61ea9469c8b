package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
)

// Live reload: SIGHUP (cmd/edge) and POST /reload re-read the
// configuration, validate it whole, and apply what can change while
// serving: the sites and their origin pools (a new table is swapped in;
// requests in flight finish on the old pools), the caching policy and the
// log level. The store, the cluster and every connection stay. A file
// that does not validate, or that changes a key only a restart can apply
// (listen addresses, node id, the store's size, …), is refused with the
// keys named, and the running configuration stays.

// Loader re-reads the configuration the way startup read it (file,
// environment, flags) and returns it with its settings (config.Settings).
type Loader func() (*config.Config, map[string]string, error)

type reloader struct {
	mu       sync.Mutex // one reload at a time
	load     Loader
	level    *slog.LevelVar
	settings map[string]string
	hash     string
	at       time.Time
	results  *prometheus.CounterVec
	info     *prometheus.GaugeVec
}

// EnableReload lets the node reload with load; level is the logger's level
// (nil: log.level needs a restart). settings are the running config's.
func (n *Node) EnableReload(load Loader, level *slog.LevelVar, settings map[string]string) {
	r := &reloader{load: load, level: level, settings: settings, hash: config.Hash(settings), at: time.Now(),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_config_reloads_total", Help: "Configuration reloads by result: ok, invalid (did not validate), frozen (changed a key that needs a restart).",
		}, []string{"result"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edge_config_info", Help: "Always 1; the hash label names the configuration in force (config.Hash of every key).",
		}, []string{"hash"}),
	}
	for _, res := range []string{"ok", "invalid", "frozen"} {
		r.results.WithLabelValues(res)
	}
	n.reg.MustRegister(r.results, r.info)
	r.info.WithLabelValues(r.hash).Set(1)
	n.reloader = r
}

// ConfigHash returns the hash of the configuration in force ("" without reload).
func (n *Node) ConfigHash() string {
	if n.reloader == nil {
		return ""
	}
	n.reloader.mu.Lock()
	defer n.reloader.mu.Unlock()
	return n.reloader.hash
}

// Reload re-reads and applies the configuration. It returns the new
// configuration's hash, or an error naming what is wrong.
func (n *Node) Reload() (string, error) {
	r := n.reloader
	if r == nil {
		return "", errors.New("reload: this node was started without a configuration loader")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, settings, err := r.load()
	if err != nil {
		r.results.WithLabelValues("invalid").Inc()
		n.log.Error("config reload refused; the running configuration stays", "err", err)
		return "", err
	}
	if frozen := config.FrozenChanges(r.settings, settings); len(frozen) > 0 {
		r.results.WithLabelValues("frozen").Inc()
		err := fmt.Errorf("reload: %s cannot change without a restart", strings.Join(frozen, ", "))
		n.log.Error("config reload refused; the running configuration stays", "err", err)
		return "", err
	}
	table, err := newSiteTable(cfg, n.siteM, n.log)
	if err != nil {
		r.results.WithLabelValues("invalid").Inc()
		n.log.Error("config reload refused; the running configuration stays", "err", err)
		return "", err
	}
	// Apply: nothing below can fail. A site that stays keeps its origins'
	// health (an ejected origin stays out for the rest of its ejection)
	// and its request counts (the status page's totals and last-minute
	// rates run on across the reload).
	for _, s := range table.sites {
		for _, o := range n.sites.Load().sites {
			if o.name == s.name {
				s.pool.CarryState(o.pool)
				s.resolved.CarryCounts(o.resolved)
			}
		}
	}
	table.start()
	old := n.sites.Swap(table)
	// Requests in flight finish on the old pools; stopping a pool ends its
	// health checks and closes idle connections only. The metric series
	// of origins the new table no longer has go.
	kept := map[[2]string]bool{}
	for _, s := range table.sites {
		site, urls := s.pool.Origins()
		for _, u := range urls {
			kept[[2]string{site, u}] = true
		}
	}
	names := map[string]bool{}
	for _, s := range table.sites {
		names[s.name] = true
	}
	for _, s := range old.sites {
		if !names[s.name] {
			// A removed site's own series go with it (a request still on
			// the old table counts into a child no longer exported).
			n.siteM.requests.DeleteLabelValues(s.name)
			n.siteM.limited.DeleteLabelValues(s.name)
			n.siteM.pools.Retries.DeleteLabelValues(s.name)
			n.proxy.ForgetSite(s.resolved)
		}
	}
	// Both before the reload answers (a pool's stop closes a channel and
	// idle connections, nothing that waits): a scrape right after it
	// (TestS7RemovedSiteLeavesNoMetricSeries, once in a loaded make test)
	// read the series while a goroutine had yet to delete them. Stopped
	// first, so that its health checks do not count an ejection into a
	// series just deleted.
	old.stop()
	for _, s := range old.sites {
		s.pool.Forget(func(site, url string) bool { return kept[[2]string{site, url}] })
	}
	n.proxy.SetPolicy(cachePolicy(cfg))
	n.applyLimits(cfg)
	// What the old table stored under a site the new one no longer gives
	// its host goes: nothing could serve it or purge it, and a reload
	// back would serve what was purged in between.
	if dropped := n.proxy.DropUnreachable(); dropped > 0 {
		n.log.Info("stored responses of sites the reload removed or moved are removed", "responses", dropped)
	}
	if r.level != nil {
		var l slog.Level
		if l.UnmarshalText([]byte(cfg.Log.Level)) == nil {
			r.level.Set(l)
		}
	}
	r.info.DeleteLabelValues(r.hash)
	r.settings, r.hash, r.at = settings, config.Hash(settings), time.Now()
	r.info.WithLabelValues(r.hash).Set(1)
	r.results.WithLabelValues("ok").Inc()
	n.log.Info("configuration reloaded", "hash", r.hash, "sites", len(cfg.Sites))
	for _, w := range config.Warnings(cfg) {
		n.log.Warn(w)
	}
	return r.hash, nil
}

// reloadHandler is POST /reload on the admin listener (behind the token).
func (n *Node) reloadHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	hash, err := n.Reload()
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"result": "refused", "error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"result": "ok", "hash": hash})
}

// applyLimits puts the reloadable limits in force: the in-flight bounds
// and the connection bounds (an operator tightens them under a flood
// without the restart that would empty the cache). What is under way
// keeps its slot; a lower bound refuses what comes next.
func (n *Node) applyLimits(cfg *config.Config) {
	n.proxy.SetLimits(cfg.Limits.MaxInflight, cfg.Limits.MaxInflightPerClient)
	n.proxy.SetSites(n.sites.Load().siteNames(), cfg.Limits.SiteReserve)
	n.conns.setBounds(maxConnections(cfg), cfg.Limits.MaxConnectionsPerClient)
	if n.peerConns != nil {
		// Its default follows limits.max_inflight (connReserve).
		n.peerConns.setBounds(0, defaultMaxPeerConnections(cfg.Limits.MaxInflight))
	}
}
