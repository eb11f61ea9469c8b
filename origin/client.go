// Package origin talks to the origin server: Client is the upstream HTTP
// client every node uses (keep-alive pool, one retry of idempotent
// requests, an idle watchdog on bodies, rate-limited failure logs). The
// demo site lives in package demosite.
package origin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// ClientConfig configures the upstream client.
type ClientConfig struct {
	URL             string        // origin base URL, e.g. http://127.0.0.1:8090
	ConnectTimeout  time.Duration // TCP connect budget
	ResponseTimeout time.Duration // wait for response headers after the request is sent
	MaxIdleConns    int           // idle keep-alive connections kept to the origin
	IdleConnTimeout time.Duration // an idle connection is closed after this
	PreserveHost    bool          // send the client's Host instead of the origin's
	CAFile          string        // PEM roots for an https origin (empty: the system's)
	ServerName      string        // SNI and certificate name for an https origin (empty: the URL's host)
	Log             *slog.Logger  // failures are logged here, at most one line per cause per second
	OnError         func(cause string)
}

// DefaultClientConfig returns the client defaults config.yaml documents
// (config reads them from here), each with its reason. URL has none.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		ConnectTimeout:  3 * time.Second,  // a dead origin is reported in seconds, not minutes
		ResponseTimeout: 30 * time.Second, // long enough for slow dynamic pages
		MaxIdleConns:    256,              // enough for a busy node without hoarding sockets
		IdleConnTimeout: 90 * time.Second, // below typical origin keep-alive limits
	}
}

// withDefaults fills c's zero durations and sizes from
// DefaultClientConfig: a zero is "not set", never "no limit".
func (c ClientConfig) withDefaults() ClientConfig {
	d := DefaultClientConfig()
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.ResponseTimeout <= 0 {
		c.ResponseTimeout = d.ResponseTimeout
	}
	if c.MaxIdleConns <= 0 {
		c.MaxIdleConns = d.MaxIdleConns
	}
	if c.IdleConnTimeout <= 0 {
		c.IdleConnTimeout = d.IdleConnTimeout
	}
	return c
}

// Client forwards requests to one origin over a keep-alive pool. It retries
// an idempotent request once when the connection failed before any response
// byte arrived (a stale pooled connection, a refused connect).
type Client struct {
	base      *url.URL
	transport *http.Transport
	preserve  bool
	idle      time.Duration // a body that sends nothing for this long fails
	errs      *errorLog
	onError   func(cause string)
}

// NewClient validates cfg and returns a client; its zero fields take
// DefaultClientConfig's values.
func NewClient(cfg ClientConfig) (*Client, error) {
	cfg = cfg.withDefaults()
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("origin url %q: %w", cfg.URL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("origin url %q: want http://host[:port] or https://host[:port]", cfg.URL)
	}
	d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:                 nil, // never route origin traffic through an environment proxy
		DialContext:           d.DialContext,
		MaxIdleConns:          cfg.MaxIdleConns,
		MaxIdleConnsPerHost:   cfg.MaxIdleConns,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		ResponseHeaderTimeout: cfg.ResponseTimeout,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // pass Content-Encoding through untouched
		// HTTP/2 to an https origin that offers it (ALPN); the custom
		// dialer would otherwise turn it off.
		ForceAttemptHTTP2: true,
	}
	if u.Scheme == "https" || cfg.CAFile != "" || cfg.ServerName != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("origin.ca_file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("origin.ca_file %q: no PEM certificate in it", cfg.CAFile)
			}
		}
		t.TLSClientConfig = tc
	}
	// A body that sends nothing for the response timeout has stalled.
	return &Client{base: u, transport: t, preserve: cfg.PreserveHost, idle: cfg.ResponseTimeout, errs: newErrorLog(cfg.Log, time.Second), onError: cfg.OnError}, nil
}

// URL returns the origin base URL.
func (c *Client) URL() string { return c.base.String() }

// Fetch sends req (whose URL holds the path and query) to the origin. The
// response body fails with ErrBodyStalled if the origin sends nothing for
// the response timeout. The origin's 103 answers go to the EarlyHints ctx
// carries (WithEarlyHints), if any.
func (c *Client) Fetch(ctx context.Context, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(withHintTrace(ctx))
	out := req.WithContext(ctx)
	u := *c.base
	u.Path = strings.TrimSuffix(c.base.Path, "/") + req.URL.Path
	u.RawPath = ""
	if req.URL.RawPath != "" {
		u.RawPath = strings.TrimSuffix(c.base.EscapedPath(), "/") + req.URL.RawPath
	}
	u.RawQuery = req.URL.RawQuery
	out.URL = &u
	out.RequestURI = ""
	if !c.preserve {
		out.Host = c.base.Host
	}
	var watch *sendWatch
	if out.Body != nil && out.Body != http.NoBody && c.idle > 0 {
		watch = newSendWatch(out.Body, c.idle, cancel)
		out.Body = watch
	}
	resp, err := c.transport.RoundTrip(out)
	if err != nil && retryable(out, err) {
		resp, err = c.transport.RoundTrip(out)
	}
	if err != nil && watch != nil && watch.stalled() {
		err = fmt.Errorf("%w for %v: %w", ErrSendStalled, c.idle, err)
	}
	if err != nil {
		cancel()
		if cause := c.errs.report(c.base.Host, out.Method, u.Path, err); c.onError != nil && cause != "canceled" {
			c.onError(cause)
		}
		return nil, fmt.Errorf("origin %s %s: %w", out.Method, u.Path, err)
	}
	if watch != nil {
		watch.answer()
	}
	resp.Body = WithIdleTimeout(resp.Body, c.idle, cancel)
	return resp, nil
}

// retryable: only idempotent requests without a body, and only when the
// failure happened before the origin could have acted on the request.
func retryable(req *http.Request, err error) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	if req.Context().Err() != nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)
}

// CloseIdle closes idle pooled connections.
func (c *Client) CloseIdle() { c.transport.CloseIdleConnections() }
