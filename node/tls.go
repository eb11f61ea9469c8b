package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/h2server"
	"github.com/edgecache/edge/hitpath"
)

// This file is the node's HTTPS side (tls.* in the config): a TLS listener
// serving HTTP/1.1 and HTTP/2 (ALPN), HTTP/3 over QUIC on the same port
// number, certificates from files (chosen by SNI, re-read on change) and
// from ACME through certmagic, the library behind Caddy (issuance, renewal,
// OCSP stapling, storage with locking), and the plain listener's redirect
// and ACME HTTP-01 answers. Every protocol is served by the same proxy
// handler.
//
// In a cluster, every node answers ACME challenges for every name: the
// nodes share tls.acme.storage, where certmagic keeps pending challenges
// (its "distributed solving"), its locks (one node obtains or renews a
// certificate, the others load it) and the certificates.

// tlsFront holds the HTTPS listeners and certificate sources.
type tlsFront struct {
	cfg   *config.Config
	log   *slog.Logger
	files *fileCerts            // nil without certificate files
	magic *certmagic.Config     // nil without ACME
	acme  *certmagic.ACMEIssuer // the ACME issuer (HTTP-01 answers)
	cache *certmagic.Cache
	conf  *tls.Config
	ln    net.Listener
	udp   net.PacketConn
	srv   *http.Server
	h3    *h3Front // nil without HTTP/3
	port  string   // the TLS listener's port, for redirects and Alt-Svc
	alt   []string // Alt-Svc value (nil without HTTP/3)
	hsts  []string // Strict-Transport-Security value (nil: none)
	proto *prometheus.CounterVec
	acmeE *prometheus.CounterVec
	batch *batchStats // write batching on the TLS listener (tuning.write_batching)
	// The HTTP/1.1 hit path on this listener (tuning.hit_path; nil: off):
	// what run builds it from, and the listener once it does.
	hitCfg hitpath.Config
	hitAns hitpath.Answerer
	hitM   *hitpath.Metrics
	hits   *hitpath.Listener
	// h2 serves the HTTP/2 connections (tuning.http2_server edge; nil:
	// net/http's own server does).
	h2 *h2server.Server
}

// The HTTP/2 and HTTP/3 limits, with their reasons.
const (
	// maxConcurrentStreams bounds the requests one connection may have in
	// flight (browsers open about 100; HTTP/2's recommended minimum).
	maxConcurrentStreams = 250
	// fileCertPoll is how often certificate files are checked for changes.
	fileCertPoll = 2 * time.Second
)

// newTLSFront loads certificates and binds the TLS listener (and its UDP
// port for HTTP/3), so that every error is reported before serving.
func newTLSFront(cfg *config.Config, h http.Handler, log *slog.Logger, reg prometheus.Registerer, certs func() *certMetrics, conns *connLimiter, proto *prometheus.CounterVec) (_ *tlsFront, err error) {
	t := &tlsFront{cfg: cfg, log: log, proto: proto,
		acmeE: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_acme_events_total", Help: "ACME certificate events from certmagic: cert_obtained, cert_renewed (ok) and cert_failed.",
		}, []string{"event"}),
	}
	reg.MustRegister(t.acmeE)
	for _, e := range []string{"cert_obtained", "cert_renewed", "cert_failed"} {
		t.acmeE.WithLabelValues(e)
	}
	if t.files, err = newFileCerts(cfg, log, certs); err != nil {
		return nil, err
	}
	if len(cfg.TLS.ACMEDomains) > 0 {
		if err := t.newACME(); err != nil {
			return nil, err
		}
	}
	t.conf = &tls.Config{
		MinVersion:     tls.VersionTLS12, // TLS 1.3 is preferred by the handshake itself
		GetCertificate: t.certificate,
		NextProtos:     []string{"h2", "http/1.1"},
		// Session tickets are on, with keys crypto/tls rotates itself
		// (daily, each valid for a week).
	}
	t.conf.WrapSession, t.conf.UnwrapSession = t.wrapSession, t.unwrapSession
	if t.magic != nil {
		t.conf.NextProtos = append(t.conf.NextProtos, "acme-tls/1")
	}
	if cfg.TLS.HSTS != "" {
		t.hsts = []string{cfg.TLS.HSTS}
	}
	if t.ln, err = listenClients(cfg.TLS.Listen); err != nil {
		return nil, fmt.Errorf("node: tls.listen: %w", err)
	}
	t.ln = conns.listener(t.ln)
	defer func() {
		if err != nil {
			_ = t.ln.Close()
		}
	}()
	_, t.port, _ = net.SplitHostPort(t.ln.Addr().String())
	t.srv = &http.Server{
		Handler:           t.wrap(h),
		TLSConfig:         t.conf,
		MaxHeaderBytes:    int(cfg.Limits.MaxHeaderBytes), // also HTTP/2's header list size
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       cfg.Limits.IdleTimeout,
		WriteTimeout:      cfg.Limits.WriteTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxConcurrentStreams,
			// net/http's server already refuses rapid resets (streams
			// opened and cancelled faster than they are served) since
			// CVE-2023-44487.
			//
			// Its WriteTimeout only resets a stream, with a frame a
			// client that reads nothing never lets out: without a bound
			// on the connection's writes, such a client held its
			// connection and max_connections slot for good (a review,
			// tuning.http2_server: go). As edge's server does, a write
			// that moves no byte for write_timeout ends the connection.
			WriteByteTimeout: cfg.Limits.WriteTimeout,
		},
	}
	if cfg.Tuning.HTTP2Server == "edge" {
		t.h2 = &h2server.Server{
			Handler:              t.srv.Handler,
			MaxConcurrentStreams: maxConcurrentStreams,
			MaxHeaderListSize:    uint32(min(cfg.Limits.MaxHeaderBytes, 1<<31)),
			ReadHeaderTimeout:    cfg.Limits.ReadHeaderTimeout,
			IdleTimeout:          cfg.Limits.IdleTimeout,
			WriteTimeout:         cfg.Limits.WriteTimeout,
			Log:                  log,
			Metrics:              h2server.NewMetrics(reg),
		}
		// net/http hands each connection that negotiated h2 over, with a
		// handler that gives its requests the server's context.
		t.srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){"h2": t.h2.NextProto}
		t.srv.RegisterOnShutdown(t.h2.Drain)
	}
	if cfg.TLS.HTTP3 {
		if t.udp, err = net.ListenPacket("udp", t.ln.Addr().String()); err != nil {
			return nil, fmt.Errorf("node: tls.listen (udp, for tls.http3): %w", err)
		}
		t.h3 = newH3Front(&http3.Server{
			// The TCP fronts' http.Server sets a write deadline as each
			// request arrives (WriteTimeout), which the proxy extends per
			// write; the HTTP/3 server sets none, so a client that read
			// nothing of a hit held its stream, the handler and the
			// entry for as long as it kept the connection alive (a review).
			Handler:        withWriteDeadline(t.wrap(h), cfg.Limits.WriteTimeout),
			TLSConfig:      http3.ConfigureTLSConfig(t.conf.Clone()),
			MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes),
			IdleTimeout:    cfg.Limits.IdleTimeout,
			QUICConfig: &quic.Config{
				MaxIncomingStreams:   maxConcurrentStreams,
				HandshakeIdleTimeout: cfg.Limits.ReadHeaderTimeout,
				MaxIdleTimeout:       cfg.Limits.IdleTimeout,
			},
			Logger: log,
		}, cfg.Limits.ReadHeaderTimeout, log, conns)
		t.alt = []string{`h3=":` + t.port + `"; ma=86400`}
	}
	return t, nil
}

// newACME sets up certmagic with one ACME issuer.
func (t *tlsFront) newACME() error {
	cfg := t.cfg
	zl := zapLogger(t.log)
	var storage certmagic.Storage = &certmagic.FileStorage{Path: cfg.TLS.ACMEStorage}
	if cfg.TLS.ACMEStorage == "" {
		storage = certmagic.Default.Storage
	}
	var magic *certmagic.Config
	t.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		RenewCheckInterval: cfg.TLS.ACMERenewCheck,
		Logger:             zl,
	})
	magic = certmagic.New(t.cache, certmagic.Config{
		Storage:           storage,
		Logger:            zl,
		DefaultServerName: cfg.TLS.ACMEDomains[0],
		OnEvent: func(_ context.Context, event string, _ map[string]any) error {
			switch event {
			case "cert_obtained", "cert_renewed", "cert_failed":
				t.acmeE.WithLabelValues(event).Inc()
			}
			return nil
		},
	})
	var roots *x509.CertPool
	if cfg.TLS.ACMECARoot != "" {
		pem, err := os.ReadFile(cfg.TLS.ACMECARoot)
		if err != nil {
			return &config.Error{Key: "tls.acme.ca_root", Value: cfg.TLS.ACMECARoot, Reason: err.Error()}
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return &config.Error{Key: "tls.acme.ca_root", Value: cfg.TLS.ACMECARoot, Reason: "holds no PEM certificate"}
		}
	}
	plainPort, _ := strconv.Atoi(portOf(cfg.Listen))
	tlsPort, _ := strconv.Atoi(portOf(cfg.TLS.Listen))
	t.acme = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA: cfg.TLS.ACMECA, Email: cfg.TLS.ACMEEmail, Agreed: true, TrustedRoots: roots, Logger: zl,
		// The challenge ports are the node's own listeners: certmagic
		// finds them in use and leaves the answers to our handlers (the
		// plain listener for HTTP-01, the TLS one for TLS-ALPN-01).
		AltHTTPPort: plainPort, AltTLSALPNPort: tlsPort,
	})
	magic.Issuers = []certmagic.Issuer{t.acme}
	t.magic = magic
	return nil
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return p
}

// zapLogger gives certmagic a logger at the node's level, on stderr.
func zapLogger(log *slog.Logger) *zap.Logger {
	level := zapcore.WarnLevel
	if log.Enabled(context.Background(), slog.LevelInfo) {
		level = zapcore.InfoLevel
	}
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = zapcore.DebugLevel
	}
	enc := zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level)).Named("acme")
}

// certificate picks the certificate for a handshake: an ACME challenge
// first, then certificate files by SNI, then ACME-managed names, then the
// first file (clients without SNI).
func (t *tlsFront) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if t.magic != nil && slices.Contains(hello.SupportedProtos, "acme-tls/1") {
		return t.magic.GetCertificate(hello)
	}
	var set *certSet
	if t.files != nil {
		set = t.files.set.Load()
		if c := set.match(hello.ServerName); c != nil {
			return c, nil
		}
	}
	if t.magic != nil {
		if c, err := t.magic.GetCertificate(hello); err == nil || set == nil {
			return c, err
		}
	}
	if set != nil && set.first != nil {
		return set.first, nil
	}
	return nil, errNoCertificate
}

// responseFields are the fields wrap adds to every HTTPS response.
func (t *tlsFront) responseFields() http.Header {
	h := http.Header{}
	if t.alt != nil {
		h["Alt-Svc"] = t.alt
	}
	if t.hsts != nil {
		h["Strict-Transport-Security"] = t.hsts
	}
	return h
}

// wrap adds the HTTPS response fields (Alt-Svc for HTTP/3, HSTS) and counts
// the protocol.
func (t *tlsFront) wrap(next http.Handler) http.Handler {
	h1, h2, h3 := t.proto.WithLabelValues("https/1.1"), t.proto.WithLabelValues("h2"), t.proto.WithLabelValues("h3")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = withTLSState(r)
		hdr := w.Header()
		if t.alt != nil {
			hdr["Alt-Svc"] = t.alt
		}
		if t.hsts != nil {
			hdr["Strict-Transport-Security"] = t.hsts
		}
		switch r.ProtoMajor {
		case 3:
			// The stream's header deadline (h3front.go) ends here: the
			// body's own limits (limits.body_timeout) apply from now.
			_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
			h3.Inc()
		case 2:
			h2.Inc()
		default:
			h1.Inc()
		}
		next.ServeHTTP(w, r)
	})
}

// newProtocolCounter is edge_http_requests_by_protocol_total, every
// protocol at 0 from the start. The node counts plain HTTP/1.1 with it
// whether or not it serves TLS (until 2026-12-07 the metric existed only
// with tls.listen set, so a node behind a load balancer that ends TLS
// counted nothing).
func newProtocolCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_http_requests_by_protocol_total", Help: "Client requests by protocol: http/1.1 (plain), https/1.1, h2, h3.",
	}, []string{"protocol"})
	reg.MustRegister(c)
	for _, p := range []string{"http/1.1", "https/1.1", "h2", "h3"} {
		c.WithLabelValues(p)
	}
	return c
}

// countPlain counts the plain listener's requests when no TLS front does
// (wrapPlain does when there is one).
func countPlain(next http.Handler, h1 prometheus.Counter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h1.Inc()
		next.ServeHTTP(w, r)
	})
}

// wrapPlain is the plain listener's front: ACME HTTP-01 answers, then the
// redirect to HTTPS when configured.
func (t *tlsFront) wrapPlain(next http.Handler) http.Handler {
	h1 := t.proto.WithLabelValues("http/1.1")
	redirect := t.cfg.TLS.RedirectToHTTPS
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.acme != nil && t.acme.HandleHTTPChallenge(w, r) {
			return
		}
		h1.Inc()
		if redirect {
			host := r.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			} else {
				host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // [::1] without a port
			}
			if host == "" || strings.ContainsAny(host, "@/\\?#[] ") {
				// No userinfo or path may ride in on the Host into Location.
				http.Error(w, "bad Host", http.StatusBadRequest)
				return
			}
			switch {
			case t.port != "443":
				host = net.JoinHostPort(host, t.port) // brackets an IPv6 literal
			case strings.Contains(host, ":"):
				host = "[" + host + "]"
			}
			// 308, not 301: a POST stays a POST (RFC 9110 §15.4.9), as Caddy
			// answers. The connection stays open: the client may have more
			// requests queued on it, each answered the same way.
			target := "https://" + host + r.URL.RequestURI()
			ownAnswer(t.cfg.NodeID, "redirect-https", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target, http.StatusPermanentRedirect)
			})(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// run serves HTTPS (and HTTP/3) and keeps certificates current until ctx
// ends; errors of the servers go to errc.
func (t *tlsFront) run(ctx context.Context, errc chan<- error) {
	ln := net.Listener(t.ln)
	if t.cfg.Tuning.WriteBatching {
		ln = batchListener{Listener: t.ln, stats: t.batch, full: tlsFullRecords}
	}
	if t.hitAns != nil {
		hs := newHandshakeListener(ln, t.conf, handshakeTimeout(t.cfg.Limits.ReadHeaderTimeout, t.cfg.Limits.WriteTimeout), t.log)
		cfg := t.hitCfg
		cfg.Skip = notHTTP1
		t.hits = hitpath.NewListener(hs, cfg, t.hitAns, t.hitM)
		t.srv.ConnContext = tlsConnContext
		go func() { errc <- t.hits.Serve(t.srv) }()
	} else {
		go func() { errc <- t.srv.ServeTLS(ln, "", "") }()
	}
	if t.h3 != nil {
		go func() {
			if err := t.h3.serve(t.udp); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, quic.ErrServerClosed) {
				errc <- fmt.Errorf("http3: %w", err)
			}
		}()
	}
	if t.files != nil {
		go t.files.watch(ctx, fileCertPoll)
	}
	if t.magic != nil {
		if err := t.magic.ManageAsync(ctx, t.cfg.TLS.ACMEDomains); err != nil {
			t.log.Error("ACME", "err", err)
		}
	}
}

// handshakeTimeout is how long a TLS handshake may take: the shorter of
// the header and write timeouts, as net/http's (tlsHandshakeTimeout)
// when it does the handshakes itself.
func handshakeTimeout(readHeader, write time.Duration) time.Duration {
	if write > 0 && (readHeader <= 0 || write < readHeader) {
		return write
	}
	return readHeader
}

// shutdown drains the HTTPS servers.
func (t *tlsFront) shutdown(ctx context.Context) {
	// HTTP/3 stops taking streams at the same moment as HTTPS over TCP.
	var h3Done sync.WaitGroup
	if t.h3 != nil {
		h3Done.Go(func() {
			_ = t.h3.shutdown(ctx)
			_ = t.udp.Close()
		})
	}
	if t.hits != nil {
		t.hits.Drain()
	}
	if err := t.srv.Shutdown(ctx); err != nil {
		_ = t.srv.Close() // the deadline passed: what is left ends now
	}
	if t.hits != nil {
		_ = t.hits.WaitWrites(ctx)
	}
	h3Done.Wait()
	if t.cache != nil {
		t.cache.Stop()
	}
}

// certificates lists what the node serves, for the status page.
func (t *tlsFront) certificates() []CertInfo {
	var out []CertInfo
	if t.files != nil {
		out = append(out, t.files.set.Load().infos...)
	}
	if t.magic != nil {
		for _, d := range t.cfg.TLS.ACMEDomains {
			for _, c := range t.cache.AllMatchingCertificates(d) {
				if c.Leaf != nil {
					out = append(out, CertInfo{Source: "acme", Names: c.Names, NotAfter: c.Leaf.NotAfter})
				}
			}
		}
	}
	return out
}

// sessionNamePrefix marks the server name a session ticket was issued
// under, in its SessionState.Extra.
const sessionNamePrefix = "edge-sni\x00"

// wrapSession is the TLS config's WrapSession: a ticket names the server
// name of the handshake it was issued in.
func (t *tlsFront) wrapSession(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	ss.Extra = append(ss.Extra, []byte(sessionNamePrefix+strings.ToLower(cs.ServerName)))
	return t.conf.EncryptTicket(cs, ss)
}

// unwrapSession is the TLS config's UnwrapSession: a ticket is resumed
// only under the server name it was issued under (RFC 6066 §3: the
// server MUST NOT resume a session for another name). crypto/tls resumed
// any, so a session whose client had verified a.test's certificate went
// on under SNI b.test, and with it the certificate check of the hosts a
// connection may ask for (misdirected; a review's
// TestS68TicketForAnotherNameIsNotResumed). (nil, nil): a full handshake.
func (t *tlsFront) unwrapSession(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	ss, err := t.conf.DecryptTicket(identity, cs)
	if err != nil || ss == nil {
		return nil, err
	}
	want := sessionNamePrefix + strings.ToLower(cs.ServerName)
	for _, x := range ss.Extra {
		if string(x) == want {
			return ss, nil
		}
	}
	return nil, nil
}

// misdirected reports whether r, which names host (canonical), came on a
// TLS connection whose certificate does not name host: a client that
// verified a.test's certificate asking for b.test (domain fronting, or a
// connection coalesced in error). RFC 9110 §7.4: such a request MUST be
// rejected unless it came from a trusted gateway (the caller's check);
// the answer is 421, on which a client opens a connection for the host
// (RFC 9113 §9.1.1). A connection without SNI (an IP literal, a health
// check) is not judged: its client checked no name. Nor is one whose
// certificate is ACME's and other than the name's own (unknown here):
// it is misdirected unless the host is the handshake's name.
func (t *tlsFront) misdirected(r *http.Request, host string) bool {
	if r.TLS == nil || r.TLS.ServerName == "" {
		return false
	}
	sni := strings.ToLower(strings.TrimSuffix(r.TLS.ServerName, "."))
	if host == sni {
		return false
	}
	leaf := t.leafFor(sni)
	return leaf == nil || leaf.VerifyHostname(host) != nil
}

// leafFor is the certificate certificate() gives a handshake for sni
// from the files (nil: one ACME manages, or none).
func (t *tlsFront) leafFor(sni string) *x509.Certificate {
	if t.files == nil {
		return nil
	}
	set := t.files.set.Load()
	c := set.match(sni)
	if c == nil && t.magic == nil {
		c = set.first
	}
	if c == nil || len(c.Certificate) == 0 {
		return nil
	}
	if c.Leaf != nil {
		return c.Leaf
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}
