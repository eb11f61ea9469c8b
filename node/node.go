// Package node assembles one edge process from a validated configuration:
// the upstream client, the caching handler, the public and admin
// listeners, and graceful shutdown.
package node

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgecache/edge/cluster"
	"github.com/edgecache/edge/coding"
	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/origin"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// Version is set at build time with -ldflags.
var Version = "dev"

// Node is one running edge process.
type Node struct {
	cfg       *config.Config
	log       *slog.Logger
	reg       *prometheus.Registry
	proxy     *proxy.Handler
	sites     atomic.Pointer[siteTable] // swapped by a reload
	siteM     *siteMetrics
	reloader  *reloader  // nil until EnableReload
	access    *accessLog // nil with log.access: off
	public    *http.Server
	admin     *http.Server
	pubLn     net.Listener
	conns     *connLimiter // bounds the public listeners' connections (limits.max_connections)
	peerConns *connLimiter // bounds the cluster listener's (defaultMaxPeerConnections); nil without a cluster
	admConns  *connLimiter // bounds the admin listener's (newAdminConnLimiter)
	admLn     net.Listener
	admCerts  *fileCerts // admin.tls (nil: plain HTTP)
	draining  atomic.Bool
	starting  atomic.Bool // a cluster node asks its peers for owed purges before it serves
	started   time.Time
	rates     rateWindow  // the status page's last-minute rates (rates.go)
	batch     *batchStats // client connections
	peerBatch *batchStats // the cluster listener's connections
	cluster   *cluster.Cluster
	peerLn    net.Listener
	peerUDP   *net.UDPConn
	peerSrv   *http.Server
	tls       *tlsFront         // nil without tls.listen
	hits      *hitpath.Listener // the plain listener's HTTP/1.1 hit path; nil with tuning.hit_path off
	peerHits  *hitpath.Listener // the cluster listener's (peers' fresh hits); nil with tuning.hit_path off or cluster.tls
	peerHitM  *hitpath.Metrics  // peerHits' counts, for the status page (edge_peer_loop_hits_total is the cluster's)
	hitM      *hitpath.Metrics
	guesses   *adminGuesses // wrong admin tokens per address (adminguard.go)
}

// New builds a node and binds its listeners, so that address errors are
// reported before anything is served.
func New(cfg *config.Config, log *slog.Logger) (_ *Node, err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "edge_build_info", Help: "Always 1; labels carry the version and node.",
		ConstLabels: prometheus.Labels{"version": Version, "node": cfg.NodeID},
	}, func() float64 { return 1 }))

	n := &Node{cfg: cfg, log: log, reg: reg, started: time.Now(), batch: new(batchStats), peerBatch: new(batchStats)}
	n.siteM = newSiteMetrics(reg)
	n.guesses = newAdminGuesses(reg)
	if cfg.Log.Access != "off" {
		if n.access, err = newAccessLog(cfg.Log.Access, cfg.Log.AccessFormat, log, reg); err != nil {
			return nil, &config.Error{Key: "log.access", Value: cfg.Log.Access, Reason: err.Error()}
		}
	}
	spoolBytes := cfg.Limits.SpoolBytes
	if spoolBytes > 0 {
		switch err := proxy.CheckSpoolDir(cfg.Limits.SpoolDir); {
		case err == nil:
		case cfg.Limits.SpoolDir != "":
			return nil, &config.Error{Key: "limits.spool_dir", Value: cfg.Limits.SpoolDir, Reason: err.Error() + " (set limits.spool_bytes: 0 to turn spilling off)"}
		default:
			// The default place (the system's temporary directory) is
			// not writable, as on a read-only root without a /tmp volume:
			// the node runs without spilling rather than not at all (a
			// review found the shipped manifest crash-looping).
			log.Warn("spilling is off: the system's temporary directory is not writable; set limits.spool_dir to a writable directory", "err", err)
			spoolBytes = 0
		}
	}
	n.siteM.originErrs = newOriginErrors(reg)
	table, err := newSiteTable(cfg, n.siteM, log)
	if err != nil {
		return nil, err
	}
	n.sites.Store(table)
	store := proxy.NewStore(cfg.Cache.MaxBytes, cfg.Cache.MaxVariants)
	if cfg.Cache.DiskPath != "" {
		if _, err := openDisk(cfg, store, reg, log); err != nil {
			return nil, err
		}
	}
	pc, err := proxyConfig(cfg)
	pc.SpoolBytes = spoolBytes // off when the default place is not writable
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	counted := newCountingFetcher(reg, originFetcher{n})
	var fetcher proxy.Fetcher = counted
	var cl *cluster.Cluster
	var peerTLS *tls.Config // mutual TLS on the peer listener (cluster.tls)
	if clustered(cfg) {
		cc, serverTLS, err := clusterConfig(cfg)
		if err != nil {
			return nil, err
		}
		cc.SiteOf = n.siteName
		// The cluster learns of removals through the store's OnRemove (an
		// optional method of cluster.Store): the assertion keeps it there.
		var _ interface{ OnRemove(func(string)) } = store
		if cl, err = cluster.New(cc, counted, store, cluster.NewMetrics(reg), log); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		fetcher, peerTLS = cl, serverTLS
	}
	pc.SiteOf, pc.SiteTable, pc.SiteFor = n.siteName, n.siteTableNames, n.siteFor
	h := proxy.New(pc, store, fetcher, proxy.NewMetrics(reg, store), log)
	if cl != nil {
		cl.SetBufferBudget(h) // peer answers read ahead share limits.max_buffered_bytes
		cl.SetPurgeNamer(h)
	}
	n.proxy, n.cluster = h, cl
	h.SetSites(table.siteNames(), cfg.Limits.SiteReserve)
	n.registerBatchMetrics()
	// One cleanup for every listener bound so far, if a later one fails.
	defer func() {
		if err == nil {
			return
		}
		if n.pubLn != nil {
			_ = n.pubLn.Close()
		}
		if n.admLn != nil {
			_ = n.admLn.Close()
		}
		if n.peerLn != nil {
			_ = n.peerLn.Close()
		}
		if n.peerUDP != nil {
			_ = n.peerUDP.Close()
		}
		if t := store.Disk(); t != nil {
			_ = t.Close(context.Background()) // releases its lock
		}
		if cl != nil {
			_ = cl.Close() // releases cluster.state_dir
		}
		if n.tls != nil {
			_ = n.tls.ln.Close()
			if n.tls.udp != nil {
				_ = n.tls.udp.Close()
			}
		}
	}()
	n.conns = newConnLimiter(maxConnections(cfg), cfg.Limits.MaxConnectionsPerClient, reg)
	if n.pubLn, err = listenClients(cfg.Listen); err != nil {
		return nil, fmt.Errorf("node: listen: %w", err)
	}
	n.pubLn = n.conns.listener(n.pubLn)
	if n.admLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
		return nil, fmt.Errorf("node: admin.listen: %w", err)
	}
	n.admConns = newAdminConnLimiter(reg)
	n.admLn = n.admConns.listener(n.admLn)
	if cl != nil {
		if n.peerLn, err = net.Listen("tcp", cfg.Cluster.Listen); err != nil {
			return nil, fmt.Errorf("node: cluster.listen: %w", err)
		}
		n.peerConns = newPeerConnLimiter(defaultMaxPeerConnections(cfg.Limits.MaxInflight), reg)
		n.peerLn = n.peerConns.listener(n.peerLn)
		ua, _ := net.ResolveUDPAddr("udp", n.peerLn.Addr().String())
		if n.peerUDP, err = net.ListenUDP("udp", ua); err != nil {
			return nil, fmt.Errorf("node: cluster.listen (udp): %w", err)
		}
		// Membership streams share the port; they are taken out before TLS.
		n.peerLn = cl.MuxListener(n.peerLn)
		if cfg.Tuning.WriteBatching {
			// A peer's answer of a few KiB is net/http's full buffer and
			// then the rest (the body's end and its MAC trailer): two
			// segments, so the ingress wakes twice before it has the
			// answer. Batched, it is one (under TLS, one per record pair).
			full := plainFull
			if peerTLS != nil {
				full = tlsFullRecords
			}
			n.peerLn = batchListener{Listener: n.peerLn, stats: n.peerBatch, full: full}
		}
		if peerTLS != nil {
			n.peerLn = tls.NewListener(n.peerLn, peerTLS)
		}
		n.peerSrv = &http.Server{Handler: withWriteDeadline(withBodyDeadline(cl.PeerHandler(n.servePeer, h.Purge), peerBodyTimeout), peerWriteTimeout(cfg.Limits.WriteTimeout)), ReadHeaderTimeout: 10 * time.Second,
			// Longer than a sender keeps an idle connection in its pool,
			// so that the sender closes it; but never unbounded.
			IdleTimeout: cluster.PeerIdleTimeout,
			ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	}
	front := n.siteFront(h)
	n.public = &http.Server{
		Handler:           front,
		MaxHeaderBytes:    int(cfg.Limits.MaxHeaderBytes),
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       cfg.Limits.IdleTimeout,
		// Reset per request; the proxy extends it before every chunk it writes.
		WriteTimeout: cfg.Limits.WriteTimeout,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	certs := sync.OnceValue(func() *certMetrics { return newCertMetrics(reg) })
	protocols := newProtocolCounter(reg)
	if cfg.TLS.Listen != "" {
		if n.tls, err = newTLSFront(cfg, withBodyDeadline(front, 0), log, reg, certs, n.conns, protocols); err != nil {
			return nil, err
		}
		n.tls.batch = n.batch
		n.public.Handler = n.tls.wrapPlain(front)
	} else {
		n.public.Handler = countPlain(front, protocols.WithLabelValues("http/1.1"))
	}
	// Outermost, so that every answer given without the body read (no
	// site for the host, a rate limit, the redirect to HTTPS) ends the
	// body at once too, not only the proxy's (which drops its own).
	n.public.Handler = withBodyDeadline(n.public.Handler, 0)
	n.hitM = hitpath.NewMetrics(reg)
	hitCfg := hitpath.Config{IdleTimeout: cfg.Limits.IdleTimeout,
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout, WriteTimeout: cfg.Limits.WriteTimeout,
		StripFields: pc.StripRequestHeaders, UnkeyedFields: pc.UnkeyedRequestHeaders}
	if cfg.Tuning.HitPath && (n.tls == nil || !cfg.TLS.RedirectToHTTPS) {
		hf := newHitFront(n)
		hf.proto = protocols.WithLabelValues("http/1.1")
		if n.tls != nil {
			hf.acme = n.tls.acme != nil
		}
		pub := net.Listener(n.pubLn)
		if cfg.Tuning.WriteBatching {
			// Inside the hit path: net/http's writes are batched, and a
			// hit's one write goes through the same connection in order.
			pub = batchListener{Listener: pub, stats: n.batch}
		}
		n.hits = hitpath.NewListener(pub, hitCfg, hf, n.hitM)
	}
	if cfg.Tuning.HitPath && n.tls != nil {
		hf := newHitFront(n)
		hf.tls, hf.proto = true, protocols.WithLabelValues("https/1.1")
		if fields := n.tls.responseFields(); len(fields) > 0 {
			hf.front = proxy.NewFrontFields(fields)
		}
		// The HTTP/1.1 connections of the TLS listener get the hit path
		// too (node/tlshit.go), and so do HTTP/2 ones with edge's HTTP/2
		// server: one answerer, one hit decision.
		n.tls.hitAns, n.tls.hitM, n.tls.hitCfg = hf, n.hitM, hitCfg
		if n.tls.h2 != nil {
			h2f := *hf
			h2f.h2, h2f.proto = true, protocols.WithLabelValues("h2")
			n.tls.h2.Hits, n.tls.h2.Fields = &h2f, hitpath.NewFields(hitCfg)
		}
	}
	if cl != nil && cfg.Tuning.HitPath && peerTLS == nil {
		// A peer's request for a page held here fresh is answered on the
		// listener's read loop (cluster/peerhit.go), as a client's hit is.
		// Under cluster.tls the loop would need the handshake listener the
		// TLS front has; peers there keep net/http.
		peerCfg := hitCfg
		peerCfg.IdleTimeout, peerCfg.ReadHeaderTimeout = cluster.PeerIdleTimeout, n.peerSrv.ReadHeaderTimeout
		peerCfg.KeepFields, peerCfg.AnswererFields = true, cluster.PeerHitFields
		n.peerHitM = hitpath.NewMetrics(nil)
		n.peerHits = hitpath.NewListener(n.peerLn, peerCfg, cl.PeerHits(peerHitServer{n}), n.peerHitM)
	}
	n.admin = &http.Server{Handler: withBodyDeadline(n.adminRouter(), 0), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: adminRequestTimeout, WriteTimeout: adminRequestTimeout, ConnState: trackRequests,
		// Over admin.tls with HTTP/2, WriteTimeout only resets a stream
		// (a frame a client that reads nothing never lets out): a write
		// that moves no byte for this long ends the connection (a review:
		// 200 unread /metrics held one for good, in a request, so never
		// evicted).
		HTTP2: &http.HTTP2Config{WriteByteTimeout: adminWriteByteTimeout},
		// A connection left idle (or a handshake never finished) is closed,
		// and failed handshakes go to the node's log at debug level, as on
		// the public listeners: with admin.tls the port may face a network
		// (a review's TestTheAdminListenerClosesIdleConnections).
		IdleTimeout: cfg.Limits.IdleTimeout, MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes),
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if cfg.Admin.TLS.CertFile != "" {
		files := []certFile{{key: "admin.tls.cert_file", certPath: cfg.Admin.TLS.CertFile, keyPath: cfg.Admin.TLS.KeyFile}}
		if n.admCerts, err = loadFileCerts(files, log, certs); err != nil {
			return nil, err
		}
		n.admin.TLSConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			// Whatever the name asked: the admin listener has one
			// certificate, re-read when its files change.
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return n.admCerts.set.Load().first, nil },
			NextProtos:     []string{"h2", "http/1.1"},
		}
	} else if cfg.Admin.Token != "" && !isLoopback(n.AdminAddr()) {
		log.Warn("the admin listener is not on loopback and serves plain HTTP: admin.token crosses the network in clear; set admin.tls.cert_file and admin.tls.key_file", "admin", n.AdminAddr())
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The memory bound of docs/operations.md: the store, the buffer
		// budget and headroom for connections and the runtime. A soft limit
		// makes the collector run before the heap doubles (GOGC's default)
		// when the edge is near its budget; GOMEMLIMIT overrides it.
		debug.SetMemoryLimit(memoryLimit(cfg.Cache.MaxBytes, cfg.Limits.MaxBufferedBytes))
	}
	if cfg.Admin.Token == "" && !isLoopback(n.AdminAddr()) {
		log.Warn("the admin listener is not on loopback and admin.token is empty: /status and /metrics are open to the network; set admin.token (purge and pprof stay closed without it)", "admin", n.AdminAddr())
	}
	return n, nil
}

// stopAnswerGrace is how long a stop past its deadline still waits for
// the admin and cluster listeners' requests before closing them: long
// enough for a purge's answer once its round has ended (milliseconds),
// short beside shutdown_timeout.
const stopAnswerGrace = time.Second

// memoryLimit is the soft memory limit for a store and a buffer budget of
// these sizes, with headroom: at most math.MaxInt64 (two sizes near the
// 4EiB each may have overflowed into a negative limit, which
// SetMemoryLimit reads as a query and leaves no limit: a review's).
func memoryLimit(storeBytes, bufferedBytes int64) int64 {
	sum := storeBytes
	for _, n := range []int64{bufferedBytes, memoryHeadroom} {
		if sum > math.MaxInt64-n {
			return math.MaxInt64
		}
		sum += n
	}
	return sum
}

// clustered reports whether cfg names peers.
func clustered(cfg *config.Config) bool { return len(cfg.Cluster.Peers) > 0 || cfg.Cluster.DNS != "" }

// proxyConfig maps the configuration onto the handler's settings.
// startupSummary is what the startup line says: the listeners, every
// site with its hosts, origins and rules, and the cluster's address and
// peers, so that a misconfiguration shows in the first line of the log.
func (n *Node) startupSummary() []any {
	out := []any{"node", n.cfg.NodeID, "listen", n.PublicAddr(), "tls", n.cfg.TLS.Listen, "http3", n.cfg.TLS.HTTP3, "admin", n.AdminAddr()}
	var sites []string
	for _, s := range n.cfg.Sites {
		d := s.Name + " " + strings.Join(s.Hosts, ",") + " -> " + strings.Join(s.Origins, ",")
		if s.Rules != nil {
			d += fmt.Sprintf(" (%d rules)", len(s.Rules.Rules))
		}
		if s.RateLimit.Rate > 0 {
			d += fmt.Sprintf(" (rate %g/s)", s.RateLimit.Rate)
		}
		sites = append(sites, d)
	}
	out = append(out, "sites", strings.Join(sites, "; "))
	if n.cluster != nil {
		peers := make([]string, 0, len(n.cfg.Cluster.Peers))
		for id, addr := range n.cfg.Cluster.Peers {
			peers = append(peers, id+"="+addr)
		}
		slices.Sort(peers)
		out = append(out, "cluster", n.cfg.Cluster.Listen, "peers", strings.Join(peers, ","))
		if n.cfg.Cluster.DNS != "" {
			out = append(out, "cluster_dns", n.cfg.Cluster.DNS)
		}
	}
	return out
}

// cachePolicy maps the cache.* keys a reload may change onto the proxy's
// policy.
func cachePolicy(cfg *config.Config) proxy.Policy {
	p := proxy.DefaultConfig().Policy
	p.HeuristicFraction = cfg.Cache.HeuristicFraction
	p.HeuristicMax = cfg.Cache.HeuristicMax
	p.StaleIfErrorDefault = cfg.Cache.StaleIfError
	p.StaleCeiling = cfg.Cache.StaleCeiling
	p.StoreSetCookie = cfg.Cache.StoreSetCookie
	p.ClientNoCache = cfg.Cache.ClientNoCache
	p.RevalidateInterval = cfg.Cache.RevalidateInterval
	return p
}

func proxyConfig(cfg *config.Config) (proxy.Config, error) {
	pc := proxy.DefaultConfig()
	pc.NodeID = cfg.NodeID
	pc.Policy = cachePolicy(cfg)
	pc.MaxObjectBytes = cfg.Cache.MaxObjectBytes
	pc.SliceBytes = cfg.Cache.SliceBytes
	pc.CoalesceTimeout = cfg.Cache.CoalesceTimeout
	pc.PassTTL = cfg.Cache.PassTTL
	pc.SortQuery = cfg.Cache.SortQuery
	pc.KeyScheme = cfg.Cache.KeyScheme
	pc.MaxURLBytes = cfg.Limits.MaxURLBytes
	pc.MaxInflight = cfg.Limits.MaxInflight
	pc.MaxInflightPerClient = cfg.Limits.MaxInflightPerClient
	pc.MaxBodyBytes = cfg.Limits.MaxBodyBytes
	pc.RequestBuffering = cfg.Limits.RequestBuffering
	pc.BodyTimeout = cfg.Limits.BodyTimeout
	pc.MinBodyRate = cfg.Limits.MinBodyRate
	pc.WriteTimeout = cfg.Limits.WriteTimeout
	pc.MaxBufferedBytes = cfg.Limits.MaxBufferedBytes
	pc.SpoolBytes, pc.SpoolDir = cfg.Limits.SpoolBytes, cfg.Limits.SpoolDir
	pc.MaxRanges = cfg.Limits.MaxRanges
	pc.TrustedProxies = cfg.Forwarding.TrustedProxies
	pc.StripRequestHeaders = nil
	for _, name := range cfg.Forwarding.StripHeaders {
		pc.StripRequestHeaders = append(pc.StripRequestHeaders, http.CanonicalHeaderKey(name))
	}
	pc.UnkeyedRequestHeaders = cfg.Forwarding.UnkeyedHeaders
	if cc := cfg.Compression; cc.Enabled {
		codec, err := coding.NewCodec(cc.Levels)
		if err != nil {
			return pc, fmt.Errorf("compression: %w", err)
		}
		stream, err := coding.NewStreamCodec(cc.StreamLevels)
		if err != nil {
			return pc, fmt.Errorf("compression: %w", err)
		}
		pc.Compression = &proxy.Compression{Codec: codec, Stream: stream, Offer: cc.Encodings, Types: cc.Types, MinBytes: cc.MinBytes, MaxDecodedBytes: cc.MaxDecodedBytes}
	}
	return pc, nil
}

// originConfig maps the configuration onto the upstream client's.
func originConfig(cfg *config.Config, log *slog.Logger, errs *prometheus.CounterVec) origin.ClientConfig {
	return origin.ClientConfig{
		URL: cfg.Origin.URL, ConnectTimeout: cfg.Origin.ConnectTimeout, ResponseTimeout: cfg.Origin.ResponseTimeout,
		MaxIdleConns: cfg.Origin.MaxIdleConns, IdleConnTimeout: cfg.Origin.IdleTimeout, PreserveHost: cfg.Origin.PreserveHost,
		CAFile: cfg.Origin.CAFile, ServerName: cfg.Origin.ServerName,
		Log: log, OnError: func(cause string) { errs.WithLabelValues(cause).Inc() },
	}
}

// clusterConfig maps the configuration onto the cluster's, and returns the
// peer listener's TLS settings (nil without cluster.tls).
func clusterConfig(cfg *config.Config) (cluster.Config, *tls.Config, error) {
	params, err := cfg.DetectorParams()
	if err != nil {
		return cluster.Config{}, nil, fmt.Errorf("node: cluster.detector_params: %w", err)
	}
	lossDefaults := cfg.DetectorLossDefaults()
	var shadows []cluster.ShadowDetector
	for i, spec := range cfg.Cluster.ShadowDetectors {
		if slices.Contains(cfg.Cluster.ShadowDetectors[:i], spec) {
			return cluster.Config{}, nil, fmt.Errorf("node: cluster.shadow_detectors: %q twice", spec)
		}
		s, err := cluster.ParseShadowDetector(spec, cfg.Cluster.HeartbeatPeriod, lossDefaults)
		if err != nil {
			return cluster.Config{}, nil, fmt.Errorf("node: cluster.shadow_detectors: %w", err)
		}
		shadows = append(shadows, s)
	}
	var serverTLS, clientTLS *tls.Config
	if cfg.Cluster.TLS.CertFile != "" {
		if serverTLS, clientTLS, err = cluster.LoadTLS(cfg.Cluster.TLS.CertFile, cfg.Cluster.TLS.KeyFile, cfg.Cluster.TLS.CAFile); err != nil {
			return cluster.Config{}, nil, fmt.Errorf("node: %w", err)
		}
	}
	_, dnsPort, _ := net.SplitHostPort(cfg.Cluster.Listen)
	return cluster.Config{
		NodeID: cfg.NodeID, Listen: cfg.Cluster.Listen, Peers: cfg.Cluster.Peers, DNS: cfg.Cluster.DNS, DNSPort: dnsPort,
		DNSInterval: cfg.Cluster.DNSInterval, ForgetDepartedAfter: cfg.Cluster.ForgetDeparted, StateDir: cfg.Cluster.StateDir, Secret: []byte(cfg.Cluster.Secret), Period: cfg.Cluster.HeartbeatPeriod,
		Detector: cfg.Cluster.Detector, DetectorArgs: params, Shadows: shadows, Selection: cfg.Cluster.Selection, ProbeFirstHop: cfg.Cluster.ProbeFirstHop, FirstHopWithProbes: cfg.Cluster.FirstHopWithProbes, StaleWhileClimbing: cfg.Cluster.StaleWhileClimbing, NegativeProbesBesideClimb: cfg.Cluster.ProbesBeside, SharedSilenceHold: cfg.Cluster.SharedSilence, SharedSilenceLossless: cfg.Cluster.SilenceLossless, NetworkLossMargin: cfg.Cluster.NetworkLoss, NetworkLossOnset: cfg.Cluster.NetworkOnset, ConfirmProbe: cfg.Cluster.ConfirmProbe, Mode: cfg.Routing.Mode,
		Placement: cfg.Routing.Placement, RegionalHomes: cfg.Routing.Home == routing.HomeRegion, Arity: cfg.Routing.D, Q: cfg.Routing.Q, HotThreshold: cfg.Routing.HotThreshold,
		PeerTimeout:    cfg.Cluster.PeerTimeout,
		PeerWholeBytes: cfg.Cluster.PeerWholeBytes,
		Indicator:      indicatorConfig(cfg),
		AdvertiseMax:   cfg.Indicators.AdvertiseMax,
		KeyScheme:      cfg.Cache.KeyScheme,
		TLS:            clientTLS,
		Monitoring:     cfg.Cluster.Monitoring,
		Region:         cfg.Cluster.Region,
		RegionCosts:    cfg.Cluster.RegionCosts,
		MonitorPeers:   cfg.Cluster.MonitorPeers,
		Advertise:      cfg.Cluster.Advertise,
		ProbeInterval:  cfg.Cluster.ProbeInterval,
		SuspicionMult:  cfg.Cluster.SuspicionMult,
	}, serverTLS, nil
}

// indicatorConfig is the filter's defaults with the configured capacity,
// bits per element and advertisement interval.
func indicatorConfig(cfg *config.Config) indicators.FilterConfig {
	fc := indicators.DefaultFilterConfig(cfg.Indicators.Capacity)
	fc.BitsPerElement, fc.UpdateInterval = cfg.Indicators.BPE, cfg.Indicators.UpdateInterval
	fc.FNREstimator = cfg.Indicators.FNREstimator
	return fc
}

// newOriginErrors registers the origin failure counter with every cause
// label present from the start.
func newOriginErrors(reg prometheus.Registerer) *prometheus.CounterVec {
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_origin_errors_total", Help: "Origin requests that failed without a response, by cause (dns, connect, refused, timeout, reset, stalled, other).",
	}, []string{"cause"})
	for _, c := range []string{"dns", "connect", "refused", "timeout", "reset", "stalled", "other"} {
		errs.WithLabelValues(c)
	}
	reg.MustRegister(errs)
	return errs
}

// newCountingFetcher wraps the origin client with the origin-fetch metrics.
func newCountingFetcher(reg prometheus.Registerer, f proxy.Fetcher) countingFetcher {
	fetches := prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_origin_fetches_total", Help: "Requests this node sent to the origin itself (cluster or not); the origin offload is 1 − this over client requests."})
	perPage := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "edge_origin_fetches_per_page",
		Help:    "For each origin fetch, how many times this node has fetched that page so far (1 = first fetch); the tail shows pages fetched again and again.",
		Buckets: []float64{1, 2, 3, 4, 8, 16, 64},
	})
	reg.MustRegister(fetches, perPage)
	return countingFetcher{f: f, n: fetches, perPage: perPage, pages: routing.NewCounters(100000, 1)}
}

// registerBatchMetrics exports the write-batching counters.
func (n *Node) registerBatchMetrics() {
	n.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edge_client_write_syscalls_total", Help: "Write system calls on client connections (with tuning.write_batching)."},
			func() float64 { return float64(n.batch.sends.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edge_client_writes_merged_total", Help: "Response writes merged into one writev by tuning.write_batching."},
			func() float64 { return float64(n.batch.merged.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edge_peer_write_syscalls_total", Help: "Write system calls on the cluster listener's connections (peer answers; with tuning.write_batching)."},
			func() float64 { return float64(n.peerBatch.sends.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edge_peer_writes_merged_total", Help: "Peer answer writes merged into one writev by tuning.write_batching."},
			func() float64 { return float64(n.peerBatch.merged.Load()) }),
		newSiteSlotsCollector(n),
	)
}

// memoryHeadroom is the memory allowed beyond the store and the buffer
// budget: goroutines, connection buffers, metrics and the runtime.
const memoryHeadroom = 64 << 20

// isLoopback reports whether a listener address is on a loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Proxy returns the node's caching handler.
func (n *Node) Proxy() *proxy.Handler { return n.proxy }

// Registry returns the node's metrics registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// PublicAddr and AdminAddr are the bound listener addresses.
func (n *Node) PublicAddr() string { return n.pubLn.Addr().String() }

// AdminAddr is the bound admin listener address.
func (n *Node) AdminAddr() string { return n.admLn.Addr().String() }

// Run serves until ctx ends or a listener fails, then drains in-flight
// requests for at most the shutdown timeout; it returns the failure.
func (n *Node) Run(ctx context.Context) error {
	errc := make(chan error, 6)
	clusterCtx, stopCluster := context.WithCancel(context.Background())
	defer stopCluster()
	servePublic := func() {
		if n.tls != nil {
			n.tls.run(clusterCtx, errc)
		}
		switch {
		case n.hits != nil:
			go func() { errc <- n.hits.Serve(n.public) }()
		case n.cfg.Tuning.WriteBatching:
			go func() { errc <- n.public.Serve(batchListener{Listener: n.pubLn, stats: n.batch}) }()
		default:
			go func() { errc <- n.public.Serve(n.pubLn) }()
		}
	}
	if n.cluster != nil {
		n.starting.Store(true) // until the peers have delivered what they owe (below)
	} else {
		servePublic()
	}
	if n.admCerts != nil {
		go func() { errc <- n.admin.ServeTLS(n.admLn, "", "") }()
	} else {
		go func() { errc <- n.admin.Serve(n.admLn) }()
	}
	if n.admCerts != nil {
		go n.admCerts.watch(clusterCtx, fileCertPoll)
	}
	n.sites.Load().start()
	// Responses stored (on disk) under a site this configuration no longer
	// gives their host cannot be served or purged: they go. Under the
	// reload's lock, as a reload's own drop is: the admin listener is up,
	// and a reload beside this would judge the same keys by another table.
	if r := n.reloader; r != nil {
		r.mu.Lock()
	}
	dropped := n.proxy.DropUnreachable()
	if r := n.reloader; r != nil {
		r.mu.Unlock()
	}
	if dropped > 0 {
		n.log.Info("stored responses of sites no longer configured removed", "responses", dropped)
	}
	sampling := make(chan struct{})
	defer close(sampling)
	go n.sampleRates(sampling)
	accessCtx, stopAccess := context.WithCancel(context.Background())
	defer stopAccess()
	if n.access != nil {
		go n.access.run(accessCtx)
	}
	if n.cluster != nil {
		if n.peerHits != nil {
			go func() { errc <- n.peerHits.Serve(n.peerSrv) }()
		} else {
			go func() { errc <- n.peerSrv.Serve(n.peerLn) }()
		}
		go func() {
			if err := n.cluster.Run(clusterCtx, n.peerUDP); err != nil {
				errc <- err
			}
		}()
		// Before the first client: a purge this node missed while it
		// was down runs here first (cluster/owedpull.go). Clients'
		// connections wait in the listen queue meanwhile.
		n.cluster.CollectOwed(ctx)
		n.starting.Store(false)
		servePublic()
	}
	n.log.Info("edge serving", n.startupSummary()...)
	// A listener or the cluster failing stops the node the same orderly
	// way a signal does: the other listeners drain, what is owed is
	// written and cluster.state_dir let go, and the disk tier writes its
	// index and lets its directory go, so the next start (another
	// process, or New again in this one) finds both free and whole.
	var serveErr error
	select {
	case serveErr = <-errc:
		n.log.Error("serving failed; stopping", "err", serveErr)
	case <-ctx.Done():
	}
	n.draining.Store(true)
	n.log.Info("draining", "timeout", n.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	// Every public listener stops taking requests at once: the HTTPS
	// ones drained only after the plain one had (a slow plain request
	// kept them answering new requests for up to shutdown_timeout after
	// the stop began; a review).
	var tlsDone sync.WaitGroup
	if n.tls != nil {
		tlsDone.Go(func() { n.tls.shutdown(sctx) })
	}
	if n.hits != nil {
		n.hits.Drain() // the next request on each connection is net/http's, which closes it
	}
	err := n.public.Shutdown(sctx)
	if err != nil {
		// The deadline passed with requests still under way: they end
		// now, not when the process does (a node stopped in a process
		// that goes on, as tests and an in-process restart do; a review).
		_ = n.public.Close()
	}
	if n.hits != nil {
		_ = n.hits.WaitWrites(sctx) // net/http took those connections for idle
	}
	tlsDone.Wait()
	peerLeft := false // the cluster listener's requests outlived the deadline
	if n.cluster != nil {
		// Peers still climbing through us get their answers, then we leave.
		if n.peerHits != nil {
			n.peerHits.Drain()
		}
		peerLeft = n.peerSrv.Shutdown(sctx) != nil
		if n.peerHits != nil {
			_ = n.peerHits.WaitWrites(sctx)
		}
	}
	// Then the bodies still being stored (ours and the peers'), within the
	// same deadline: a slow origin stream must not hold shutdown for ever.
	if werr := n.proxy.WaitContext(sctx); werr != nil {
		n.log.Warn("shutdown deadline passed with bodies still being stored; they are not kept", "err", werr)
	}
	if n.cluster != nil {
		stopCluster()
		_ = n.peerUDP.Close()
	}
	adminLeft := n.admin.Shutdown(sctx) != nil
	if n.cluster != nil {
		// After the admin listener: no purge comes in after it, and what
		// the last ones owe is written before the next process may start
		// (Close waits for the purge rounds under way, whose answers go
		// out on the admin and cluster listeners: so before these close
		// what is left on them; a review's, held by
		// TestOwedReviewAPurgeInItsRoundAtShutdownIsWrittenOrReportedNotSaved).
		if cerr := n.cluster.Close(); cerr != nil {
			n.log.Error("cluster state", "err", cerr)
		}
	}
	// Requests still under way past the deadline (a profile, a client that
	// reads nothing) end now, their slots and goroutines with them, as on
	// the public listener (a review found Run returning with them alive),
	// after a moment for the answers of purges whose rounds Close has just
	// seen end.
	if adminLeft || peerLeft {
		gctx, gcancel := context.WithTimeout(context.Background(), stopAnswerGrace)
		if adminLeft && n.admin.Shutdown(gctx) != nil {
			_ = n.admin.Close()
		}
		if peerLeft && n.peerSrv.Shutdown(gctx) != nil {
			_ = n.peerSrv.Close()
		}
		gcancel()
	}
	if derr := n.closeDisk(sctx); derr != nil {
		n.log.Error("disk tier", "err", derr)
	}
	n.sites.Load().stop()
	if n.access != nil {
		stopAccess() // after the servers drained: every request's line is queued
		<-n.access.done
	}
	if serveErr != nil {
		return fmt.Errorf("node: serve: %w", serveErr)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("node: shutdown: %w", err)
	}
	n.log.Info("stopped")
	return nil
}

func (n *Node) adminRouter() http.Handler {
	r := chi.NewRouter()
	r.Handle("/metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if n.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if n.starting.Load() {
			http.Error(w, "starting: asking peers for purges owed to this node", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	r.Get("/", func(w http.ResponseWriter, req *http.Request) { http.Redirect(w, req, "/status", http.StatusFound) })
	r.Get("/status", n.statusPage)
	r.Get("/status.json", n.statusJSON)
	r.Get("/status/route.json", n.routeJSON)
	r.Group(func(r chi.Router) {
		r.Use(n.requireToken)
		r.Post("/purge", n.purge)
		r.Post("/reload", n.reloadHandler)
		r.Get("/cluster/keys", n.clusterKeys)
		r.Post("/cluster/keys", n.clusterKeys)
		r.HandleFunc("/debug/pprof/*", pprof.Index)
		r.HandleFunc("/debug/pprof/cmdline", pprofCmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	})
	return r
}

// requireToken checks the admin bearer token in constant time. With no
// token configured the protected endpoints are closed.
func (n *Node) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.Admin.Token == "" {
			http.Error(w, "admin.token is not set: protected endpoints are disabled", http.StatusForbidden)
			return
		}
		if n.guesses.throttled(r.RemoteAddr, time.Now()) {
			tooManyGuesses(w)
			return
		}
		if !n.authorized(r, false) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edge-admin"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the admin token: as a bearer token
// (the scheme is case-insensitive, RFC 9110 §11.1), or, with allowBasic,
// as the password of Basic credentials, which is what a browser can send
// for the read-only status page. Purge and pprof take only Bearer: a
// browser re-sends Basic credentials on its own, so a cross-site form
// could otherwise purge the cache. With no token nothing is authorized.
func (n *Node) authorized(r *http.Request, allowBasic bool) bool {
	if n.cfg.Admin.Token == "" {
		return false
	}
	auth := r.Header.Get("Authorization")
	scheme, cred, _ := strings.Cut(auth, " ")
	var got string
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		got = strings.TrimSpace(cred)
	case allowBasic && strings.EqualFold(scheme, "Basic"):
		_, pass, ok := r.BasicAuth()
		if !ok {
			return false
		}
		got = pass
	default:
		return false
	}
	now := time.Now()
	if n.guesses.throttled(r.RemoteAddr, now) {
		return false // not compared: an address out of guesses learns nothing
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(n.cfg.Admin.Token)) == 1 {
		return true
	}
	n.guesses.wrong(r.RemoteAddr, now)
	return false
}

// pprofCmdline is /debug/pprof/cmdline with the values of secret flags
// replaced, so that a profile shared for debugging carries no secret.
func pprofCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(strings.Join(RedactArgs(os.Args), "\x00")))
}

// secretFlags are the command-line flags whose values are secrets.
var secretFlags = []string{"secret", "admin-token", "token", "cluster-secret"}

// RedactArgs returns args with the values of secret flags replaced by
// "REDACTED", in the --flag value and --flag=value forms.
func RedactArgs(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		flag, ok := strings.CutPrefix(out[i], "-")
		if !ok {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(flag, "-"), "=")
		switch {
		case !slices.Contains(secretFlags, name):
		case hasValue:
			out[i] = out[i][:strings.Index(out[i], "=")+1] + "REDACTED"
		case i+1 < len(out):
			out[i+1] = "REDACTED"
			i++
		}
	}
	return out
}

// purge handles POST /purge?url=…|prefix=…|tag=…[&soft=1].
func (n *Node) purge(w http.ResponseWriter, r *http.Request) {
	q, err := proxy.CheckPurgeQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := proxy.ParsePurgeQuery(q)
	var count int
	var peers cluster.FanOut
	if n.cluster != nil && !proxy.PurgeLocal(q) {
		count, peers, err = n.cluster.Purge(r.Context(), p, n.proxy.Purge)
	} else {
		count, err = n.proxy.Purge(p)
	}
	if err != nil && !errors.Is(err, proxy.ErrPurgeIncomplete) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err == nil && peers.Incomplete > 0 {
		err = fmt.Errorf("%w at %d peers: a file stayed on a failing disk (see their logs)", proxy.ErrPurgeIncomplete, peers.Incomplete)
	}
	if err == nil && peers.NotSaved != nil {
		err = fmt.Errorf("%w: owed to %d peers, but not written to cluster.state_dir (a restart of this node loses it; purge again once it is writable): %v", proxy.ErrPurgeIncomplete, peers.Owed, peers.NotSaved)
	}
	if err == nil && peers.Refused > 0 {
		err = fmt.Errorf("%w: %d peers refused it and may still serve what it names (see their logs and this node's)", proxy.ErrPurgeIncomplete, peers.Refused)
	}
	// peers_owed: peers that did not take it now (suspected, gone, not
	// answering), owed it when they are back (cluster/purgeowed.go).
	// peers_incomplete: peers that ran it but left a file on a failing
	// disk, as this node's own ErrPurgeIncomplete. peers_refused: peers
	// that answered they will not take it (not owed: it would be refused
	// again).
	answer := map[string]any{"purged": count, "soft": p.Soft, "peers_purged": peers.Purged, "peers_owed": peers.Owed, "peers_incomplete": peers.Incomplete, "peers_refused": peers.Refused}
	if host := purgeHost(p); host != "" && n.siteFor(host) == nil {
		// Nothing is ever cached under a host no site serves (its
		// requests get 421), so such a purge can only find nothing: a
		// misspelt host, or a site not configured on this node. Said,
		// so that it is not taken for a page that was not cached.
		answer["warning"] = fmt.Sprintf("no site serves host %q: nothing is cached under it", host)
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		n.log.Error("purge incomplete", "url", p.URL, "prefix", p.Prefix, "tag", p.Tag, "purged", count, "peers", peers.Purged, "peers_owed", peers.Owed, "peers_incomplete", peers.Incomplete, "peers_refused", peers.Refused, "err", err)
		answer["error"] = err.Error()
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(answer)
		return
	}
	n.log.Info("purge", "url", p.URL, "prefix", p.Prefix, "tag", p.Tag, "soft", p.Soft, "purged", count, "peers", peers.Purged, "peers_owed", peers.Owed)
	_ = json.NewEncoder(w).Encode(answer)
}

// purgeHost is the host a URL or URL-prefix purge names ("" for a tag, a
// path prefix, or a URL without one), as site lookup spells it.
func purgeHost(p proxy.PurgeRequest) string {
	target := p.URL
	if target == "" {
		target = p.Prefix
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return ""
	}
	host, ok := proxy.CanonicalHost(u.Host)
	if !ok {
		return ""
	}
	return host
}

// countingFetcher counts the requests that really reach the origin, and
// per page (in a bounded LRU) how many times each was fetched.
type countingFetcher struct {
	f       proxy.Fetcher
	n       prometheus.Counter
	perPage prometheus.Histogram
	pages   *routing.Counters
}

func (c countingFetcher) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	c.n.Inc()
	nth, _ := c.pages.Observe(routing.KeyHash(fr.Key), 0)
	c.perPage.Observe(float64(nth))
	return c.f.Fetch(ctx, fr)
}
