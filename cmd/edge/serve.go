package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/node"
)

func serveCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run one edge node in front of an origin",
		Long: `Run one edge node. Configuration comes from the YAML file (--config),
then EDGE_* environment variables (EDGE_ORIGIN_URL, EDGE_CACHE_MAX_BYTES, …),
then flags. Every key is documented in config.yaml.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// load reads the file, the environment and the flags given at
			// startup: the same sources for a reload as for the start.
			var unused []string // what the start's settings give and the node does not use
			load := func() (*config.Config, map[string]string, error) {
				v, err := config.NewViper(file)
				if err != nil {
					return nil, nil, err
				}
				if err := bindFlags(cmd, v); err != nil {
					return nil, nil, err
				}
				cfg, err := config.Load(v)
				if err != nil {
					return nil, nil, err
				}
				unused = config.UnusedKeys(v, cfg)
				return cfg, config.Settings(v), nil
			}
			cfg, settings, err := load()
			if err != nil {
				return err
			}
			level := new(slog.LevelVar)
			log := newLogger(cfg.Log.Level, cfg.Log.Format, level)
			for _, w := range slices.Concat(config.UnknownEnv(), unused, config.Warnings(cfg)) {
				log.Warn(w)
			}
			n, err := node.New(cfg, log)
			if err != nil {
				return err
			}
			n.EnableReload(load, level, settings)
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1)
			defer signal.Stop(sigs)
			go func() {
				for s := range sigs {
					if s == syscall.SIGUSR1 {
						n.ReopenAccessLog()
						continue
					}
					log.Info("SIGHUP: reloading the configuration")
					_, _ = n.Reload() // errors are logged and counted; the running config stays
				}
			}()
			return n.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "YAML config file (see config.yaml for every key)")
	f.String("origin", "", "origin base URL (origin.url)")
	f.String("listen", "", "public listen address (listen)")
	f.String("admin-listen", "", "admin listen address (admin.listen)")
	f.String("admin-token", "", "bearer token for purge and pprof (admin.token)")
	f.String("node-id", "", "node name (node_id)")
	f.String("cache-size", "", "store byte budget, e.g. 256MiB (cache.max_bytes)")
	f.String("log-level", "", "debug, info, warn or error (log.level)")
	f.String("cluster-listen", "", "peer HTTP and UDP heartbeat address (cluster.listen)")
	f.String("peers", "", "static peers ID=HOST:PORT,… (cluster.peers)")
	f.String("secret", "", "cluster secret (cluster.secret)")
	f.String("routing-mode", "", "hybrid, tree, ring or none (routing.mode)")
	f.String("selection", "", "fna-rate, fna-learned, fna-home, fna, fno, off or race-all (cluster.selection)")
	f.String("monitoring", "", "all, subset or auto: which peers to heartbeat (cluster.monitoring)")
	f.String("monitor-peers", "", "neighbours per node with subset monitoring (cluster.monitor_peers)")
	f.String("tls-listen", "", "HTTPS listen address (tls.listen)")
	f.String("tls-cert", "", "PEM certificate chain (tls.cert_file)")
	f.String("tls-key", "", "PEM private key (tls.key_file)")
	f.Bool("http3", false, "serve HTTP/3 on the UDP port of --tls-listen (tls.http3)")
	f.String("disk-path", "", "directory of the disk cache tier (cache.disk.path)")
	f.String("disk-size", "", "byte budget of the disk tier, e.g. 2GiB (cache.disk.max_bytes)")
	f.String("state-dir", "", "directory that keeps the purges peers are owed across restarts (cluster.state_dir)")
	return cmd
}

// flagKeys maps flags to config keys. A flag overrides the file and the
// environment only when it was given.
var flagKeys = map[string]string{
	"origin": "origin.url", "listen": "listen", "admin-listen": "admin.listen", "admin-token": "admin.token",
	"node-id": "node_id", "cache-size": "cache.max_bytes", "log-level": "log.level",
	"cluster-listen": "cluster.listen", "peers": "cluster.peers", "secret": "cluster.secret",
	"routing-mode": "routing.mode", "selection": "cluster.selection",
	"monitoring": "cluster.monitoring", "monitor-peers": "cluster.monitor_peers",
	"tls-listen": "tls.listen", "tls-cert": "tls.cert_file", "tls-key": "tls.key_file", "http3": "tls.http3",
	"disk-path": "cache.disk.path", "disk-size": "cache.disk.max_bytes", "state-dir": "cluster.state_dir",
}

func bindFlags(cmd *cobra.Command, v *viper.Viper) error {
	for flag, key := range flagKeys {
		fl := cmd.Flags().Lookup(flag)
		if fl == nil {
			continue
		}
		if fl.Changed {
			config.SetFlag(v, key, flag, fl.Value.String())
		}
	}
	return nil
}

// newLogger returns the node's logger; lv (if not nil) holds its level so
// that a reload can change it.
func newLogger(level, format string, lv ...*slog.LevelVar) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	var leveler slog.Leveler = l
	if len(lv) > 0 && lv[0] != nil {
		lv[0].Set(l)
		leveler = lv[0]
	}
	opts := &slog.HandlerOptions{Level: leveler}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "edge", node.Version)
		},
	}
}
