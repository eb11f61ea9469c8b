package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/config"
)

// adminAddr is where a command on the node's machine (or in its
// container) reaches the admin listener: the flag, else the config file's
// admin.listen (with the environment applied, as serve reads it), else
// EDGE_ADMIN_LISTEN, else the default; a wildcard address is reached on
// loopback. token is the file's admin.token ("" without a file).
func adminAddr(flag, file string) (addr, token string) {
	addr = flag
	if addr == "" && file != "" {
		if v, err := config.NewViper(file); err == nil {
			addr = fmt.Sprint(v.Get("admin.listen"))
			token = fmt.Sprint(v.Get("admin.token"))
		}
	}
	if addr == "" {
		addr = os.Getenv("EDGE_ADMIN_LISTEN")
	}
	if addr == "" {
		addr = "127.0.0.1:9180"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, token
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), token
}

// healthCmd exits 0 when the node is ready (its /readyz answers 200) and
// 1 otherwise: the container HEALTHCHECK and the Kubernetes probes, in an
// image that has no shell and no curl.
func healthCmd() *cobra.Command {
	var admin, file string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the local node is ready (GET /readyz on the admin listener), 1 if not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			addr, _ := adminAddr(admin, file)
			url := "http://" + addr + "/readyz"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("health: %s: %w", url, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("health: %s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ready")
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "", "admin listener address (default: the config file's admin.listen, else EDGE_ADMIN_LISTEN, else 127.0.0.1:9180)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	cmd.Flags().StringVarP(&file, "config", "c", "", "the node's config file, for its admin.listen")
	return cmd
}

// reloadCmd asks the local node to reload its configuration (POST
// /reload), and prints the outcome: the new config hash, or why the
// reload was refused (the running configuration keeps serving).
func reloadCmd() *cobra.Command {
	var admin, token, file string
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Reload the local node's configuration (POST /reload on the admin listener; SIGHUP does the same)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, fileToken := adminAddr(admin, file)
			if token == "" {
				token = fileToken
			}
			if token == "" {
				token = os.Getenv("EDGE_ADMIN_TOKEN")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			url := "http://" + addr + "/reload"
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
			if err != nil {
				return err
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("reload: %s: %w", url, err)
			}
			defer resp.Body.Close()
			var out struct{ Result, Hash, Error string }
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if json.Unmarshal(raw, &out) != nil || out.Result == "" {
				return fmt.Errorf("reload: %s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(raw)))
			}
			if out.Result != "ok" {
				return fmt.Errorf("reload refused (the running configuration keeps serving): %s", out.Error)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reloaded: config %s\n", out.Hash)
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "", "admin listener address (default: the config file's admin.listen, else EDGE_ADMIN_LISTEN, else 127.0.0.1:9180)")
	cmd.Flags().StringVar(&token, "token", "", "admin token (default: the config file's admin.token, else EDGE_ADMIN_TOKEN)")
	cmd.Flags().StringVarP(&file, "config", "c", "", "the node's config file, for its admin.listen and admin.token")
	return cmd
}
