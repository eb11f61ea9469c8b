// Package config loads and validates a node's configuration from
// config.yaml, EDGE_* environment variables and command-line flags (in
// increasing precedence) through viper. Every key, its default and the
// reason for the default live in one table, Keys, from which the
// documentation is generated; a bad value stops startup with an error that
// names the key.
package config

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/edgecache/edge/cluster"
	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/coding"
	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/internal/didyoumean"
	"github.com/edgecache/edge/origin"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
	"github.com/edgecache/edge/rules"
)

// Kind is the type of a configuration value.
type Kind int

// The kinds of values.
const (
	String Kind = iota
	Int
	Float
	Bool
	Duration
	Size // bytes, written as 64MiB, 512KB, 1GiB or a plain integer
	List // comma-separated strings
	// CertList is a list of certificate and key files: a YAML list of
	// {cert_file, key_file}, or CERT:KEY,CERT:KEY in a string.
	CertList
	// SiteList is the sites list (YAML only; see Site).
	SiteList
	// RuleList is a list of cache rules (YAML only; see package rules).
	RuleList
)

func (k Kind) String() string {
	return [...]string{"string", "int", "float", "bool", "duration", "size", "list", "list of cert:key", "list of sites", "list of rules"}[k]
}

// Key documents one configuration key.
type Key struct {
	Name    string // dotted viper key, e.g. origin.url
	Kind    Kind
	Default string // the default as it would be written in config.yaml
	Doc     string // what it does and why the default
}

// Env returns the environment variable that sets the key.
func (k Key) Env() string {
	return "EDGE_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Name))
}

// Keys lists every configuration key. The order is the order of the docs.
func Keys() []Key {
	// Defaults the runtime packages own are read from them, so that each
	// default has one source; the reasons are given here and there.
	pd, fd, cd, od := proxy.DefaultConfig(), indicators.DefaultFilterConfig(0), cluster.DefaultConfig(), origin.DefaultClientConfig()
	size := formatSize
	dur := formatDuration
	float := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	return []Key{
		{"node_id", String, "", "Name of this node in Cache-Status, Via, metrics and the cluster. Empty: the host name."},
		{"listen", String, "127.0.0.1:8080", "Public listener for browsers. Loopback by default so a first run exposes nothing."},
		{"admin.listen", String, "127.0.0.1:9180", "Admin listener: /metrics, /healthz, /readyz, /status, /purge, /debug/pprof. Keep it off the public network."},
		{"admin.token", String, "", "Bearer token for /purge and /debug/pprof. Empty: those endpoints answer 403 (purge is never open)."},
		{"admin.tls.cert_file", String, "", "PEM certificate (chain) for the admin listener: with admin.tls.key_file, the admin listener serves HTTPS only (HTTP/1.1 and HTTP/2), so admin.token and the status page do not cross the network in clear; re-read when the file changes on disk. edge health and edge reload then connect over HTTPS and accept exactly this certificate. Empty: plain HTTP (keep admin.listen on loopback or a private network)."},
		{"admin.tls.key_file", String, "", "PEM private key for admin.tls.cert_file."},
		{"origin.url", String, "", "Origin base URL (http or https): the one-site shortcut, a site answering every host. Required unless sites is set."},
		{"origin.connect_timeout", Duration, dur(od.ConnectTimeout), "TCP connect budget; a dead origin is reported in seconds, not minutes."},
		{"origin.response_timeout", Duration, dur(od.ResponseTimeout), "Wait for response headers once the request is sent; long enough for slow dynamic pages."},
		{"origin.idle_timeout", Duration, dur(od.IdleConnTimeout), "Idle keep-alive connections to the origin are closed after this; below typical origin keep-alive limits."},
		{"origin.max_idle_conns", Int, strconv.Itoa(od.MaxIdleConns), "Idle keep-alive connections kept to the origin; enough for a busy node without hoarding sockets."},
		{"origin.preserve_host", Bool, "false", "Send the client's Host to the origin instead of the origin URL's host."},
		{"origin.ca_file", String, "", "PEM CA bundle that signs an https origin's certificate, instead of the system roots (a private CA)."},
		{"origin.server_name", String, "", "Server name (SNI and certificate check) for an https origin, when it differs from the origin URL's host (an IP address, say)."},
		{"sites", SiteList, "", "Sites, each {name, hosts: [exact or *.one-label wildcard], origins: [URLs], balance: least|hash, default: bool, preserve_host: bool, health: {path, interval, timeout, expect_status}, rules: [cache rules], rate_limit: {rate, burst, key}}. The Host picks the site; no match answers 421 unless a site is default (docs/operations.md, \"Sites and origins\")."},
		{"tls.listen", String, "", "Public HTTPS listener (TLS 1.2+, HTTP/2 by ALPN; HTTP/3 on the same port over UDP with tls.http3). Empty: no TLS listener."},
		{"tls.cert_file", String, "", "PEM certificate chain for tls.listen; re-read when the file changes on disk."},
		{"tls.key_file", String, "", "PEM private key for tls.cert_file."},
		{"tls.certificates", CertList, "", "More certificates, chosen by SNI (exact names, then one-label wildcards; the first certificate answers clients without SNI): a YAML list of {cert_file, key_file}."},
		{"tls.http3", Bool, "false", "Serve HTTP/3 (QUIC) on the UDP port of tls.listen and advertise it with Alt-Svc on HTTPS responses."},
		{"tls.hsts", String, "", "Strict-Transport-Security value added to HTTPS responses, e.g. max-age=31536000; includeSubDomains. Empty: none (a wrong HSTS locks browsers out for its max-age)."},
		{"tls.acme.domains", List, "", "Names to obtain certificates for with ACME (certmagic). Empty: no ACME. Every node of a cluster must list the same names and share tls.acme.storage."},
		{"tls.acme.email", String, "", "Account e-mail given to the ACME CA (expiry notices)."},
		{"tls.acme.ca", String, "https://acme-v02.api.letsencrypt.org/directory", "ACME directory URL; Let's Encrypt's production CA by default."},
		{"tls.acme.ca_root", String, "", "PEM root that signs the ACME directory's own HTTPS certificate, for a private CA (pebble in tests). Empty: system roots."},
		{"tls.acme.storage", String, "", "Directory for ACME accounts, certificates, locks and pending challenges. Share it between nodes (NFS, a volume) so that any node answers a challenge and one node renews. Empty: certmagic's default under $HOME."},
		{"tls.acme.renew_check_interval", Duration, "10m", "How often certificates are checked for renewal (certmagic renews in the last third of a certificate's life)."},
		{"http.redirect_to_https", Bool, "false", "Answer plain-HTTP requests with 308 (permanent, method kept) to https (ACME HTTP-01 challenges excepted). Needs tls.listen."},
		{"cache.key_scheme", Bool, "false", "Keep the client's scheme in the cache key. Off: http and https share entries, as CDNs do; an origin that answers them differently can send Vary: X-Forwarded-Proto."},
		{"cache.max_bytes", Size, "256MiB", "Byte budget of the in-memory store (headers and bodies); the least recently used URLs are evicted beyond it."},
		{"cache.disk.path", String, "", "Directory of the disk tier (created if missing; give each node its own). Empty: RAM only. Every stored response is also written there, survives restarts and crashes, and is read back on a RAM miss (docs/storage.md)."},
		{"cache.disk.max_bytes", Size, "1GiB", "Byte budget of the disk tier's files, never exceeded; the least recently used URLs are removed beyond it."},
		{"cache.disk.promote_hits", Int, "1", "The disk hit on which an object is copied into RAM. 1 (every disk hit) gave the most RAM hits on every trace measured; 2 never raised the hit ratio (docs/storage.md, edge sim tiers)."},
		{"cache.slice_bytes", Size, "1MiB", "Responses larger than this are fetched and stored in slices of this size with Range requests (as nginx's slice module), so that video-sized objects are cached and a Range request costs the origin only the slices it covers; 0 stores every response whole. Compressible responses up to cache.max_object_bytes stay whole (they are compressed at the edge)."},
		{"cache.max_object_bytes", Size, size(pd.MaxObjectBytes), "Largest response stored; larger ones stream through uncached so one file cannot flush the store."},
		{"cache.max_variants", Int, "16", "Variants kept per URL for Vary; bounds what a client can make us store by varying headers."},
		{"cache.heuristic_fraction", Float, float(pd.Policy.HeuristicFraction), "Heuristic freshness as a fraction of (Date − Last-Modified), RFC 9111 §4.2.2's typical 10 %."},
		{"cache.heuristic_max", Duration, dur(pd.Policy.HeuristicMax), "Cap on heuristic freshness so an old Last-Modified does not pin a page for weeks."},
		{"cache.stale_if_error", Duration, dur(pd.Policy.StaleIfErrorDefault), "How long past expiry a response may be served when the origin fails and it set no stale-if-error itself."},
		{"cache.stale_ceiling", Duration, dur(pd.Policy.StaleCeiling), "Operator ceiling on every stale-while-revalidate and stale-if-error window."},
		{"cache.store_set_cookie", Bool, strconv.FormatBool(pd.Policy.StoreSetCookie), "Store responses that set cookies (with Set-Cookie stripped from the stored copy). Off: one user's cookie can never reach another."},
		{"cache.coalesce_timeout", Duration, dur(pd.CoalesceTimeout), "Longest a request waits for the response headers of an identical fetch under way (504 beyond); it never starts a second origin fetch. As long as origin.response_timeout."},
		{"cache.sort_query", Bool, strconv.FormatBool(pd.SortQuery), "Sort query parameters in the cache key and in the forwarded request alike. Off: ?a=1&b=2 and ?b=2&a=1 are different URLs, as the origin may treat them."},
		{"cache.pass_ttl", Duration, dur(pd.PassTTL), "How long a URL that answered uncacheable skips request coalescing (hit-for-pass)."},
		{"cache.client_no_cache", String, "ignore", "How a client's Cache-Control: no-cache or max-age=0 (a browser's hard reload), Pragma: no-cache or min-fresh is treated: ignore (answer from the cache, as nginx and Varnish do; RFC 9111 lets a shared cache), coalesce (at most one revalidation per URL per cache.revalidate_interval) or honour (every such request revalidates). A rule's client_no_cache overrides it per path (docs/rules.md)."},
		{"cache.revalidate_interval", Duration, "10s", "With client_no_cache: coalesce, the least time between two revalidations of one URL that clients asked for."},
		{"rules", RuleList, "", "Cache rules of the one-site shortcut (origin.url), matched in order by path, method and status: TTLs, bypass, cache-key shaping, header edits, cookie stripping, client no-cache handling. With sites, each site has its own (sites[i].rules). docs/rules.md."},
		{"compression.enabled", Bool, "true", "Compress responses at the edge for clients that accept it (br, zstd, gzip), storing the identity body once; the origin is asked for identity. Off: bodies pass as the origin sent them."},
		{"compression.encodings", List, "br,zstd,gzip", "Codings produced, any of br, zstd, gzip. At equal q-values in Accept-Encoding the order is br, zstd, gzip: the smallest output first."},
		{"compression.types", List, strings.Join(coding.DefaultTypes, ","), "Media types compressed: exact (text/html), type/* or a +suffix. Images, video, archives and woff2 are compressed already."},
		{"compression.min_bytes", Size, "1KiB", "Smallest body compressed; below about a packet the saving is lost in framing."},
		{"compression.brotli_level", Int, strconv.Itoa(coding.DefaultLevels.Br), "brotli level 0–11; a cached body is compressed once, so a middle level pays (docs/benchmarks.md has the cost per MiB)."},
		{"compression.stream_brotli_level", Int, strconv.Itoa(coding.DefaultStreamLevels.Br), "brotli level of responses encoded as they stream (the first reader of a miss, uncacheable responses, a hit whose stored form is not made yet): paid per request, so the fastest level (docs/benchmarks.md)."},
		{"compression.stream_zstd_level", Int, strconv.Itoa(coding.DefaultStreamLevels.Zstd), "zstd level of responses encoded as they stream; the fastest, as for brotli."},
		{"compression.stream_gzip_level", Int, strconv.Itoa(coding.DefaultStreamLevels.Gzip), "gzip level of responses encoded as they stream: 1 costs half of level 6's CPU for 17 % more bytes, so misses are not CPU-bound on compression."},
		{"compression.zstd_level", Int, strconv.Itoa(coding.DefaultLevels.Zstd), "zstd level 1–22 (the library maps it to four speeds); 3 is zstd's default."},
		{"compression.gzip_level", Int, strconv.Itoa(coding.DefaultLevels.Gzip), "gzip level 1–9; 6 is zlib's default balance."},
		{"compression.max_decoded_bytes", Size, "32MiB", "Largest body the edge decodes when the origin sent a coding the client does not accept; more is a decompression bomb (502)."},
		{"limits.max_header_bytes", Size, "32KiB", "Request header size limit (431 beyond); browsers stay far below it."},
		{"limits.max_url_bytes", Int, strconv.Itoa(pd.MaxURLBytes), "Request-target length limit (414 beyond), the common browser and server limit."},
		{"limits.max_body_bytes", Size, size(pd.MaxBodyBytes), "Request body limit (413 beyond)."},
		{"limits.max_inflight", Int, strconv.Itoa(pd.MaxInflight), "Concurrent upstream requests per node (misses, passes, uploads; 503 beyond). Hits never need a slot, so slow uploads or a slow origin cannot stop them; a request body is read before its request takes one (limits.request_buffering)."},
		{"limits.max_connections", Int, "0", "Client connections (plain and TLS TCP, and QUIC) open at once; one over it is closed as soon as it is accepted (edge_client_connections_refused_total{reason=\"max\"}). 0: the open-file limit less a reserve of 1024 + 4 × limits.max_inflight for origin and peer connections and the disk tier, the reserve at most half the limit (10,000 at an open-file limit of 20,000 and the default limits.max_inflight), at least 64, so that clients holding connections open cannot spend the descriptors the node's own work needs."},
		{"limits.max_connections_per_client", Int, "0", "Client connections open at once from one client: an IPv4 address, or an IPv6 /64, which one subscriber holds whole (closed as soon as accepted beyond it; reason per_client); 0 turns it off because users share NAT addresses."},
		{"limits.site_reserve", Float, "0.5", "The share of limits.max_inflight split evenly among the sites (when there are two or more), each site's part for its own requests only: a site whose origin hangs or crawls fills the rest of the slots but never another site's part, so the other sites' misses go on (503 overload_site past it). A site alone busy uses all but the other sites' unused parts. 0: one pool, first come first served."},
		{"limits.max_inflight_per_client", Int, strconv.Itoa(pd.MaxInflightPerClient), "Concurrent requests per client: an IPv4 address, or an IPv6 /64 (429 beyond); 0 turns it off because users share NAT addresses."},
		{"limits.rate", Float, "0", "Requests per second each client may make to a site, on average (429 with Retry-After beyond the burst); 0 turns it off. A site's rate_limit overrides it."},
		{"limits.rate_burst", Int, "100", "Requests a client may make at once above limits.rate: a page load fetches tens of assets together."},
		{"limits.rate_key", String, "address", "What a client is for limits.rate: address (the connection's address; an IPv6 client is its /64) or header:NAME (e.g. header:X-Api-Key, whose values are only as trustworthy as whoever sets them; requests without it share one bucket per client; behind a balancer, list it in forwarding.trusted_proxies so that its address is not held to one client's tenfold share)."},
		{"limits.read_header_timeout", Duration, "10s", "Time a client has to send its request headers (on each HTTP/3 request stream too); stops slowloris."},
		{"limits.request_buffering", Bool, strconv.FormatBool(pd.RequestBuffering), "Read a request body whole, of known length or chunked (up to 64 KiB in memory, more into limits.spool_bytes; a chunked one then goes with its Content-Length), before its request takes a limits.max_inflight slot, as nginx's proxy_request_buffering: clients trickling uploads cannot take every slot and stop misses. false: every body streams to the origin as it arrives (an origin that shows upload progress, or reads a stream as it comes) and a slow upload holds its slot. Either way a body is no longer read once the origin has answered: full-duplex requests (gRPC bidirectional streams) are not carried."},
		{"limits.body_timeout", Duration, dur(pd.BodyTimeout), "Grace a request body has to start; after it the body must average limits.min_body_rate (408 otherwise)."},
		{"limits.min_body_rate", Size, size(pd.MinBodyRate), "Bytes per second a request body must average after limits.body_timeout; a byte every few seconds is an attack, not a client."},
		{"limits.write_timeout", Duration, dur(pd.WriteTimeout), "Longest one 32 KiB write to a client may block; a client reading slower than 32 KiB per this is disconnected."},
		{"limits.max_buffered_bytes", Size, size(pd.MaxBufferedBytes), "Bytes held by fills in progress plus stored responses evicted while still being sent, small uncacheable answers read whole, coder state, and request bodies up to 64 KiB read before their request is sent (at most a quarter of it). Memory stays within cache.max_bytes + this + a per-connection constant (docs/operations.md)."},
		{"limits.spool_bytes", Size, "256MiB", "Disk a node may use at once for the rest of responses it cannot store (uncacheable, too large, over the buffer budget) whose slowest client reads slower than the origin sends: the origin connection and its limits.max_inflight slot are freed at the origin's pace instead of the client's (one response takes at most a quarter); request bodies of known length over 64 KiB are read into it before their request takes a slot (at most half of it). 0 turns it off (such a response then holds its slot until its slowest reader is done or limits.write_timeout ends it); otherwise at least 2MiB. Where the default place is not writable (a read-only root) the node starts with it off and says so."},
		{"limits.spool_dir", String, "", "Directory of those spill files (unlinked as soon as they are made, so nothing outlives the process); empty: the system's temporary directory. Where that is a tmpfs (as on Debian 13), limits.spool_bytes is memory: point this at a disk."},
		{"limits.max_ranges", Int, strconv.Itoa(pd.MaxRanges), "Ranges honoured in one request after merging overlapping and nearby ones; more get the whole response (RFC 9110 §14.2)."},
		{"limits.idle_timeout", Duration, "120s", "Idle client keep-alive connections are closed after this."},
		{"forwarding.trusted_proxies", List, "", "CIDRs of proxies in front of the edge whose forwarding fields (X-Forwarded-*, Forwarded, X-Real-IP and relatives) are kept; everyone else's are dropped and the edge writes its own X-Forwarded-For/-Host/-Proto, Forwarded and X-Real-IP."},
		{"forwarding.strip_headers", List, strings.Join(pd.StripRequestHeaders, ","), "Request fields never forwarded, besides those the edge always drops (names with '_', method overrides, URL rewrites, Edge-*)."},
		{"forwarding.unkeyed_headers", List, "", "Non-standard request fields you know your origin never renders into a cacheable page: forwarded without splitting the cache. Any other field the edge does not know is forwarded and made part of the cache key (docs/operations.md, \"What reaches the origin\")."},
		{"cluster.listen", String, "127.0.0.1:7946", "Peer listener: signed HTTP between nodes (TCP), heartbeats (UDP) and membership gossip (memberlist, UDP and TCP) on the same port."},
		{"cluster.advertise", String, "", "HOST:PORT the other nodes reach this one at, when it is not cluster.listen (NAT, or cluster.listen on 0.0.0.0). Empty: cluster.listen, or this host's private address when that is 0.0.0.0."},
		{"cluster.peers", List, "", "Static peers as ID=HOST:PORT,ID=HOST:PORT (self may be listed; it is skipped): members from the start, and the seeds membership joins through. Empty with an empty cluster.dns: a single node."},
		{"cluster.dns", String, "", "A DNS name whose addresses are seeds (a Kubernetes headless service), re-resolved every cluster.dns_interval until joined; members then come from membership (memberlist)."},
		{"cluster.dns_interval", Duration, dur(cd.DNSInterval), "How often cluster.dns is re-resolved for seeds once this node has joined (before that, every 2 s), and how often the cluster.peers given by host name are re-resolved, so that a peer that moves behind its name is followed."},
		{"cluster.membership_probe_interval", Duration, dur(cd.ProbeInterval), "memberlist's probe period: a dead node is declared dead everywhere after about suspicion_mult × log10(nodes) of these (measured 9.7 s at 100 nodes), agreed by indirect probes; a node's own routing drops a silent peer sooner, by its heartbeats (docs/cluster.md)."},
		{"cluster.state_dir", String, "", "Directory where the node keeps the purges peers are owed (a peer that missed a purge, down or cut off, gets it when it is back) in one small file, written on every change and read back at start, so that a restart of this node does not lose them and the peer does not come back serving purged pages. Empty: in memory only (a restart of every node that owes a peer a purge loses it; purge again). Not cache.disk.path nor inside it. One process at a time: a second one given the same directory stops at its start. A file that does not parse stops the start, naming it."},
		{"cluster.forget_departed_after", Duration, dur(cd.ForgetDepartedAfter), "How long a peer that left the membership (dead or gone, agreed by memberlist) stays on the status page and in its per-peer metric series before this node forgets it; a peer named in cluster.peers is never forgotten. Keeps the peer table and /metrics bounded when nodes come and go (autoscaling, rolling deploys)."},
		{"cluster.membership_suspicion_mult", Int, strconv.Itoa(cd.SuspicionMult), "memberlist's suspicion timeout multiplier (its LAN default); Lifeguard shortens a suspicion that others confirm."},
		{"cluster.secret", String, "", "Shared secret authenticating heartbeats, peer requests and peer responses (HMAC-SHA256). Required with peers; at least 16 bytes."},
		{"cluster.tls.cert_file", String, "", "PEM certificate of this node for mutual TLS on the peer listener (TCP). With key_file and ca_file, peers must present a certificate from the CA for peer HTTP; membership traffic on the same port is encrypted and authenticated by the membership key (cluster.secret) instead."},
		{"cluster.tls.key_file", String, "", "PEM private key for cluster.tls.cert_file."},
		{"cluster.tls.ca_file", String, "", "PEM CA bundle that signs the peers' certificates (client and server side)."},
		{"cluster.heartbeat_period", Duration, dur(cd.Period), "Heartbeat period Δ; detection takes a few periods."},
		{"cluster.detector", String, cd.Detector, "Failure detector per peer: " + strings.Join(fdetect.Names, ", ") + " (docs/failure-detection.md)."},
		{"cluster.loss_budget", Float, "2.5e-06", "Loss-aware margin, for every detector: the chance per heartbeat that random heartbeat loss may cause a false suspicion (2.5e-6: 0.09 per link-hour at 10 heartbeats a second). The detector waits for as many extra periods as the link's measured loss needs (none on a clean link, one at 0.1 % loss, 4 at 5 %, at most 9). 0 turns it off (the published detectors as they are). docs/failure-detection.md."},
		{"cluster.detector_params", List, "", "Detector parameters as name=value,…; e.g. quantile=0.999 for ml, alpha_ms=200 for chen."},
		{"cluster.loss_estimator", String, "rate", "How the loss-aware margin (cluster.loss_budget) reads a link's loss: rate (every lost heartbeat, averaged over about 50 and 1,000 heartbeats) or runs (a run of consecutive losses counted once, over about 8,000 heartbeats; the 50-heartbeat average past its first loss): a short burst then weighs like one lost heartbeat. docs/failure-detection.md."},
		{"cluster.shadow_detectors", List, "", "Detectors run beside cluster.detector on the same heartbeats for comparison only, as detector or detector/name=value/…, e.g. phi,chen/alpha_ms=300: their suspicions are shown on the status page (status.json peers[].shadows) and counted in edge_fd_shadow_suspicions_total, never acted on. cluster.loss_budget and cluster.loss_estimator apply to them as to cluster.detector unless an entry sets loss_budget or loss_estimator. The fault lab (make chaos) compares detectors this way."},
		{"cluster.peer_timeout", Duration, dur(cd.PeerTimeout), "Connect budget to a peer and a probe's deadline; a slow peer costs at most this before failover."},
		{"cluster.peer_whole_bytes", Size, size(cd.PeerWholeBytes), "A peer's answer up to this size is read whole (its MAC checked) before its header goes to the client, so that one that breaks or crawls mid-body on a lossy link is replaced by the next hop or the origin with nothing sent; one silent for 4 × cluster.peer_timeout (at least 1 s), or still arriving then on a link whose heartbeats show loss, is raced against the origin (a slow answer on a clean link is left alone: it is likely the home relaying a slow origin). Larger answers stream from there, resumed from the origin by Range when they break. 0 streams every answer."},
		{"cluster.monitoring", String, cd.Monitoring.String(), "Which peers each node heartbeats: all (every member; detection in one hop), subset (cluster.monitor_peers neighbours plus the peers it routes requests to; the others are trusted by membership), or auto (all up to 24 nodes, subset above, where all-to-all heartbeat CPU passes 5 % of a core per node; docs/cluster.md)."},
		{"cluster.monitor_peers", Int, strconv.Itoa(cd.MonitorPeers), "Neighbours each node heartbeats with subset monitoring, besides the peers it routes to; even, 2–64. Membership is memberlist's; neighbours keep a few links' detectors warm. 4 costs about 40 packets/s per node at a 100 ms period (docs/cluster.md)."},
		{"cluster.region", String, "", "This node's region or zone label (lower-case letters, digits, . _ -; up to 32), in its membership metadata and heartbeats, so every member knows it (per-region homes) and peers can price access to it with cluster.region_costs."},
		{"cluster.region_costs", List, "", "Access cost per region pair as A/B=DURATION,… (e.g. eu/us=20ms; symmetric). A peer in a listed pair costs that much as c_j in probe selection; otherwise its measured RTT does."},
		{"cluster.selection", String, cd.Selection.String(), "Which peers to probe before climbing: fna-rate (the default: fna-home with a home's ν priced by the hit rate its negative probes realised, the derived ν as a prior, never priced worse than fno, a little exploration), fna-learned (fna-home with ν corrected by what its negative probes found, never priced worse than fno; the default until 2026-12-04), fna-home (estimates per peer over the pages homed there), fna (the paper: false-negative aware over all pages), fno (positive indications only), off, or race-all (every peer asked on every miss, racing the climb: a measurement of the best miss latency any rule could get, at the most probes and bytes)."},
		{"cluster.shared_silence_hold", Bool, "true", "Hold a peer's suspicion while no other peer's heartbeat comes on time either (a delay or loss spike on every link, not a crash), for up to max(500 ms, 4 heartbeat periods) past its due time; after such a shared silence every peer gets a whole freshness interval. Needs another monitored peer (three nodes); a link whose heartbeats show loss is left to cluster.loss_budget. false: suspect on the detector alone. docs/failure-detection.md."},
		{"cluster.network_loss_margin", Bool, "true", "Widen every link's loss-aware margin (cluster.loss_budget) to the heartbeat loss at least half the monitored links show at once, learned over about 10 heartbeats: a loss burst on the whole network is not taken for crashes before each link's own estimates learn it. A crash while most links lose is detected up to 9 periods later. false: each link's own estimates only. docs/failure-detection.md."},
		{"cluster.network_loss_onset", Bool, "true", "With cluster.network_loss_margin, also read the network's loss from the other links' last four due heartbeats (lost, or overdue by half a period) and the echoes of ours they missed, counted when at least two of those links miss heartbeats: a burst's first periods, before any later heartbeat reveals the gaps, are not taken for crashes. A node cut off together with others from the rest suspects the rest a period later, or about 4.5 periods after the cut when a heartbeat was lost just before it. false: the quick estimates only. docs/failure-detection.md."},
		{"cluster.confirm_probe", Bool, "true", "Before suspecting a silent peer, ask it directly (eight small authenticated packets on the heartbeat port, any one answer will do) and suspect it only if no answer comes within four round trips (5 ms at least, a quarter period at most): a single lost heartbeat on a link that has lost nothing yet is not taken for a crash. A crash or a cut is detected that much later. Peers without it never answer and are judged on the detector alone. false: the detector alone. docs/failure-detection.md."},
		{"cluster.shared_silence_evidence", String, "on_time", "What releases a held suspicion (cluster.shared_silence_hold): on_time, another peer's heartbeat that came on time; lossless, one that came on time right after its predecessor (a loss burst on every link then holds too, at the cost of a crash detected a little later under loss)."},
		{"cluster.negative_probes", String, "beside_climb", "When the climb waits for probes of negatively indicated peers: before_climb, for every probe's answer (the paper's pricing); beside_climb, only for the positively indicated ones, the negative answers racing the climb (a negative probe that misses then costs the request nothing). docs/cluster.md."},
		{"cluster.first_hop_with_probes", Bool, "true", "Ask the climb's first hop (usually the page's home in this region) only-if-cached beside the probes the ingress waits for, so that a page the home holds is not fetched from a farther positively indicated peer first; the first answer that holds the page wins. No effect with cluster.probe_first_hop: true (the first hop is then a candidate like any peer). docs/cluster.md (\"The first hop beside the probes\")."},
		{"cluster.stale_while_climbing", Bool, "true", "When a probe finds the page stale at a peer (within the site's stale-while-revalidate window), the climb goes to the page's home, and that home, asked beside the probes (cluster.first_hop_with_probes), answered first that it holds no fresh copy: ask the peer again at once and serve whichever answers first, the stale copy or the climb, as a single cache serves a stale copy and refreshes in the background. The climb runs on and refreshes the page at the home. Never for a revalidation of this node's own copy. Off: the stale copy is served only if the climb fails. docs/cluster.md (\"Stale while climbing\")."},
		{"cluster.probe_first_hop", Bool, "false", "Let the selection probe the climb's first hop (usually the page's home). Off by default: the climb asks that peer at once anyway, so probing it first only adds a round trip; measured in docs/cluster.md (\"Two regions\")."},
		{"routing.mode", String, cd.Mode.String(), "hybrid (home cache while cold, random tree once hot), tree, ring (one owner per page) or none (every node alone)."},
		{"routing.placement", String, cd.Placement.String(), "Which caches play a page's tree ranks: distinct (a per-page rendezvous ranking, no cache twice: a hot page's busiest cache at 1.67× the fair share) or paper (independent ring lookups: 6.99×)."},
		{"routing.home", String, routing.HomeGlobal.String(), "Where a page's home is: global (one home in the cluster) or region (one in each cluster.region, so a miss's first hop stays in the region and the other regions' copies are found through their indicators: docs/cluster.md \"Two regions\"). region needs cluster.region and routing.placement distinct; regions travel in membership metadata, so it works with any cluster.monitoring."},
		{"routing.d", Int, strconv.Itoa(cd.Arity), "Tree arity d: the origin sees at most d·q fetches per page."},
		{"routing.q", Int, strconv.Itoa(cd.Q), "Requests a cache forwards before it keeps a copy; the paper shows a larger q only lowers the supported rate."},
		{"routing.hot_threshold", Int, strconv.Itoa(cd.HotThreshold), "hybrid: requests an ingress sees for a page before it spreads over the tree (measured best in docs/routing.md)."},
		{"indicators.capacity", Int, strconv.Itoa(cd.Indicator.Capacity), "Expected number of cached objects; the Bloom filter has bpe bits per object."},
		{"indicators.bpe", Float, float(fd.BitsPerElement), "Bits per element of the indicator (fpr ≈ 0.1 % fresh)."},
		{"indicators.update_interval", Int, strconv.Itoa(fd.UpdateInterval), "Insertions between advertisements (U)."},
		{"indicators.advertise_max", Duration, dur(cd.AdvertiseMax), "Advertise at least this often when the store changed (T)."},
		{"indicators.fnr_estimator", String, fd.FNREstimator.String(), "How a node estimates its advertised indicator's false-negative rate: bits (the paper's, from bit counts), count (keys inserted since the advertisement) or exact (held keys the snapshot misses; costs a key set). Peers price negative probes with it (ν)."},
		{"tuning.write_batching", Bool, "true", "Send net/http's header-plus-body write pair as one writev on the public listener (about a third fewer system calls per cached hit) and on the cluster listener (a peer's answer of a few KiB in one segment)."},
		{"tuning.hit_path", Bool, "true", "HTTP/1.1 connections of the plain and TLS listeners (and HTTP/2 ones, with tuning.http2_server edge) answer fresh RAM hits (no Vary) of plain GET and HEAD themselves, the head serialised once per entry and written with the body, without net/http's per-request work; every other request is net/http's handler path as before (docs/benchmarks.md, package hitpath). Off on the plain listener with http.redirect_to_https, where every plain request is redirected. The cluster listener (without cluster.tls) answers peers' signed requests for fresh RAM hits the same way (cluster/peerhit.go)."},
		{"tuning.http2_server", String, "edge", "Which HTTP/2 server the TLS listener runs: edge (package h2server: hits answered on each connection's read loop, several answers per write; about 2x net/http's HTTP/2 hit rate, docs/benchmarks.md) or go (net/http's own, a goroutine per stream)."},
		{"shutdown_timeout", Duration, "15s", "On SIGTERM, time to drain in-flight requests before closing."},
		{"log.level", String, "info", "debug, info, warn or error."},
		{"log.format", String, "text", "text or json."},
		{"log.access", String, "off", "Access log: off, stdout or a file path (reopened on SIGUSR1, after logrotate renamed it). Lines are written off the request path; a slow or full disk drops lines (counted), never requests."},
		{"log.access_format", String, "json", "json (one object per line) or combined (Apache/nginx combined, then site, cache result and duration in ms)."},
	}
}

// Config is a validated configuration.
type Config struct {
	NodeID string
	Listen string
	Admin  struct {
		Listen string
		Token  string
		TLS    struct{ CertFile, KeyFile string }
	}
	TLS struct {
		Listen            string
		CertFile, KeyFile string
		Certificates      []CertPair
		HTTP3             bool
		HSTS              string
		ACMEDomains       []string
		ACMEEmail         string
		ACMECA            string
		ACMECARoot        string
		ACMEStorage       string
		ACMERenewCheck    time.Duration
		RedirectToHTTPS   bool
	}
	// Sites are the configured sites; with none, one site named
	// "default" for every host with origin.url.
	Sites  []Site
	Origin struct {
		CAFile          string
		ServerName      string
		URL             string
		ConnectTimeout  time.Duration
		ResponseTimeout time.Duration
		IdleTimeout     time.Duration
		MaxIdleConns    int
		PreserveHost    bool
	}
	Cache struct {
		MaxBytes          int64
		DiskPath          string
		DiskMaxBytes      int64
		DiskPromoteHits   int
		MaxObjectBytes    int64
		SliceBytes        int64
		MaxVariants       int
		HeuristicFraction float64
		HeuristicMax      time.Duration
		StaleIfError      time.Duration
		StaleCeiling      time.Duration
		StoreSetCookie    bool
		CoalesceTimeout   time.Duration
		// ClientNoCache is how a client's request to skip the cache is
		// treated where no rule says; RevalidateInterval is coalesce's.
		ClientNoCache      rules.ClientNoCache
		RevalidateInterval time.Duration
		SortQuery          bool
		KeyScheme          bool
		PassTTL            time.Duration
	}
	Compression struct {
		Enabled         bool
		Encodings       coding.Set
		Types           coding.Types
		MinBytes        int64
		Levels          coding.Levels
		StreamLevels    coding.Levels
		MaxDecodedBytes int64
	}
	Limits struct {
		MaxHeaderBytes       int64
		MaxURLBytes          int
		MaxBodyBytes         int64
		MaxInflight          int
		MaxInflightPerClient int
		SiteReserve          float64 // limits.site_reserve
		// MaxConnections bounds the clients' connections (0: the default,
		// from the open-file limit); MaxConnectionsPerClient those of one
		// address (0: off).
		MaxConnections          int
		MaxConnectionsPerClient int
		// RateLimit is every site's per-client request rate unless the
		// site sets its own.
		RateLimit         RateLimit
		ReadHeaderTimeout time.Duration
		IdleTimeout       time.Duration
		RequestBuffering  bool
		BodyTimeout       time.Duration
		MinBodyRate       int64
		WriteTimeout      time.Duration
		MaxBufferedBytes  int64
		SpoolBytes        int64
		SpoolDir          string
		MaxRanges         int
	}
	Forwarding struct {
		TrustedProxies []netip.Prefix
		StripHeaders   []string
		UnkeyedHeaders []string
	}
	Tuning struct {
		WriteBatching bool
		HitPath       bool
		HTTP2Server   string // edge or go
	}
	Cluster struct {
		Listen          string
		Peers           map[string]string
		DNS             string
		DNSInterval     time.Duration
		Advertise       string
		ProbeInterval   time.Duration
		SuspicionMult   int
		ForgetDeparted  time.Duration
		StateDir        string
		Secret          string
		HeartbeatPeriod time.Duration
		Detector        string
		DetectorParams  []string
		ShadowDetectors []string
		LossBudget      float64
		LossEstimator   string // rate or runs
		PeerTimeout     time.Duration
		PeerWholeBytes  int64
		Selection       cluster.Selection
		ProbeFirstHop   bool
		ProbesBeside    bool // cluster.negative_probes beside_climb
		// FirstHopWithProbes is cluster.first_hop_with_probes.
		FirstHopWithProbes bool
		// StaleWhileClimbing is cluster.stale_while_climbing.
		StaleWhileClimbing bool
		SharedSilence      bool // cluster.shared_silence_hold
		SilenceLossless    bool // cluster.shared_silence_evidence lossless
		NetworkLoss        bool // cluster.network_loss_margin
		ConfirmProbe       bool // cluster.confirm_probe
		NetworkOnset       bool // cluster.network_loss_onset
		Monitoring         cluster.Monitoring
		MonitorPeers       int
		Region             string
		RegionCosts        map[[2]string]time.Duration
		TLS                struct {
			CertFile, KeyFile, CAFile string
		}
	}
	Routing struct {
		Mode         routing.Mode
		Placement    routing.Placement
		Home         routing.Home
		D, Q         int
		HotThreshold int
	}
	Indicators struct {
		Capacity       int
		BPE            float64
		UpdateInterval int
		AdvertiseMax   time.Duration
		FNREstimator   indicators.FNREstimator
	}
	ShutdownTimeout time.Duration
	Log             struct {
		Level        string
		Format       string
		Access       string
		AccessFormat string
	}
}

// Error is a configuration error naming the key.
type Error struct {
	Key    string
	Value  any
	Reason string
	// Source is where the value came from: "flag --name", an environment
	// variable's name, "the config file", or "" (the default).
	Source string
}

func (e *Error) Error() string {
	from := ""
	if e.Source != "" {
		from = " (from " + e.Source + ")"
	}
	if e.Value == nil {
		return fmt.Sprintf("config: %s: %s%s", e.Key, e.Reason, from)
	}
	return fmt.Sprintf("config: %s: %q %s%s", e.Key, valueText(e.Value), e.Reason, from)
}

// valueText writes a value as the file most likely had it: YAML reads a
// whole number too large for an int as a float, which fmt writes 1e+20
// (written out up to 64 digits; past them an exponent reads better).
func valueText(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1e64 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// NewViper returns a viper instance with every key's default, EDGE_*
// environment variables and, if file is not empty, the YAML file.
func NewViper(file string) (*viper.Viper, error) {
	v := viper.New()
	for _, k := range Keys() {
		v.SetDefault(k.Name, k.Default)
		if err := v.BindEnv(k.Name, k.Env()); err != nil {
			return nil, fmt.Errorf("config: binding %s: %w", k.Env(), err)
		}
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		v.SetConfigFile(file) // only named: errors found later, at Load, say which file
		if err := readYAML(v, data); err != nil {
			if !fromFile(err, file) {
				return nil, fmt.Errorf("config: %s: %w", file, err)
			}
			// Each names its key and, now, the file; Load reports them
			// with the values' errors.
			keepFileErrors(v, err)
		}
	}
	return v, nil
}

// fileErrorsKey is where the file's key errors (an unknown key, a key
// written twice, a section given a value) wait for Load, which reports
// them together with the values' errors: an operator's walk-through fixed
// the unknown keys only to be told of a bad value on the next run. Not a
// configuration key, as flagsKey.
const fileErrorsKey = "file key errors"

// FileErrors is what NewViper found wrong with the file's keys (nil: nothing),
// which Load reports with the values' errors: for a caller that reads a
// few keys without Load (edge reload and edge health find the admin
// listener so), which must refuse such a file all the same.
func FileErrors(v *viper.Viper) error { return joinErrors(fileErrorList(v)) }

// keepFileErrors notes err, made of *Error only, for Load.
func keepFileErrors(v *viper.Viper, err error) { v.Set(fileErrorsKey, errorList(err)) }

// fileErrorList is what keepFileErrors noted in v (nil: nothing).
func fileErrorList(v *viper.Viper) []error {
	list, _ := v.Get(fileErrorsKey).([]error)
	return list
}

// errorList is err's errors: the list of an *Errors, else err alone.
func errorList(err error) []error {
	if many, ok := err.(*Errors); ok {
		return many.List
	}
	return []error{err}
}

// fromFile names file as the source of every key error in err, reporting
// whether err is made of them only: "config: origin.conect_timeout: is not
// a known key … (from /etc/edge.yaml)", where wrapping repeated the prefix
// ("config: /etc/edge.yaml: config: origin.conect_timeout: …").
func fromFile(err error, file string) bool {
	list := errorList(err)
	for _, e := range list {
		if _, ok := e.(*Error); !ok {
			return false
		}
	}
	for _, e := range list {
		if ke := e.(*Error); ke.Source == "the config file" {
			ke.Source = file
		}
	}
	return true
}

// readYAML merges YAML data into v and rejects unknown keys, which are
// almost always typos that would otherwise be silently ignored.
func readYAML(v *viper.Viper, data []byte) error {
	v.SetConfigType("yaml")
	if err := v.MergeConfig(bytes.NewReader(data)); err != nil {
		return withYAMLContext(err, data)
	}
	if texts := stringKeysAsWritten(data); len(texts) > 0 {
		// In the file's layer, so that the environment and flags still
		// override them.
		if err := v.MergeConfigMap(texts); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	known := make(map[string]bool)
	for _, k := range Keys() {
		known[k.Name] = true
	}
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	slices.Sort(names)
	errs := checkShape(data)
	keys := v.AllKeys()
	slices.Sort(keys)
	for _, k := range keys {
		if !known[k] && !shapeCovers(errs, k) {
			hint := ""
			if len(errs) < maxErrorsShown { // only these are shown: a suggestion costs a scan of every name
				hint = didyoumean.Suggest(k, names)
			}
			errs = append(errs, &Error{Key: k, Reason: "is not a known key (see docs/operations.md)" + hint, Source: "the config file"})
		}
	}
	if nums := numbersAsWritten(data); len(nums) > 0 {
		v.Set(numbersKey, nums) // after the check of known keys: it is none
	}
	return joinErrors(errs)
}

// stringKeysAsWritten finds the string keys (node_id, cluster.secret,
// admin.token …) whose value the YAML decoder read as something else,
// a number or a boolean, and gives their text as written, as a nested map
// for viper: decoded, 0123 is 83 (an octal number), 1e3 is 1000 and a
// 29-digit secret a float that has lost most of its digits, which str
// would then print. Keys inside lists (sites) are not looked at.
func stringKeysAsWritten(data []byte) map[string]any {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil // MergeConfig read it, so this cannot fail; if it did, nothing to add
	}
	isString := map[string]bool{}
	for _, k := range Keys() {
		if k.Kind == String {
			isString[k.Name] = true
		}
	}
	out := map[string]any{}
	var walk func(n *yaml.Node, prefix string, into map[string]any)
	walk = func(n *yaml.Node, prefix string, into map[string]any) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := strings.ToLower(n.Content[i].Value)
			key, val := prefix+name, n.Content[i+1]
			switch {
			case val.Kind == yaml.ScalarNode && isString[key] && val.ShortTag() != "!!str" && val.ShortTag() != "!!null":
				into[name] = val.Value
			case val.Kind == yaml.MappingNode:
				sub := map[string]any{}
				walk(val, key+".", sub)
				if len(sub) > 0 {
					into[name] = sub
				}
			}
		}
	}
	walk(doc.Content[0], "", out)
	return out
}

// numbersKey is where readYAML keeps the text of the file's numbers, by
// key, for errors to echo (numbersAsWritten). Not a configuration key.
const numbersKey = "numbers as written"

// numbersAsWritten gives the text of every number the file holds outside
// lists, by dotted key: YAML reads one too large for an int as a float,
// which loses its digits past the sixteenth, and an error must show what
// the operator wrote (a review's).
func numbersAsWritten(data []byte) map[string]string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	out := map[string]string{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := prefix+strings.ToLower(n.Content[i].Value), resolve(n.Content[i+1])
			if val == nil {
				continue
			}
			switch {
			case val.Kind == yaml.ScalarNode && (val.ShortTag() == "!!int" || val.ShortTag() == "!!float"):
				out[key] = val.Value
			case val.Kind == yaml.MappingNode:
				walk(val, key+".")
			}
		}
	}
	walk(doc.Content[0], "")
	return out
}

var yamlLineRE = regexp.MustCompile(`line (\d+):`)

// secretLineRE matches a YAML line whose key names a credential.
var secretLineRE = regexp.MustCompile(`(?i)^(\s*[-\s]*[a-z_.]*(secret|token|password)[a-z_.]*\s*:).*$`)

// secretFlowRE matches a credential's key and value inside a line, as a
// flow mapping writes it ({secret: x, peers: …}, "token": "x"): the value
// is a quoted string or runs to the next ',', '}', ']' or '#'.
var secretFlowRE = regexp.MustCompile(`(?i)([a-z_.]*(?:secret|token|password)[a-z_.]*["']?\s*:)\s*("[^"]*"?|'[^']*'?|[^,}\]#]*)`)

// maskSecret hides the value of a credential's line: an error message
// goes to logs and to /reload's answer, which must not carry it. A line
// that starts with the key loses all that follows it; a credential
// elsewhere in the line (a flow mapping's) loses its value (a review
// found cluster: {secret: …, peers: [} printed whole).
func maskSecret(line string) string {
	line = secretLineRE.ReplaceAllString(line, "$1 <hidden>")
	return secretFlowRE.ReplaceAllString(line, "$1 <hidden>")
}

// withYAMLContext adds the lines around a YAML syntax error. The YAML
// library names the line where its parser gave up, which is often before
// the fault: an unclosed flow list on the line before it, a block whose
// later line is mis-indented on the line that opened the block (an
// operator's walk-through: "line 14" for a fault on line 20, which the
// two lines shown then missed). So the line before it and the next six
// are shown, and the message says near, not on.
func withYAMLContext(err error, data []byte) error {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(string(data), "\n")
	var b strings.Builder
	for i := n - 1; i <= n+6 && i <= len(lines); i++ {
		if i >= 1 {
			fmt.Fprintf(&b, "\n  %4d | %s", i, maskSecret(lines[i-1]))
		}
	}
	if b.Len() == 0 {
		return err
	}
	return fmt.Errorf("%w (the fault is near, often below, the line named):%s", err, b.String())
}

// LoadBytes parses YAML config data with defaults and validates it (no
// environment, no flags): the fuzzing and test entry point.
func LoadBytes(data []byte) (*Config, error) {
	v := viper.New()
	for _, k := range Keys() {
		v.SetDefault(k.Name, k.Default)
	}
	if err := readYAML(v, data); err != nil {
		if !fromFile(err, "the config file") {
			return nil, fmt.Errorf("config: %w", err)
		}
		keepFileErrors(v, err)
	}
	return Load(v)
}

// Load reads and validates every key from v.
func Load(v *viper.Viper) (*Config, error) {
	p := parser{v: v}
	if list := fileErrorList(v); len(list) > 0 {
		p.fileErrs = list
		p.err, p.errs = list[0], slices.Clone(list)
	}
	c := &Config{}
	c.NodeID = p.str("node_id")
	c.Listen = p.addr("listen")
	c.Admin.Listen = p.addr("admin.listen")
	c.Admin.Token = p.str("admin.token")
	c.Admin.TLS.CertFile = p.str("admin.tls.cert_file")
	c.Admin.TLS.KeyFile = p.str("admin.tls.key_file")
	c.Origin.URL = p.str("origin.url")
	c.Origin.ConnectTimeout = p.dur("origin.connect_timeout", true)
	c.Origin.ResponseTimeout = p.dur("origin.response_timeout", true)
	c.Origin.IdleTimeout = p.dur("origin.idle_timeout", true)
	c.Origin.MaxIdleConns = p.int("origin.max_idle_conns", 1, 1<<20)
	c.Origin.PreserveHost = p.bool("origin.preserve_host")
	c.Origin.CAFile = p.str("origin.ca_file")
	if c.Origin.CAFile != "" {
		// Read here, not first when the origin clients are built: edge
		// config check and a reload then name the key (a review found a
		// missing file refused only by the reload, as "sites[0].origins").
		if pem, err := os.ReadFile(c.Origin.CAFile); err != nil {
			p.fail("origin.ca_file", c.Origin.CAFile, "cannot be read: "+err.Error())
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			p.fail("origin.ca_file", c.Origin.CAFile, "holds no PEM certificate")
		}
	}
	c.Origin.ServerName = p.str("origin.server_name")
	c.TLS.Listen = p.str("tls.listen")
	if c.TLS.Listen != "" {
		c.TLS.Listen = p.addr("tls.listen")
	}
	c.TLS.CertFile = p.str("tls.cert_file")
	c.TLS.KeyFile = p.str("tls.key_file")
	c.TLS.Certificates = p.certs("tls.certificates")
	c.TLS.HTTP3 = p.bool("tls.http3")
	c.TLS.HSTS = p.str("tls.hsts")
	c.TLS.ACMEDomains = p.list("tls.acme.domains")
	c.TLS.ACMEEmail = p.str("tls.acme.email")
	c.TLS.ACMECA = p.str("tls.acme.ca")
	c.TLS.ACMECARoot = p.str("tls.acme.ca_root")
	c.TLS.ACMEStorage = p.str("tls.acme.storage")
	c.TLS.ACMERenewCheck = p.dur("tls.acme.renew_check_interval", true)
	c.TLS.RedirectToHTTPS = p.bool("http.redirect_to_https")
	c.Cache.KeyScheme = p.bool("cache.key_scheme")
	c.Cache.MaxBytes = p.size("cache.max_bytes", 1<<20)
	c.Cache.DiskPath = p.str("cache.disk.path")
	c.Cache.DiskMaxBytes = p.size("cache.disk.max_bytes", 1<<20)
	c.Cache.DiskPromoteHits = p.int("cache.disk.promote_hits", 1, 1000)
	c.Cache.MaxObjectBytes = p.size("cache.max_object_bytes", 1)
	c.Cache.SliceBytes = p.size("cache.slice_bytes", 0)
	c.Cache.MaxVariants = p.int("cache.max_variants", 1, 1024)
	c.Cache.HeuristicFraction = p.float("cache.heuristic_fraction", 0, 1)
	c.Cache.HeuristicMax = p.dur("cache.heuristic_max", false)
	c.Cache.StaleIfError = p.dur("cache.stale_if_error", false)
	c.Cache.StaleCeiling = p.dur("cache.stale_ceiling", false)
	c.Cache.StoreSetCookie = p.bool("cache.store_set_cookie")
	c.Cache.CoalesceTimeout = p.dur("cache.coalesce_timeout", true)
	c.Cache.SortQuery = p.bool("cache.sort_query")
	c.Cache.PassTTL = p.dur("cache.pass_ttl", true)
	c.Cache.ClientNoCache = parseEnum(&p, "cache.client_no_cache", rules.ParseClientNoCache)
	c.Cache.RevalidateInterval = p.dur("cache.revalidate_interval", true)
	c.Compression.Enabled = p.bool("compression.enabled")
	c.Compression.Encodings = p.codings("compression.encodings")
	c.Compression.Types = p.mediaTypes("compression.types")
	c.Compression.MinBytes = p.size("compression.min_bytes", 0)
	c.Compression.Levels = coding.Levels{
		Br:   p.int("compression.brotli_level", 0, 11),
		Zstd: p.int("compression.zstd_level", 1, 22),
		Gzip: p.int("compression.gzip_level", 1, 9),
	}
	c.Compression.StreamLevels = coding.Levels{
		Br:   p.int("compression.stream_brotli_level", 0, 11),
		Zstd: p.int("compression.stream_zstd_level", 1, 22),
		Gzip: p.int("compression.stream_gzip_level", 1, 9),
	}
	c.Compression.MaxDecodedBytes = p.size("compression.max_decoded_bytes", 1<<10)
	c.Limits.MaxHeaderBytes = p.size("limits.max_header_bytes", 1024)
	c.Limits.MaxURLBytes = p.int("limits.max_url_bytes", 64, 1<<20)
	c.Limits.MaxBodyBytes = p.size("limits.max_body_bytes", 0)
	c.Limits.MaxInflight = p.int("limits.max_inflight", 1, 1<<24)
	c.Limits.MaxInflightPerClient = p.int("limits.max_inflight_per_client", 0, 1<<24)
	c.Limits.SiteReserve = p.float("limits.site_reserve", 0, 1)
	c.Limits.MaxConnections = p.int("limits.max_connections", 0, 1<<30)
	c.Limits.MaxConnectionsPerClient = p.int("limits.max_connections_per_client", 0, 1<<30)
	c.Limits.RateLimit = RateLimit{Rate: p.float("limits.rate", 0, 1e9), Burst: p.int("limits.rate_burst", 1, 1<<30), Key: p.str("limits.rate_key")}
	if r := c.Limits.RateLimit.Rate; r > 0 && r < minRate {
		p.fail("limits.rate", r, "is below 0.001 requests per second (0 turns the limit off)")
	}
	if err := c.Limits.RateLimit.validKey(); err != "" {
		p.fail("limits.rate_key", c.Limits.RateLimit.Key, err)
	}
	c.Limits.ReadHeaderTimeout = p.dur("limits.read_header_timeout", true)
	c.Limits.IdleTimeout = p.dur("limits.idle_timeout", true)
	c.Limits.RequestBuffering = p.bool("limits.request_buffering")
	c.Limits.BodyTimeout = p.dur("limits.body_timeout", true)
	c.Limits.MinBodyRate = p.size("limits.min_body_rate", 1)
	c.Limits.WriteTimeout = p.dur("limits.write_timeout", true)
	c.Limits.MaxBufferedBytes = p.size("limits.max_buffered_bytes", 1<<20)
	c.Limits.SpoolBytes = p.size("limits.spool_bytes", 0)
	if n := c.Limits.SpoolBytes; n > 0 && n < minSpoolBytes {
		p.fail("limits.spool_bytes", n, "must be 0 (off) or at least 2MiB: one response may take a quarter, which must hold its 256 KiB window")
	}
	c.Limits.SpoolDir = p.str("limits.spool_dir")
	c.Limits.MaxRanges = p.int("limits.max_ranges", 1, 1000)
	c.Forwarding.TrustedProxies = p.prefixes("forwarding.trusted_proxies")
	c.Forwarding.StripHeaders = p.list("forwarding.strip_headers")
	c.Forwarding.UnkeyedHeaders = p.fieldNames("forwarding.unkeyed_headers")
	c.Tuning.WriteBatching = p.bool("tuning.write_batching")
	c.Tuning.HitPath = p.bool("tuning.hit_path")
	c.Tuning.HTTP2Server = p.oneOf("tuning.http2_server", "edge", "go")
	c.Cluster.Listen = p.addr("cluster.listen")
	c.Cluster.Peers = p.peers("cluster.peers")
	c.Cluster.DNS = p.str("cluster.dns")
	c.Cluster.DNSInterval = p.dur("cluster.dns_interval", true)
	c.Cluster.Advertise = p.str("cluster.advertise")
	if c.Cluster.Advertise != "" {
		c.Cluster.Advertise = p.addr("cluster.advertise")
		if host, _, err := net.SplitHostPort(c.Cluster.Advertise); err == nil && net.ParseIP(host) == nil {
			p.fail("cluster.advertise", c.Cluster.Advertise, "needs an IP address, not a name: members reach each other at the address advertised")
		}
	}
	c.Cluster.ProbeInterval = p.dur("cluster.membership_probe_interval", true)
	c.Cluster.SuspicionMult = p.int("cluster.membership_suspicion_mult", 1, 64)
	c.Cluster.ForgetDeparted = p.dur("cluster.forget_departed_after", true)
	if d := c.Cluster.ForgetDeparted; d > 0 && d < time.Minute {
		p.fail("cluster.forget_departed_after", d.String(), "must be at least 1m: a peer is forgotten only well after membership agreed it left, and its late heartbeats are older than the replay window by then")
	}
	c.Cluster.StateDir = p.str("cluster.state_dir")
	if sd, dp := c.Cluster.StateDir, c.Cache.DiskPath; sd != "" && dp != "" && within(sd, dp) {
		p.fail("cluster.state_dir", sd, "must not be cache.disk.path or inside it: the disk tier removes files it did not write")
	}
	if sd := c.Cluster.StateDir; sd != "" {
		if fi, err := os.Stat(sd); err == nil && !fi.IsDir() {
			p.fail("cluster.state_dir", sd, "is a file, not a directory")
		}
	}
	c.Cluster.Secret = p.str("cluster.secret")
	errsBefore := len(p.errs)
	c.Cluster.HeartbeatPeriod = p.dur("cluster.heartbeat_period", true)
	if hp := c.Cluster.HeartbeatPeriod; hp > 0 && (hp < minHeartbeatPeriod || hp > maxHeartbeatPeriod) {
		p.fail("cluster.heartbeat_period", hp.String(), fmt.Sprintf("must be between %v and %v: below, every peer costs a busy loop of packets; above, a dead peer is noticed minutes late", minHeartbeatPeriod, maxHeartbeatPeriod))
	}
	c.Cluster.Detector = p.oneOf("cluster.detector", fdetect.Names...)
	c.Cluster.DetectorParams = p.list("cluster.detector_params")
	c.Cluster.ShadowDetectors = p.list("cluster.shadow_detectors")
	c.Cluster.LossBudget = p.float("cluster.loss_budget", 0, 0.5)
	c.Cluster.LossEstimator = p.oneOf("cluster.loss_estimator", fdetect.LossEstimatorNames...)
	// Every detector key parsed well: build the detectors only then, so
	// that a bad period, name, list or loss key is reported once, not
	// again against detector_params and each shadow.
	if len(p.errs) == errsBefore && c.Cluster.HeartbeatPeriod > 0 && slices.Contains(fdetect.Names, c.Cluster.Detector) {
		// Built here as the node builds it, so that a bad parameter stops
		// `edge config check` and startup with the key's name, not only
		// `edge serve` with a wrapped error.
		if params, err := c.DetectorParams(); err != nil {
			p.fail("cluster.detector_params", strings.Join(c.Cluster.DetectorParams, ","), err.Error())
		} else if _, err := fdetect.New(c.Cluster.Detector, int64(c.Cluster.HeartbeatPeriod), params); err != nil {
			p.fail("cluster.detector_params", strings.Join(c.Cluster.DetectorParams, ","), err.Error())
		}
		for i, spec := range c.Cluster.ShadowDetectors {
			if slices.Contains(c.Cluster.ShadowDetectors[:i], spec) {
				p.fail("cluster.shadow_detectors", spec, "is listed twice")
			} else if _, err := cluster.ParseShadowDetector(spec, c.Cluster.HeartbeatPeriod, c.DetectorLossDefaults()); err != nil {
				p.fail("cluster.shadow_detectors", spec, err.Error())
			}
		}
	}
	c.Cluster.PeerTimeout = p.dur("cluster.peer_timeout", true)
	c.Cluster.PeerWholeBytes = p.size("cluster.peer_whole_bytes", 0)
	c.Cluster.Selection = parseEnum(&p, "cluster.selection", cluster.ParseSelection)
	c.Cluster.ProbeFirstHop = p.bool("cluster.probe_first_hop")
	// With probe_first_hop the first hop is a candidate like any peer:
	// there is no first hop left out to ask beside the probes.
	c.Cluster.FirstHopWithProbes = p.bool("cluster.first_hop_with_probes") && !c.Cluster.ProbeFirstHop
	c.Cluster.StaleWhileClimbing = p.bool("cluster.stale_while_climbing")
	c.Cluster.ProbesBeside = p.oneOf("cluster.negative_probes", "before_climb", "beside_climb") == "beside_climb"
	c.Cluster.SharedSilence = p.bool("cluster.shared_silence_hold")
	c.Cluster.NetworkLoss = p.bool("cluster.network_loss_margin")
	c.Cluster.ConfirmProbe = p.bool("cluster.confirm_probe")
	c.Cluster.NetworkOnset = p.bool("cluster.network_loss_onset")
	c.Cluster.SilenceLossless = p.oneOf("cluster.shared_silence_evidence", "on_time", "lossless") == "lossless"
	c.Cluster.Monitoring = parseEnum(&p, "cluster.monitoring", cluster.ParseMonitoring)
	c.Cluster.MonitorPeers = p.int("cluster.monitor_peers", 2, 64)
	if c.Cluster.MonitorPeers%2 != 0 {
		p.fail("cluster.monitor_peers", c.Cluster.MonitorPeers, "is odd: each random ring gives a node two neighbours, so k must be even")
	}
	c.Cluster.Region = p.region("cluster.region")
	c.Cluster.RegionCosts = p.regionCosts("cluster.region_costs")
	c.Cluster.TLS.CertFile = p.str("cluster.tls.cert_file")
	c.Cluster.TLS.KeyFile = p.str("cluster.tls.key_file")
	c.Cluster.TLS.CAFile = p.str("cluster.tls.ca_file")
	c.Routing.Mode = parseEnum(&p, "routing.mode", routing.ParseMode)
	c.Routing.Placement = parseEnum(&p, "routing.placement", routing.ParsePlacement)
	c.Routing.Home = parseEnum(&p, "routing.home", routing.ParseHome)
	if c.Routing.Home == routing.HomeRegion && c.Cluster.Region == "" {
		p.fail("routing.home", c.Routing.Home, "needs cluster.region: a node must know its region to have homes in it")
	}
	if c.Routing.Home == routing.HomeRegion && c.Routing.Placement != routing.PlacementDistinct {
		p.fail("routing.home", c.Routing.Home, "needs routing.placement distinct: the next home in a region comes from the page's rendezvous ranking")
	}
	c.Routing.D = p.int("routing.d", 2, 64)
	c.Routing.Q = p.int("routing.q", 1, 1000)
	c.Routing.HotThreshold = p.int("routing.hot_threshold", 1, 1<<30)
	c.Indicators.Capacity = p.int("indicators.capacity", 1, 1<<28)
	c.Indicators.BPE = p.float("indicators.bpe", 1, 64)
	if bits, _ := (indicators.FilterConfig{Capacity: c.Indicators.Capacity, BitsPerElement: c.Indicators.BPE}).Params(); bits > indicators.MaxBits {
		p.fail("indicators.capacity", c.Indicators.Capacity, fmt.Sprintf("with indicators.bpe %v makes a filter of %d bits; peers accept at most %d (lower either)", c.Indicators.BPE, bits, indicators.MaxBits))
	}
	c.Indicators.UpdateInterval = p.int("indicators.update_interval", 1, 1<<30)
	c.Indicators.AdvertiseMax = p.dur("indicators.advertise_max", true)
	c.Indicators.FNREstimator = parseEnum(&p, "indicators.fnr_estimator", indicators.ParseFNREstimator)
	c.ShutdownTimeout = p.dur("shutdown_timeout", true)
	c.Log.Level = p.oneOf("log.level", "debug", "info", "warn", "error")
	c.Log.Format = p.oneOf("log.format", "text", "json")
	c.Log.Access = p.str("log.access")
	if c.Log.Access == "" {
		c.Log.Access = "off"
	}
	c.Log.AccessFormat = p.oneOf("log.access_format", "json", "combined")
	p.siteRate = c.Limits.RateLimit
	c.Sites = p.sites("sites")
	if p.err != nil {
		// Every key read on its own is reported at once, the file's
		// unknown and misshapen keys among them; what follows compares
		// keys, which a key already wrong would only muddle.
		return nil, joinErrors(p.errs)
	}
	if err := p.crossChecks(c); err != nil {
		return nil, err
	}
	return c, nil
}

// crossChecks reports every rule between keys that c breaks, all of them
// (an operator's walk-through fixed one error to meet the next), and
// completes c's derived values.
func (p *parser) crossChecks(c *Config) error {
	v := p.v
	if len(c.Sites) == 0 {
		if c.Origin.URL == "" {
			p.failWith(&Error{Key: "origin.url", Reason: "is required (flag --origin, env EDGE_ORIGIN_URL) unless sites is set"})
		} else if why, shown := originURL(c.Origin.URL); why != "" {
			p.failWith(&Error{Key: "origin.url", Value: shown, Reason: why})
		}
		rs, err := rules.Parse("rules", yamlText(v.Get("rules")))
		if err != nil {
			for _, e := range ruleErrors(err) {
				p.failWith(e)
			}
		}
		c.Sites = []Site{{Name: "default", Hosts: []string{"*"}, Origins: []string{c.Origin.URL}, Balance: origin.DefaultPoolConfig().Balance, Default: true, PreserveHost: c.Origin.PreserveHost,
			Rules: rs, RateLimit: c.Limits.RateLimit}}
	} else if c.Origin.URL != "" {
		p.failWith(&Error{Key: "origin.url", Value: c.Origin.URL, Reason: "and sites exclude each other: remove origin.url and give each site its origins (sites[i].origins)", Source: p.source("origin.url")})
	} else if rs := v.Get("rules"); rs != nil && rs != "" {
		if l, ok := rs.([]any); !ok || len(l) > 0 {
			p.failWith(&Error{Key: "rules", Reason: "is the one-site shortcut's; with sites, give each site its rules (sites[i].rules)"})
		}
	}
	if c.Cluster.PeerWholeBytes > 16<<20 {
		p.failWith(&Error{Key: "cluster.peer_whole_bytes", Value: c.Cluster.PeerWholeBytes, Reason: "is more than 16MiB: every concurrent peer miss may hold this much in memory"})
	}
	if c.Cache.SliceBytes != 0 && (c.Cache.SliceBytes < 64<<10 || c.Cache.SliceBytes > 64<<20) {
		p.failWith(&Error{Key: "cache.slice_bytes", Value: c.Cache.SliceBytes, Reason: "must be 0 (off) or between 64KiB and 64MiB"})
	}
	if c.Cache.SliceBytes != 0 && c.Cache.DiskPath == "" && c.Cache.SliceBytes > c.Cache.MaxBytes/4 {
		p.failWith(&Error{Key: "cache.slice_bytes", Value: c.Cache.SliceBytes, Reason: "is more than a quarter of cache.max_bytes (and there is no disk tier to hold slices)"})
	}
	if c.Cache.DiskPath == "" && c.Cache.MaxObjectBytes > c.Cache.MaxBytes {
		p.failWith(&Error{Key: "cache.max_object_bytes", Value: c.Cache.MaxObjectBytes, Reason: "is larger than cache.max_bytes (and there is no cache.disk.path)"})
	}
	if c.Cache.DiskPath != "" && c.Cache.MaxObjectBytes > c.Cache.DiskMaxBytes {
		p.failWith(&Error{Key: "cache.max_object_bytes", Value: c.Cache.MaxObjectBytes, Reason: "is larger than cache.disk.max_bytes"})
	}
	if c.Listen == c.Admin.Listen {
		p.failWith(&Error{Key: "admin.listen", Value: c.Admin.Listen, Reason: "must differ from listen"})
	}
	if (c.Admin.TLS.CertFile == "") != (c.Admin.TLS.KeyFile == "") {
		p.failWith(&Error{Key: "admin.tls", Reason: "needs both cert_file and key_file, or neither"})
	}
	if cl := c.Cluster.Listen; cl != "" && (cl == c.Listen || cl == c.Admin.Listen) {
		p.failWith(&Error{Key: "cluster.listen", Value: cl, Reason: "must differ from listen and admin.listen"})
	}
	if (len(c.Cluster.Peers) > 0 || c.Cluster.DNS != "") && c.Cluster.Secret == "" {
		p.failWith(&Error{Key: "cluster.secret", Reason: "is required when cluster.peers or cluster.dns is set: peers authenticate each other with it"})
	}
	if c.Cluster.Secret != "" && len(c.Cluster.Secret) < MinSecretBytes {
		p.failWith(&Error{Key: "cluster.secret", Reason: fmt.Sprintf("is %s; at least %d are required so that it cannot be guessed", plural(len(c.Cluster.Secret), "byte"), MinSecretBytes)})
	}
	tlsSet := 0
	for _, f := range []string{c.Cluster.TLS.CertFile, c.Cluster.TLS.KeyFile, c.Cluster.TLS.CAFile} {
		if f != "" {
			tlsSet++
		}
	}
	if tlsSet != 0 && tlsSet != 3 {
		p.failWith(&Error{Key: "cluster.tls", Reason: "needs all of cert_file, key_file and ca_file, or none"})
	}
	if err := c.validateTLS(); err != nil {
		for _, e := range errorList(err) {
			p.failWith(e)
		}
	}
	if c.NodeID == "" {
		h, _ := os.Hostname()
		c.NodeID = h
	}
	if c.NodeID == "" {
		c.NodeID = "edge"
	}
	if strings.ContainsAny(c.NodeID, " ;,=:\"\t") || !wire.ValidID(c.NodeID) {
		p.failWith(&Error{Key: "node_id", Value: c.NodeID, Reason: fmt.Sprintf("must be at most %d bytes without spaces or any of ;,=:\"", wire.MaxIDLen)})
	}
	return joinErrors(p.errs)
}

// formatSize writes a byte count the way config.yaml does: 8MiB, 32KiB.
func formatSize(n int64) string {
	switch {
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// formatDuration writes a duration without zero units: 24h, 5m, 30s.
func formatDuration(d time.Duration) string {
	switch {
	case d != 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d != 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d != 0 && d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// MinSecretBytes is the shortest cluster.secret accepted.
const MinSecretBytes = 16

// parser reads typed values and keeps the first error.
type parser struct {
	v    *viper.Viper
	err  error
	errs []error // every error, p.err the first
	// fileErrs are the file's key errors (keepFileErrors): a key they
	// name is not reported again for its value.
	fileErrs []error
	// siteRate is limits.rate's value, each site's rate_limit unless it
	// sets its own.
	siteRate RateLimit
}

// The heartbeat period's bounds: 1 ms is 1,000 packets a second to each
// monitored peer; a minute makes detection take minutes.
const (
	minHeartbeatPeriod = time.Millisecond
	maxHeartbeatPeriod = time.Minute
)

// minRate is the slowest rate a limit may have: one request in about 17
// minutes; slower is a typo, and 1/rate must stay a sane Retry-After.
const minRate = 0.001

// minSpoolBytes is the smallest limits.spool_bytes that spills anything: a
// response takes at most a quarter, and its first spill writes its whole
// in-memory window (256 KiB) and the block being filled.
const minSpoolBytes = 2 << 20

// RateLimit is a per-client request rate: Rate requests per second on
// average (0: no limit) with bursts of Burst, per client address or per
// value of a header (Key "header:NAME").
type RateLimit struct {
	Rate  float64
	Burst int
	Key   string
}

// validKey returns why the key is not one ("" when it is).
func (r RateLimit) validKey() string {
	if r.Key == "address" {
		return ""
	}
	if name, ok := strings.CutPrefix(r.Key, "header:"); ok && name != "" && !strings.ContainsAny(name, " :\t") {
		return ""
	}
	return "is not address or header:NAME"
}

// rateLimit parses a site's rate_limit: {rate, burst, key}; what it
// leaves out is limits.rate's.
func (p *parser) rateLimit(at string, v any) (RateLimit, bool) {
	rl := p.siteRate
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(at, v, "is not {rate, burst, key}")
		return rl, false
	}
	for k, x := range m {
		switch k {
		case "rate":
			f, ok := toFloat(x)
			if !ok || math.IsNaN(f) || f < 0 || f > 1e9 || (f > 0 && f < minRate) {
				p.fail(at+".rate", x, "is not a number of requests per second: 0 (off), or from 0.001 to 1e9")
				return rl, false
			}
			rl.Rate = f
		case "burst":
			n, ok := x.(int)
			if !ok || n < 1 || n > 1<<30 {
				p.fail(at+".burst", x, "is not a whole number of requests of at least 1")
				return rl, false
			}
			rl.Burst = n
		case "key":
			rl.Key, _ = x.(string)
			if why := rl.validKey(); why != "" {
				p.fail(at+".key", x, why)
				return rl, false
			}
		default:
			p.fail(at+"."+k, nil, "is not rate, burst or key")
			return rl, false
		}
	}
	return rl, true
}

// toFloat reads a YAML number (an int or a float) as a float.
func toFloat(x any) (float64, bool) {
	switch n := x.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// yamlText decodes a list given as text (from the environment:
// EDGE_RULES='[{name: a, default_ttl: 5m}]') into the value the YAML file
// would have given; anything else is returned as it is.
func yamlText(raw any) any {
	s, ok := raw.(string)
	if !ok || strings.TrimSpace(s) == "" {
		return raw
	}
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return raw // the caller names the key and says what it expects
	}
	if _, isList := v.([]any); !isList {
		return raw
	}
	return v
}

// ruleErrors turns rules' errors into the config's, key and all.
func ruleErrors(err error) []error {
	var list rules.Errors
	if errors.As(err, &list) {
		out := make([]error, len(list))
		for i, re := range list {
			out[i] = &Error{Key: re.Key, Value: re.Value, Reason: re.Reason}
		}
		return out
	}
	var re *rules.Error
	if errors.As(err, &re) {
		return []error{&Error{Key: re.Key, Value: re.Value, Reason: re.Reason}}
	}
	return []error{err}
}

// fail records an error of key; parsing goes on, so that one run names
// every wrong key (Load returns them together, the first as p.err).
// within reports whether dir is root or inside it, both made absolute
// and their symbolic links resolved as far as they exist (a relative path
// beside an absolute one, a link into root, a name that begins with "..").
func within(dir, root string) bool {
	d, r := resolvePath(dir), resolvePath(root)
	rel, err := filepath.Rel(r, d)
	if err != nil {
		return true // no way from one to the other is known: not allowed
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolvePath is p made absolute, with the symbolic links of its longest
// existing prefix resolved.
func resolvePath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	for cur := abs; ; cur = filepath.Dir(cur) {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(cur) == cur {
			return abs
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

func (p *parser) fail(key string, val any, reason string) {
	if p.coveredByFile(key) {
		return
	}
	switch val.(type) {
	case float64, uint64: // the file's number as written (numbersAsWritten)
		if written, ok := p.v.Get(numbersKey).(map[string]string); ok && written[key] != "" {
			val = written[key]
		}
	}
	p.add(&Error{Key: key, Value: val, Reason: reason, Source: p.source(key)})
}

// add records err, the first as p.err. A secret key's value is never
// kept in it, whatever its shape (a list once was echoed).
func (p *parser) add(err error) {
	var e *Error
	if errors.As(err, &e) {
		if top, _, _ := strings.Cut(e.Key, "["); slices.Contains(SecretKeys, top) {
			e.Value = nil
		}
	}
	if p.err == nil {
		p.err = err
	}
	p.errs = append(p.errs, err)
}

// coveredByFile reports whether key's value came from the file and an
// error of the file's shape already names it: a flag's or a variable's
// bad value is reported whatever the file got wrong (a review found
// --cache-size bogus unsaid behind a key the file wrote twice).
func (p *parser) coveredByFile(key string) bool {
	if !shapeCovers(p.fileErrs, key) {
		return false
	}
	src := p.source(key)
	return !strings.HasPrefix(src, "flag ") && !strings.HasPrefix(src, "EDGE_")
}

// failWith records an error made elsewhere (a rule's), as fail does.
func (p *parser) failWith(err error) {
	var e *Error
	if errors.As(err, &e) {
		top, _, _ := strings.Cut(e.Key, "[")
		if p.coveredByFile(top) {
			return
		}
		if e.Source == "" {
			e.Source = p.source(top)
		}
	}
	p.add(err)
}

// flagsKey is where SetFlag notes which keys a flag gave, as
// "key=--flag" entries, so that an error names the flag and not the file
// the flag overrode. Not a configuration key: it is set after the file's
// keys are checked, and no key's name has a space.
const flagsKey = "flags given"

// SetFlag gives key the value of the command-line flag named flag (its
// name without dashes): the highest layer, above the file and the
// environment.
func SetFlag(v *viper.Viper, key, flag, value string) {
	v.Set(key, value)
	v.Set(flagsKey, append(v.GetStringSlice(flagsKey), key+"=--"+flag))
}

// source says where key's value came from: a flag, the environment, the
// file, or (none of them) the default.
func (p *parser) source(key string) string {
	top, _, _ := strings.Cut(key, "[")
	for _, f := range p.v.GetStringSlice(flagsKey) {
		if k, flag, _ := strings.Cut(f, "="); k == top {
			return "flag " + flag
		}
	}
	for _, k := range Keys() {
		if k.Name != top {
			continue
		}
		// The variable counts when it is what viper holds: a flag
		// overrides it, and viper ignores an empty one.
		if env := os.Getenv(k.Env()); env != "" {
			if s, ok := p.v.Get(top).(string); ok && s == env {
				return k.Env()
			}
		}
	}
	if p.v.InConfig(top) {
		if f := p.v.ConfigFileUsed(); f != "" {
			return f
		}
		return "the config file"
	}
	return ""
}

// joinErrors is nil, the one error, or all of them, one per line.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return &Errors{List: errs}
}

// Errors are several configuration errors, found in one pass.
type Errors struct{ List []error }

func (e *Errors) Error() string {
	shown := e.List[:min(len(e.List), maxErrorsShown)]
	lines := make([]string, len(shown), len(shown)+1)
	for i, err := range shown {
		lines[i] = err.Error()
	}
	if more := len(e.List) - len(shown); more > 0 {
		lines = append(lines, fmt.Sprintf("… and %d more", more))
	}
	return fmt.Sprintf("%d errors:\n  %s", len(e.List), strings.Join(lines, "\n  "))
}

// maxErrorsShown bounds the errors one message lists: a file of thousands
// of unknown keys once made a message of as many lines, in the log and in
// /reload's answer. The first ones are the ones to fix first anyway.
const maxErrorsShown = 20

// Unwrap gives errors.As the first error (and the others).
func (e *Errors) Unwrap() []error { return e.List }

func (p *parser) str(key string) string {
	switch x := p.v.Get(key).(type) {
	case string:
		return strings.TrimSpace(x)
	case nil:
		return ""
	case int, int64, float64, bool:
		return fmt.Sprint(x)
	default:
		p.fail(key, x, "is not a string")
		return ""
	}
}

func (p *parser) addr(key string) string {
	s := p.str(key)
	if _, port, err := net.SplitHostPort(s); err != nil {
		p.fail(key, s, "is not host:port")
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.fail(key, s, "has no valid port")
	}
	return s
}

func (p *parser) oneOf(key string, allowed ...string) string {
	s := strings.ToLower(p.str(key))
	if !slices.Contains(allowed, s) {
		p.fail(key, s, "must be one of "+strings.Join(allowed, ", "))
	}
	return s
}

func (p *parser) int(key string, lo, hi int) int {
	raw := p.v.Get(key)
	var n int64
	switch x := raw.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64: // YAML's reading of a whole number from 2^63 to 2^64-1
		p.fail(key, raw, fmt.Sprintf("is out of range [%d, %d]", lo, hi))
		return 0
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.IsNaN(x) {
			p.fail(key, raw, "is not a whole number")
			return 0
		}
		if math.Abs(x) > 1<<53 {
			p.fail(key, raw, fmt.Sprintf("is out of range [%d, %d]", lo, hi))
			return 0
		}
		n = int64(x)
	case string:
		v, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			p.fail(key, raw, "is not a whole number")
			return 0
		}
		n = v
	default:
		p.fail(key, raw, "is not a whole number")
		return 0
	}
	if n < int64(lo) || n > int64(hi) {
		p.fail(key, raw, fmt.Sprintf("is out of range [%d, %d]", lo, hi))
		return 0
	}
	return int(n)
}

func (p *parser) float(key string, lo, hi float64) float64 {
	raw := p.v.Get(key)
	f, ok := toFloat(raw)
	if !ok {
		s, isString := raw.(string)
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if !isString || err != nil {
			p.fail(key, raw, "is not a number")
			return 0
		}
		f = v
	}
	if math.IsNaN(f) || f < lo || f > hi {
		p.fail(key, raw, fmt.Sprintf("is out of range [%g, %g]", lo, hi))
		return 0
	}
	return f
}

func (p *parser) bool(key string) bool {
	raw := p.v.Get(key)
	switch x := raw.(type) {
	case bool:
		return x
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		if err != nil {
			p.fail(key, raw, "is not true or false")
		}
		return b
	}
	p.fail(key, raw, "is not true or false")
	return false
}

func (p *parser) dur(key string, positive bool) time.Duration {
	raw := p.v.Get(key)
	s, ok := raw.(string)
	if !ok {
		p.fail(key, raw, "is not a duration (write it with a unit, e.g. 5s, 250ms, 2m)")
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		p.fail(key, raw, "is not a duration (write it with a unit, e.g. 5s, 250ms, 2m)")
		return 0
	}
	if d < 0 || (positive && d == 0) {
		p.fail(key, raw, "must be positive")
		return 0
	}
	return d
}

func (p *parser) size(key string, min int64) int64 {
	raw := p.v.Get(key)
	var n int64
	var err error
	switch x := raw.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64: // YAML's reading of a whole number from 2^63 to 2^64-1
		p.fail(key, raw, "is too large (at most 4EiB)")
		return 0
	case float64:
		if x == math.Trunc(x) && x > 1<<62 {
			p.fail(key, raw, "is too large (at most 4EiB)")
			return 0
		}
		if x != math.Trunc(x) || x < 0 {
			err = errors.New("bad")
		}
		n = int64(x)
	case string:
		n, err = ParseSize(x)
	default:
		err = errors.New("bad")
	}
	if err != nil {
		p.fail(key, raw, "is not a size (e.g. 64MiB, 512KB, 1GiB or a byte count)")
		return 0
	}
	if n > 1<<62 {
		// What ParseSize refuses written out: sums of sizes (the memory
		// limit node.New sets) overflowed to a negative number, which Go
		// reads as no limit (a review's).
		p.fail(key, raw, "is too large (at most 4EiB)")
		return 0
	}
	if n < min {
		p.fail(key, raw, fmt.Sprintf("must be at least %d bytes", min))
		return 0
	}
	return n
}

// list parses a comma-separated list (a YAML list is accepted too).
// fieldNames is list for HTTP field names: each must be a token, and one
// with an underscore is refused (the edge drops those whatever the list
// says, as nginx does).
func (p *parser) fieldNames(key string) []string {
	names := p.list(key)
	for _, n := range names {
		for i := 0; i < len(n); i++ {
			c := n[i]
			if c == '_' {
				p.fail(key, n, "names a field with '_': the edge never forwards those (CGI origins read them as '-')")
				return nil
			}
			if !strings.ContainsRune("-!#$%&'*+.^`|~", rune(c)) && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
				p.fail(key, n, "is not an HTTP field name")
				return nil
			}
		}
	}
	return names
}

func (p *parser) list(key string) []string {
	raw := p.v.Get(key)
	var parts []string
	switch x := raw.(type) {
	case nil:
	case string:
		parts = strings.Split(x, ",")
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				p.fail(key, raw, "is not a list of strings")
				return nil
			}
			parts = append(parts, s)
		}
	default:
		p.fail(key, raw, "is not a comma-separated list")
		return nil
	}
	var out []string
	for _, s := range parts {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseEnum reads a typed value with the type's own parser, so the names
// a key accepts are defined once, next to the type.
func parseEnum[T any](p *parser, key string, parse func(string) (T, error)) T {
	before := len(p.errs)
	s := strings.ToLower(p.str(key))
	if len(p.errs) > before {
		var zero T // str said what is wrong (not a string): one error per key
		return zero
	}
	v, err := parse(s)
	if err != nil {
		p.fail(key, s, err.Error())
	}
	return v
}

// prefixes parses a list of CIDRs (a bare address is a single host).
func (p *parser) prefixes(key string) []netip.Prefix {
	var out []netip.Prefix
	for _, e := range p.list(key) {
		pfx, err := netip.ParsePrefix(e)
		if err != nil {
			addr, aerr := netip.ParseAddr(e)
			if aerr != nil {
				p.fail(key, e, "is not a CIDR (e.g. 10.0.0.0/8) or an IP address")
				return nil
			}
			pfx = netip.PrefixFrom(addr, addr.BitLen())
		}
		out = append(out, pfx.Masked())
	}
	return out
}

// Site is one site: the hosts it answers and its origin pool.
type Site struct {
	Name         string
	Hosts        []string // lower-case; exact names or *.suffix (one label); "*" for the one-site shortcut
	Origins      []string
	Balance      string // least or hash
	Default      bool   // answers hosts no site names
	PreserveHost bool
	// Rules are the site's cache rules, in order (nil: none).
	Rules *rules.Set
	// RateLimit is the per-client request rate (limits.rate unless the
	// site sets its own).
	RateLimit RateLimit
	Health    struct {
		Path         string
		Interval     time.Duration
		Timeout      time.Duration
		ExpectStatus int
	}
}

// DetectorLossDefaults are the detector parameters a node adds to its own
// detector and to every shadow, unless their entries set them: the
// loss-aware margin's budget and estimator. With cluster.loss_budget 0 it
// is the budget alone, so that an estimator set in an entry is ignored
// with the margin, as it is for cluster.loss_estimator, not an error.
func (c *Config) DetectorLossDefaults() fdetect.Params {
	if c.Cluster.LossBudget <= 0 {
		return fdetect.Params{fdetect.LossBudgetParam: 0}
	}
	estimator, _ := fdetect.LossEstimatorNamed(c.Cluster.LossEstimator) // Load checked the name
	return fdetect.Params{fdetect.LossBudgetParam: c.Cluster.LossBudget, fdetect.LossEstimatorParam: float64(estimator)}
}

// DetectorParams are the parameters a node builds cluster.detector with:
// cluster.detector_params, then DetectorLossDefaults for what they leave
// unset. `edge fd sweep` prints a line for detector_params that sets
// loss_budget, so that the node runs the detector the sweep replayed.
func (c *Config) DetectorParams() (fdetect.Params, error) {
	params, err := fdetect.ParseParams(c.Cluster.DetectorParams)
	if err != nil {
		return nil, err
	}
	params.AddDefaults(c.DetectorLossDefaults())
	return params, nil
}

// SiteFor returns the site that answers host (lower-case, without a
// port) as the node picks it: an exact name, then a one-label wildcard,
// then the shortcut or the default site; nil when none does (421).
func (c *Config) SiteFor(host string) *Site {
	var wild, def *Site
	for i := range c.Sites {
		s := &c.Sites[i]
		for _, h := range s.Hosts {
			switch {
			case h == host:
				return s
			case h == "*":
				def = s
			case strings.HasPrefix(h, "*.") && wild == nil:
				if _, parent, ok := strings.Cut(host, "."); ok && parent == h[2:] {
					wild = s
				}
			}
		}
		if s.Default && def == nil {
			def = s
		}
	}
	if wild != nil {
		return wild
	}
	return def
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// originURL checks an origin's URL and says what is wrong with it ("" if
// nothing), with the URL as an error may show it (a password redacted).
// Credentials in the URL are refused: the origin client never sends them
// (a URL's user info does not become an Authorization field), and the
// URL is shown on the status page, in metrics labels and in access logs,
// which need no token (a review's TestS29AdminOriginCredentialsAreNotPublished).
//
// Any '@' counts: a password with '#', '/' or '?' in it ends the URL's
// authority early (http://deploy:2024#Winter@host parses as host
// "deploy", port 2024), and one that does not parse at all was echoed
// whole in the refusal (a review's
// TestS30AdminOriginCredentialsThatParseAsAPortAreRefused and
// TestS30AdminOriginPasswordIsNotEchoedWhenTheURLDoesNotParse).
func originURL(s string) (reason, shown string) {
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		shown = "xxxxx@" + s[at+1:]
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			shown = s[:i+3] + shown
		}
		return "carries credentials (user:password@) or an '@', which the edge does not send to the origin and would show on the status page: " +
			"set credentials with a rule's request_headers (Authorization)", shown
	}
	if !httpURL(s) {
		return "is not an absolute http(s) URL", s
	}
	return "", s
}

// sites parses the sites list. Errors name the entry's key, e.g.
// sites[1].origins[0].
func (p *parser) sites(key string) []Site {
	raw := p.v.Get(key)
	var list []any
	switch x := raw.(type) {
	case nil:
		return nil
	case string:
		if strings.TrimSpace(x) == "" {
			return nil
		}
		// From the environment (EDGE_SITES): the same YAML list, in one
		// line: [{name: shop, hosts: [shop.test], origins: ["http://o:80"]}]
		if err := yaml.Unmarshal([]byte(x), &list); err != nil {
			p.fail(key, x, "is not a YAML list of sites ([{name: …, hosts: […], origins: […]}, …]): "+err.Error())
			return nil
		}
	case []any:
		list = x
	default:
		p.fail(key, raw, "is not a list of sites")
		return nil
	}
	var out []Site
	names, hosts := map[string]bool{}, map[string]string{}
	defaults := 0
	for i, e := range list {
		// Each site in a closure: an error ends that site, and the
		// next ones are still checked, so that one run names them all.
		func() {
			at := fmt.Sprintf("%s[%d]", key, i)
			m, ok := e.(map[string]any)
			if !ok {
				p.fail(at, e, "is not a site ({name, hosts, origins, …})")
				return
			}
			s := Site{Balance: origin.DefaultPoolConfig().Balance, RateLimit: p.siteRate}
			for k, v := range m {
				switch k {
				case "name":
					s.Name, _ = v.(string)
				case "hosts", "origins":
					l, ok := v.([]any)
					if !ok {
						p.fail(at+"."+k, v, "is not a list")
						return
					}
					for j, h := range l {
						hs, ok := h.(string)
						if !ok || strings.TrimSpace(hs) == "" {
							p.fail(fmt.Sprintf("%s.%s[%d]", at, k, j), h, "is not a non-empty string")
							return
						}
						if k == "hosts" {
							// In the form requests are matched in: lower case,
							// without the root's trailing dot ("b.test." was
							// accepted and never matched).
							s.Hosts = append(s.Hosts, strings.TrimSuffix(strings.ToLower(strings.TrimSpace(hs)), "."))
						} else {
							s.Origins = append(s.Origins, strings.TrimSpace(hs))
						}
					}
				case "balance":
					s.Balance, _ = v.(string)
					if s.Balance != "least" && s.Balance != "hash" {
						p.fail(at+".balance", v, "is not least or hash")
						return
					}
				case "default", "preserve_host":
					b, ok := v.(bool)
					if !ok {
						p.fail(at+"."+k, v, "is not true or false")
						return
					}
					if k == "default" {
						s.Default = b
					} else {
						s.PreserveHost = b
					}
				case "health":
					hm, ok := v.(map[string]any)
					if !ok {
						p.fail(at+".health", v, "is not {path, interval, timeout, expect_status}")
						return
					}
					if !p.health(at+".health", hm, &s) {
						return
					}
				case "rules":
					rs, err := rules.Parse(at+".rules", v)
					if err != nil {
						for _, e := range ruleErrors(err) {
							p.failWith(e)
						}
						return
					}
					s.Rules = rs
				case "rate_limit":
					rl, ok := p.rateLimit(at+".rate_limit", v)
					if !ok {
						return
					}
					s.RateLimit = rl
				default:
					p.fail(at+"."+k, nil, "is not a known key of a site (name, hosts, origins, balance, default, preserve_host, health, rules, rate_limit)")
					return
				}
			}
			switch {
			case s.Name == "" || strings.ContainsAny(s.Name, " ;,=:\"\t/") || strings.ContainsFunc(s.Name, unicode.IsControl) || len(s.Name) > 64:
				p.fail(at+".name", s.Name, "must be a non-empty name of at most 64 bytes without spaces, control characters or ;,=:\"/")
				return
			case names[s.Name]:
				p.fail(at+".name", s.Name, "names two sites")
				return
			case len(s.Hosts) == 0 && !s.Default:
				p.fail(at+".hosts", nil, "is required (or default: true)")
				return
			case len(s.Origins) == 0:
				p.fail(at+".origins", nil, "is required: at least one origin URL")
				return
			}
			names[s.Name] = true
			for j, h := range s.Hosts {
				hk := fmt.Sprintf("%s.hosts[%d]", at, j)
				name := strings.TrimPrefix(h, "*.")
				if !hostName(name) || strings.Count(h, "*") > 1 {
					p.fail(hk, h, "is not a host name or a *.suffix wildcard (no port, no path)")
					return
				}
				if other, dup := hosts[h]; dup {
					p.fail(hk, h, "is also a host of site "+other)
					return
				}
				hosts[h] = s.Name
			}
			for j, o := range s.Origins {
				if why, shown := originURL(o); why != "" {
					p.fail(fmt.Sprintf("%s.origins[%d]", at, j), shown, why)
					return
				}
			}
			if s.Default {
				defaults++
				if defaults > 1 {
					p.fail(at+".default", true, "is set on two sites")
					return
				}
			}
			out = append(out, s)
		}()
	}
	return out
}

// health parses a site's active check.
func (p *parser) health(at string, m map[string]any, s *Site) bool {
	s.Health.Interval, s.Health.Timeout = 5*time.Second, 2*time.Second // a few seconds to notice, well under the interval to answer
	for k, v := range m {
		switch k {
		case "path":
			path, ok := v.(string)
			if !ok || !strings.HasPrefix(path, "/") {
				p.fail(at+".path", v, "is not a path starting with /")
				return false
			}
			s.Health.Path = path
		case "interval", "timeout":
			str := fmt.Sprint(v)
			d, err := time.ParseDuration(str)
			if err != nil || d <= 0 {
				p.fail(at+"."+k, v, "is not a positive duration (e.g. 2s)")
				return false
			}
			if k == "interval" {
				s.Health.Interval = d
			} else {
				s.Health.Timeout = d
			}
		case "expect_status":
			n, ok := v.(int)
			if !ok || n < 100 || n > 599 {
				p.fail(at+".expect_status", v, "is not an HTTP status code")
				return false
			}
			s.Health.ExpectStatus = n
		default:
			p.fail(at+"."+k, nil, "is not a known key of health (path, interval, timeout, expect_status)")
			return false
		}
	}
	if s.Health.Path == "" {
		p.fail(at+".path", nil, "is required for an active check")
		return false
	}
	return true
}

// Settings returns every key's value as v holds it (file, environment,
// flags), for comparing two loads of the configuration.
func Settings(v *viper.Viper) map[string]string {
	out := make(map[string]string, len(Keys()))
	for _, k := range Keys() {
		val := v.Get(k.Name)
		if k.Name == "rules" || k.Name == "sites" {
			val = withoutRequestValues(val)
		}
		out[k.Name] = fmt.Sprint(val)
	}
	return out
}

// withoutRequestValues is a rules or sites setting with the values its
// rules set on requests (request_headers.set) replaced: they may be
// secrets, and settings make the config hash shown without the token
// (Hash). Rules and sites reload live, so nothing compares them
// otherwise. A list given as YAML text (from the environment) is read
// first; text that does not parse is left as it is (Load refuses it).
func withoutRequestValues(x any) any {
	if text, ok := x.(string); ok {
		var parsed any
		if err := yaml.Unmarshal([]byte(text), &parsed); err != nil {
			return x
		}
		x = parsed
	}
	return hideRequestValues(x)
}

func hideRequestValues(x any) any {
	switch t := x.(type) {
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = hideRequestValues(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = hideRequestValues(e)
			if strings.EqualFold(k, "request_headers") {
				if edits, ok := e.(map[string]any); ok {
					out[k] = hideSetValues(edits)
				}
			}
		}
		return out
	}
	return x
}

// hideSetValues replaces the values of a header edit's set map.
func hideSetValues(edits map[string]any) map[string]any {
	out := make(map[string]any, len(edits))
	for k, e := range edits {
		out[k] = e
		if set, ok := e.(map[string]any); ok && strings.EqualFold(k, "set") {
			hidden := make(map[string]any, len(set))
			for name := range set {
				hidden[name] = "(value not hashed)"
			}
			out[k] = hidden
		}
	}
	return out
}

// Hash is a short digest of settings, shown on the status page and in
// edge_config_info so that nodes running different configurations stand out.
//
// Secrets (SecretKeys) are left out: the hash is shown without the admin
// token (status page, status.json, edge_config_info), and an unsalted hash
// over every other setting, most of them defaults or shown beside it, let
// a weak token be found offline (a review's test). Nor are the values rules
// set on requests (Settings leaves them out): a rule's request_headers.set
// often holds an origin-verify secret, and anyone who knew the rest of
// the file tested guesses of it against the hash shown (a review's
// TestS30AdminConfigHashIsNoOracleForRuleSecrets). Keyed by a secret
// instead, the hash was an oracle for that secret, and nodes without one
// could not compare (TestS31ConfigHashIsAnOracleForTheClusterSecret,
// TestS31StandaloneNodesHashEqualAcrossProcesses). So a change of such a
// value alone does not change the hash.
func Hash(settings map[string]string) string {
	names := make([]string, 0, len(settings))
	for k := range settings {
		if slices.Contains(SecretKeys, k) {
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, k := range names {
		fmt.Fprintf(h, "%s=%s\n", k, settings[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// SecretKeys are the settings that hold secrets: never in the config
// hash, and never shown.
var SecretKeys = []string{"admin.token", "cluster.secret"}

// LiveKeys are the keys a reload applies to a running node; a change to
// any other key needs a restart, and a reload that changes one is refused
// with the keys named.
var LiveKeys = []string{
	"sites", "origin.url", "origin.preserve_host", "origin.ca_file", "origin.server_name",
	"origin.connect_timeout", "origin.response_timeout", "origin.idle_timeout", "origin.max_idle_conns",
	"cache.heuristic_fraction", "cache.heuristic_max", "cache.stale_if_error", "cache.stale_ceiling", "cache.store_set_cookie",
	"cache.client_no_cache", "cache.revalidate_interval", "rules", "limits.rate", "limits.rate_burst", "limits.rate_key",
	"limits.max_inflight", "limits.max_inflight_per_client", "limits.site_reserve", "limits.max_connections", "limits.max_connections_per_client",
	"log.level",
}

// FrozenChanges lists the keys whose values differ between two settings
// and that a reload cannot apply.
func FrozenChanges(old, cur map[string]string) []string {
	var out []string
	for _, k := range Keys() {
		if old[k.Name] != cur[k.Name] && !slices.Contains(LiveKeys, k.Name) {
			out = append(out, k.Name)
		}
	}
	return out
}

// CertPair is one certificate chain and its key.
type CertPair struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// certs parses tls.certificates: a YAML list of {cert_file, key_file}, or
// CERT:KEY,CERT:KEY.
func (p *parser) certs(key string) []CertPair {
	raw := p.v.Get(key)
	var out []CertPair
	switch x := raw.(type) {
	case nil:
	case string:
		for _, e := range strings.Split(x, ",") {
			if e = strings.TrimSpace(e); e == "" {
				continue
			}
			cert, k, ok := strings.Cut(e, ":")
			if !ok || cert == "" || k == "" {
				p.fail(key, e, "is not CERT_FILE:KEY_FILE")
				return nil
			}
			out = append(out, CertPair{cert, k})
		}
	case []any:
		for _, e := range x {
			m, ok := e.(map[string]any)
			if !ok {
				p.fail(key, e, "is not a {cert_file, key_file} entry")
				return nil
			}
			var pair CertPair
			for k, v := range m {
				s, ok := v.(string)
				switch {
				case !ok:
					p.fail(key+"."+k, v, "is not a string")
					return nil
				case k == "cert_file":
					pair.CertFile = s
				case k == "key_file":
					pair.KeyFile = s
				default:
					p.fail(key+"."+k, nil, "is not a known key (cert_file, key_file)")
					return nil
				}
			}
			if pair.CertFile == "" || pair.KeyFile == "" {
				p.fail(key, e, "needs both cert_file and key_file")
				return nil
			}
			out = append(out, pair)
		}
	default:
		p.fail(key, raw, "is not a list of {cert_file, key_file}")
	}
	return out
}

// validateTLS checks the TLS keys together. Certificate files are checked
// when the node loads them (tlsconf), which names the key too.
func (c *Config) validateTLS() error {
	t := &c.TLS
	var errs []error
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, &Error{Key: "tls.cert_file", Reason: "and tls.key_file go together"})
	}
	hasCerts := t.CertFile != "" || len(t.Certificates) > 0 || len(t.ACMEDomains) > 0
	if t.Listen != "" && !hasCerts {
		errs = append(errs, &Error{Key: "tls.listen", Value: t.Listen, Reason: "needs a certificate: tls.cert_file and tls.key_file, tls.certificates or tls.acme.domains"})
	}
	if t.Listen == "" && (hasCerts || t.HTTP3) {
		errs = append(errs, &Error{Key: "tls.listen", Reason: "is required when certificates, ACME or tls.http3 are configured"})
	}
	if t.RedirectToHTTPS && t.Listen == "" {
		errs = append(errs, &Error{Key: "http.redirect_to_https", Reason: "needs tls.listen"})
	}
	if t.Listen != "" && (t.Listen == c.Listen || t.Listen == c.Admin.Listen) {
		errs = append(errs, &Error{Key: "tls.listen", Value: t.Listen, Reason: "must differ from listen and admin.listen"})
	}
	if len(t.ACMEDomains) > 0 {
		if u, err := url.Parse(t.ACMECA); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, &Error{Key: "tls.acme.ca", Value: t.ACMECA, Reason: "is not an https directory URL"})
		}
		for _, d := range t.ACMEDomains {
			if strings.ContainsAny(d, "/: *") || !strings.Contains(d, ".") && d != "localhost" {
				errs = append(errs, &Error{Key: "tls.acme.domains", Value: d, Reason: "is not a host name ACME can validate"})
			}
		}
	}
	if !httpguts.ValidHeaderFieldValue(t.HSTS) {
		errs = append(errs, &Error{Key: "tls.hsts", Value: t.HSTS, Reason: "is not a valid header field value (one line, no control characters)"})
	}
	return joinErrors(errs)
}

// codings parses a list of produced content codings.
func (p *parser) codings(key string) coding.Set {
	list := p.list(key)
	set, bad := coding.ParseSet(list)
	if bad != "" {
		p.fail(key, bad, "is not a coding the edge produces (br, zstd, gzip)")
	}
	return set
}

// mediaTypes parses a list of media types to compress.
func (p *parser) mediaTypes(key string) coding.Types {
	t, bad := coding.NewTypes(p.list(key))
	if bad != "" {
		p.fail(key, bad, "is not a media type (type/subtype, type/* or +suffix)")
	}
	return t
}

// peers parses ID=HOST:PORT entries.
func (p *parser) peers(key string) map[string]string {
	out := map[string]string{}
	for _, e := range p.list(key) {
		id, addr, ok := strings.Cut(e, "=")
		if !ok || id == "" || strings.ContainsAny(id, ":;\" ") {
			p.fail(key, e, "is not ID=HOST:PORT")
			return nil
		}
		if !wire.ValidID(id) {
			p.fail(key, e, fmt.Sprintf("has an id longer than %d bytes (node_id's limit: heartbeats name it)", wire.MaxIDLen))
			return nil
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			p.fail(key, e, "has no HOST:PORT after the =")
			return nil
		}
		if _, dup := out[id]; dup {
			p.fail(key, e, "names a peer twice")
			return nil
		}
		out[id] = addr
	}
	return out
}

func (p *parser) region(key string) string {
	r := p.str(key)
	if r != "" && !cluster.ValidRegion(r) {
		p.fail(key, r, "is not a region label (lower-case letters, digits, . _ -, up to 32, starting with a letter or digit)")
		return ""
	}
	return r
}

// regionCosts parses A/B=DURATION entries into costs keyed by
// cluster.RegionPair.
func (p *parser) regionCosts(key string) map[[2]string]time.Duration {
	out := map[[2]string]time.Duration{}
	for _, e := range p.list(key) {
		pair, dur, ok := strings.Cut(e, "=")
		a, b, ok2 := strings.Cut(pair, "/")
		if !ok || !ok2 || !cluster.ValidRegion(a) || !cluster.ValidRegion(b) {
			p.fail(key, e, "is not REGION/REGION=DURATION (e.g. eu/us=20ms)")
			return nil
		}
		d, err := time.ParseDuration(dur)
		if err != nil || d <= 0 {
			p.fail(key, e, "has no positive duration after the = (e.g. 20ms)")
			return nil
		}
		k := cluster.RegionPair(a, b)
		if _, dup := out[k]; dup {
			p.fail(key, e, "prices a region pair twice")
			return nil
		}
		out[k] = d
	}
	return out
}

// ParseSize parses a byte size with an optional unit: B, KB/KiB, MB/MiB,
// GB/GiB, TB/TiB (KB = 1000, KiB = 1024; case-insensitive).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1024, "kb": 1000, "kib": 1024,
		"m": 1 << 20, "mb": 1e6, "mib": 1 << 20,
		"g": 1 << 30, "gb": 1e9, "gib": 1 << 30,
		"t": 1 << 40, "tb": 1e12, "tib": 1 << 40,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	v := f * mult
	if v > 1<<62 || v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes below 4 EiB", s)
	}
	return int64(v), nil
}

// serviceLinkRE matches the variables Kubernetes injects for a Service
// (EDGE_ORIGIN_PORT, EDGE_CLUSTER_SERVICE_HOST, …), which are nobody's typo.
var serviceLinkRE = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// Warnings returns what is valid in c but most likely a mistake, each
// naming its key: a cache rule no request reaches (rules.Set.Warnings).
// config check and serve print them; none stops a start.
func Warnings(c *Config) []string {
	var out []string
	if n := len(c.Admin.Token); n > 0 && n < MinSecretBytes {
		// Not refused (existing configurations keep starting), but said at
		// every start and check: the admin listener bounds wrong tokens per
		// address (node/adminguard.go), which a short token still does not
		// survive for long.
		out = append(out, fmt.Sprintf("admin.token is %s; use at least %d (as cluster.secret must) so that it cannot be guessed", plural(n, "byte"), MinSecretBytes))
	}
	for _, s := range c.Sites {
		out = append(out, s.Rules.Warnings()...)
	}
	return out
}

// UnusedKeys warns of settings given (in the file, the environment or a
// flag) that this configuration does not use: the cluster's keys on a node
// without peers. An operator's walk-through set cluster.state_dir on a
// lone node and got no state directory and no word why.
func UnusedKeys(v *viper.Viper, c *Config) []string {
	if len(c.Cluster.Peers) > 0 || c.Cluster.DNS != "" {
		return nil
	}
	p := parser{v: v}
	var given []string
	for _, k := range Keys() {
		// The keys that make a cluster are not unused when empty; a key at
		// its default (the shipped config.yaml writes every key so) says
		// nothing.
		if !strings.HasPrefix(k.Name, "cluster.") || k.Name == "cluster.peers" || k.Name == "cluster.dns" || asWritten(v.Get(k.Name)) == k.Default {
			continue
		}
		if src := p.source(k.Name); src != "" {
			given = append(given, k.Name+" (from "+src+")")
		}
	}
	if len(given) == 0 {
		return nil
	}
	return []string{strings.Join(given, ", ") + ": set, but this node has no peers (cluster.peers or cluster.dns), so it runs alone and does not use them"}
}

// plural is "1 byte", "2 bytes".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

// asWritten is a value as Key.Default writes it: a list joined by commas.
func asWritten(val any) string {
	if list, ok := val.([]any); ok {
		parts := make([]string, len(list))
		for i, e := range list {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(val)
}

// UnknownEnv returns a warning for each EDGE_* environment variable that
// is not a configuration variable but is within a few edits of one: a
// misspelt setting that would otherwise be ignored without a word. (Other
// EDGE_* names are left alone: tools and tests have their own.)
func UnknownEnv() []string {
	known := make([]string, 0, len(Keys()))
	isKnown := map[string]bool{}
	for _, k := range Keys() {
		known = append(known, k.Env())
		isKnown[k.Env()] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "EDGE_") || isKnown[name] || serviceLinkRE.MatchString(name) {
			continue
		}
		if near := didyoumean.Nearest(name, known); near != "" {
			out = append(out, fmt.Sprintf("%s is not a configuration variable and is ignored (did you mean %s?)", name, near))
		}
	}
	slices.Sort(out)
	return out
}

// hostName reports whether s is a host name as requests name sites: ASCII
// letters (lower case), digits, '-', '_' and '~' in dot-separated labels,
// none empty. A name of other bytes (non-ASCII: its punycode is what
// arrives) would be accepted and never match.
func hostName(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '~', c == '.':
		default:
			return false
		}
	}
	return true
}
