package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/demosite"
)

func originCmd() *cobra.Command {
	var listen, tlsCert, tlsKey string
	var cfg demosite.Config
	cmd := &cobra.Command{
		Use:   "origin",
		Short: "Run the demo origin: a deterministic synthetic site with a page family per caching case",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Latency < 0 || cfg.Jitter < 0 {
				return usageError{errors.New("--latency and --jitter must not be negative")}
			}
			if (tlsCert == "") != (tlsKey == "") {
				return usageError{errors.New("--tls-cert and --tls-key go together: give both to serve https, neither for http")}
			}
			if tlsCert != "" {
				// Loaded before listening, so that a bad pair stops the
				// start with its reason instead of failing every handshake.
				if _, err := tls.LoadX509KeyPair(tlsCert, tlsKey); err != nil {
					return fmt.Errorf("origin: --tls-cert/--tls-key: %w", err)
				}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("origin: %w", err)
			}
			srv := &http.Server{Handler: demosite.New(cfg), ReadHeaderTimeout: 10 * time.Second}
			slog.Info("demo origin serving", "listen", ln.Addr().String(), "latency", cfg.Latency, "tls", tlsCert != "")
			errc := make(chan error, 1)
			go func() {
				if tlsCert != "" {
					errc <- srv.ServeTLS(ln, tlsCert, tlsKey)
					return
				}
				errc <- srv.Serve(ln)
			}()
			select {
			case err := <-errc:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "listen address")
	cmd.Flags().DurationVar(&cfg.Latency, "latency", 20*time.Millisecond, "latency added to every response, like a distant origin")
	cmd.Flags().DurationVar(&cfg.Jitter, "jitter", 5*time.Millisecond, "uniform extra latency in [0, jitter)")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "PEM certificate (chain) to serve https with (with --tls-key)")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	return cmd
}
