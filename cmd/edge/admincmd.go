package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
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

// adminTarget is how a command on the node's machine (or in its
// container) reaches the admin listener.
type adminTarget struct {
	addr     string
	token    string // the config file's admin.token ("" without a file)
	certFile string // admin.tls.cert_file: HTTPS, accepting exactly this certificate
}

// adminAddr finds the admin listener: the flag, else the config file's
// admin.listen (with the environment applied, as serve reads it), else
// EDGE_ADMIN_LISTEN, else the default; a wildcard address is reached on
// loopback. Its certificate file likewise (the file's admin.tls.cert_file,
// else EDGE_ADMIN_TLS_CERT_FILE).
//
// A file that does not parse is an error, not a fall-back to the default
// address: an operator's walk-through saw `edge reload -c FILE` report
// "connection refused" on 127.0.0.1:9180 for a node on another port, the
// file's syntax error unsaid.
func adminAddr(flag, file string) (adminTarget, error) {
	t := adminTarget{addr: flag}
	if file != "" {
		v, err := config.NewViper(file)
		if err == nil {
			// A key the file got wrong (admin: {listen: } took the
			// default 127.0.0.1:9180: "connection refused" again, its
			// cause unsaid; a review's).
			err = config.FileErrors(v)
		}
		if err != nil {
			return t, fmt.Errorf("the admin listener is not known from %s (--admin gives it): %w", file, err)
		}
		if t.addr == "" {
			t.addr = fmt.Sprint(v.Get("admin.listen"))
		}
		t.token = fmt.Sprint(v.Get("admin.token"))
		if f := v.Get("admin.tls.cert_file"); f != nil {
			t.certFile = fmt.Sprint(f)
		}
	}
	if t.certFile == "" {
		t.certFile = os.Getenv("EDGE_ADMIN_TLS_CERT_FILE")
	}
	if t.addr == "" {
		t.addr = os.Getenv("EDGE_ADMIN_LISTEN")
	}
	if t.addr == "" {
		t.addr = "127.0.0.1:9180"
	}
	host, port, err := net.SplitHostPort(t.addr)
	if err != nil {
		return t, nil
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	t.addr = net.JoinHostPort(host, port)
	return t, nil
}

// url is the admin listener's URL for path.
func (t adminTarget) url(path string) string {
	if t.certFile != "" {
		return "https://" + t.addr + path
	}
	return "http://" + t.addr + path
}

// client talks to the admin listener: over HTTPS it accepts exactly the
// node's configured certificate (a command on the node's machine reaches
// it at a loopback address its certificate need not name, and the
// certificate may be self-signed), nothing else.
func (t adminTarget) client() (*http.Client, error) {
	if t.certFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(t.certFile)
	if err != nil {
		return nil, fmt.Errorf("admin.tls.cert_file: %w", err)
	}
	block, _ := pemDecode(pem)
	if block == nil {
		return nil, fmt.Errorf("admin.tls.cert_file %s: no PEM certificate", t.certFile)
	}
	want := block.Bytes
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], want) {
				return fmt.Errorf("the admin listener's certificate is not %s", t.certFile)
			}
			return nil
		},
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}}, nil
}

// pemDecode returns the first CERTIFICATE block of b.
func pemDecode(b []byte) (*pem.Block, []byte) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil || block.Type == "CERTIFICATE" {
			return block, b
		}
	}
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
			t, err := adminAddr(admin, file)
			if err != nil {
				return fmt.Errorf("health: %w", err)
			}
			url := t.url("/readyz")
			client, err := t.client()
			if err != nil {
				return fmt.Errorf("health: %w", err)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
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
			t, err := adminAddr(admin, file)
			if err != nil {
				return fmt.Errorf("reload: %w", err)
			}
			if token == "" {
				token = t.token
			}
			if token == "" {
				token = os.Getenv("EDGE_ADMIN_TOKEN")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			url := t.url("/reload")
			client, err := t.client()
			if err != nil {
				return fmt.Errorf("reload: %w", err)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
			if err != nil {
				return err
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("reload: %s: %w", url, err)
			}
			defer resp.Body.Close()
			var out struct{ Result, Hash, Error string }
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if json.Unmarshal(raw, &out) != nil || out.Result == "" {
				hint := ""
				if resp.StatusCode == http.StatusUnauthorized && file != "" && token == t.token {
					// The token came from the file, which may have been
					// edited: admin.token is not reloadable, so the node
					// still wants the one it started with.
					hint = " (the token is " + file + "'s admin.token; a node keeps the token it started with, since admin.token cannot change without a restart: give the running one with --token, or restart the node)"
				} else if resp.StatusCode == http.StatusUnauthorized && token == "" {
					// A new user's first try (the demo's nodes have a token).
					hint = " (the admin endpoint needs the node's admin.token: give it with --token or EDGE_ADMIN_TOKEN, or --config with the node's file)"
				}
				return fmt.Errorf("reload: %s answered %d: %s%s", url, resp.StatusCode, strings.TrimSpace(string(raw)), hint)
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
