package node

import (
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgecache/edge/cluster"
	"github.com/edgecache/edge/h2server"
	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/internal/ranking"
	"github.com/edgecache/edge/proxy"
)

// Status is what the status page shows, also served as JSON.
type Status struct {
	Node          string       `json:"node"`
	Version       string       `json:"version"`
	Origin        string       `json:"origin,omitempty"` // the one-site shortcut's origin.url
	Sites         []SiteStatus `json:"sites"`
	ConfigHash    string       `json:"config_hash,omitempty"`
	UptimeSeconds float64      `json:"uptime_seconds"`
	StoreBytes    int64        `json:"store_bytes"`
	StoreBudget   int64        `json:"store_budget_bytes"`
	StoreObjects  int64        `json:"store_objects"`
	Evictions     uint64       `json:"store_evictions"`
	BufferedBytes int64        `json:"buffered_bytes"`
	BufferBudget  int64        `json:"buffer_budget_bytes"`
	// Spill files of slow readers of what cannot be stored (proxy/spool.go).
	SpoolBytes  int64   `json:"spool_bytes"`
	SpoolBudget int64   `json:"spool_budget_bytes"`
	SpoolFiles  int64   `json:"spool_files"`
	SpoolOpened float64 `json:"spool_files_opened"`
	SpoolFull   float64 `json:"spool_full"`
	// RequestBodies: request bodies by how they went upstream (memory and
	// disk: read whole before a slot was taken; streamed).
	RequestBodies    map[string]float64 `json:"request_bodies"`
	RequestBuffering bool               `json:"request_buffering"` // limits.request_buffering
	Requests         map[string]float64 `json:"requests_by_result"`
	RequestRates     map[string]float64 `json:"requests_per_second_by_result"` // over the last minute
	Disk             *DiskStatus        `json:"disk,omitempty"`
	Coding           proxy.CodingStats  `json:"compression"`
	Fields           map[string]float64 `json:"request_fields"` // client fields not forwarded as sent, by action
	BadHosts         float64            `json:"bad_host_requests"`
	// AdminAuthFailures: admin requests whose token was wrong, and those
	// refused unread because their address had used its wrong tokens
	// (edge_admin_auth_failures_total).
	AdminAuthFailures map[string]float64    `json:"admin_auth_failures"`
	Connections       ConnectionStatus      `json:"client_connections"`
	PeerConnections   *PeerConnectionStatus `json:"peer_connections,omitempty"` // the cluster listener's; nil without a cluster
	AdminConnections  AdminConnectionStatus `json:"admin_connections"`
	Coalesced         float64               `json:"coalesced_requests"`
	Refreshes         map[string]float64    `json:"background_refreshes"`
	EarlyHints        map[string]float64    `json:"early_hints"`              // the origin's 103s: relayed, dropped (proxy/earlyhints.go)
	BrowserTTL        map[string]float64    `json:"browser_ttl_answers"`      // client answers a rule's browser_ttl named: rewritten, kept (proxy/browserttl.go)
	KeptApart         float64               `json:"climbs_kept_apart"`        // peers' climbs that fetched apart (proxy/waitorder.go)
	PurgeHeld         uint64                `json:"purge_held_peer_copies"`   // peers' pages served, not kept, while a purge went round (cluster/purgehold.go)
	OwedKept          string                `json:"owed_purges_file"`         // cluster.state_dir's file of purges owed to peers ("": memory only)
	OwedSaveErrors    uint64                `json:"owed_purges_save_errors"`  // failed writes of it
	OwedPulled        *cluster.PullSummary  `json:"owed_purges_pulled"`       // the start's asking peers for what they owe this node
	HitPath           *hitpath.Stats        `json:"hit_path,omitempty"`       // nil with tuning.hit_path off
	PeerHitPath       *hitpath.Stats        `json:"peer_hit_path,omitempty"`  // the cluster listener's; nil without it
	WriteBatching     *WriteBatchingStatus  `json:"write_batching,omitempty"` // nil with tuning.write_batching off
	TLS               *TLSStatus            `json:"tls,omitempty"`
	// AdminTLS is the admin listener's certificate (admin.tls; nil: plain HTTP).
	AdminTLS      *CertInfo                   `json:"admin_tls,omitempty"`
	HitRatio      float64                     `json:"hit_ratio"`
	Peers         []cluster.PeerState         `json:"peers,omitempty"`
	LocalDelayMs  float64                     `json:"fd_local_delay_ms,omitempty"` // our own recent scheduling delay, added to every freshness point
	Detector      string                      `json:"fd_detector,omitempty"`       // cluster.detector and its loss-aware margin
	SharedSilence *cluster.SharedSilenceState `json:"fd_shared_silence,omitempty"` // suspicions held while no peer's heartbeat came on time
	NetworkLoss   *cluster.NetworkLossState   `json:"fd_network_loss,omitempty"`   // loss most links show at once, and the suspicions it deferred
	Confirm       *cluster.ConfirmState       `json:"fd_confirm,omitempty"`        // confirmation probes before a suspicion
	ProbeRaces    *cluster.ProbeRaceState     `json:"probe_races,omitempty"`       // negative probes that raced the climb, by winner
	Monitoring    *cluster.MonitoringState    `json:"monitoring,omitempty"`
	PeerResumes   map[string]int64            `json:"peer_body_resumes,omitempty"`  // peer answers resumed from the origin, by outcome
	PeerWhole     map[string]int64            `json:"peer_answers_whole,omitempty"` // peer answers read whole before the header, by outcome
	HotKeys       []proxy.HotKey              `json:"hottest_pages,omitempty"`
	HotHidden     bool                        `json:"hottest_pages_hidden,omitempty"` // the list needs the admin token
	Route         *cluster.Explanation        `json:"route,omitempty"`
	RouteError    string                      `json:"route_error,omitempty"`
	RouteURL      string                      `json:"-"`
}

// WriteBatchingStatus is what tuning.write_batching did: write system
// calls issued, and response writes merged into one writev, on client
// connections and on the cluster listener (peer answers).
type WriteBatchingStatus struct {
	ClientWrites int64 `json:"client_write_syscalls"`
	ClientMerged int64 `json:"client_writes_merged"`
	PeerWrites   int64 `json:"peer_write_syscalls"`
	PeerMerged   int64 `json:"peer_writes_merged"`
}

// TLSStatus is the HTTPS side of the status page.
type TLSStatus struct {
	Listen       string     `json:"listen"`
	HTTP3        bool       `json:"http3"`
	ACME         []string   `json:"acme_domains,omitempty"`
	Redirect     bool       `json:"redirect_to_https"`
	HSTS         string     `json:"hsts,omitempty"`
	Certificates []CertInfo `json:"certificates"`
	// HTTP2 is edge's own HTTP/2 server's state (nil: tuning.http2_server go).
	HTTP2 *h2server.Stats `json:"http2,omitempty"`
}

// Snapshot collects the node's status.
func (n *Node) Snapshot() Status {
	st := n.proxy.Store().Stats()
	s := Status{
		Node: n.cfg.NodeID, Version: Version, Origin: n.cfg.Origin.URL,
		UptimeSeconds: time.Since(n.started).Seconds(),
		StoreBytes:    st.Bytes, StoreBudget: n.proxy.Store().Budget(), StoreObjects: st.Objects, Evictions: st.Evictions,
		Requests: map[string]float64{},
	}
	ps := n.proxy.Stats()
	for k, v := range ps.Requests {
		s.Requests[k] = float64(v)
	}
	s.RequestRates = map[string]float64{}
	for k, v := range n.rates.rates() {
		if name, ok := strings.CutPrefix(k, "result "); ok {
			s.RequestRates[name] = v
		}
	}
	s.BufferedBytes, s.BufferBudget = ps.BufferedBytes, n.cfg.Limits.MaxBufferedBytes
	s.SpoolBytes, s.SpoolBudget, s.SpoolFiles, s.SpoolOpened, s.SpoolFull = ps.SpoolBytes, ps.SpoolBudget, ps.SpoolFiles, ps.SpoolOpened, ps.SpoolFull
	s.Coalesced, s.KeptApart = ps.Coalesced, ps.FillsKeptApart
	s.Refreshes, s.EarlyHints, s.BrowserTTL = ps.Refreshes, ps.EarlyHints, ps.BrowserTTL
	s.RequestBodies, s.RequestBuffering = ps.RequestBodies, n.cfg.Limits.RequestBuffering
	s.Coding = n.proxy.CodingStats()
	s.Fields = n.proxy.FieldStats()
	s.BadHosts = counterOf(n.siteM.badHosts)
	s.AdminAuthFailures = map[string]float64{
		"wrong":     counterOf(n.guesses.failures.WithLabelValues("wrong")),
		"throttled": counterOf(n.guesses.failures.WithLabelValues("throttled")),
	}
	connMax, connPer := n.conns.bounds()
	s.Connections = ConnectionStatus{Open: n.conns.Open(), Max: connMax, PerClient: connPer,
		RefusedMax: counterOf(n.conns.refused.WithLabelValues(refusedMax)), RefusedPerClient: counterOf(n.conns.refused.WithLabelValues(refusedPerClient)),
		RefusedQUICInitials: counterOf(n.conns.refusedInitials.WithLabelValues(refusedMax)) + counterOf(n.conns.refusedInitials.WithLabelValues(refusedPerClient))}
	s.AdminConnections = AdminConnectionStatus{Open: n.admConns.Open(), Max: n.admConns.max, PerAddress: n.admConns.perClient,
		RefusedMax: counterOf(n.admConns.refused.WithLabelValues(refusedMax)), RefusedPerAddress: counterOf(n.admConns.refused.WithLabelValues(refusedPerClient)),
		Evicted: counterOf(n.admConns.evicted.WithLabelValues(refusedMax)) + counterOf(n.admConns.evicted.WithLabelValues(refusedPerClient))}
	if pc := n.peerConns; pc != nil {
		_, per := pc.bounds()
		s.PeerConnections = &PeerConnectionStatus{Open: pc.Open(), PerAddress: per, Refused: counterOf(pc.refused.WithLabelValues(refusedPerClient))}
	}
	if n.hits != nil {
		hs := n.hitM.Stats()
		s.HitPath = &hs
	}
	if n.peerHits != nil {
		ps := n.peerHitM.Stats()
		s.PeerHitPath = &ps
	}
	if n.cfg.Tuning.WriteBatching {
		s.WriteBatching = &WriteBatchingStatus{ClientWrites: n.batch.sends.Load(), ClientMerged: n.batch.merged.Load(),
			PeerWrites: n.peerBatch.sends.Load(), PeerMerged: n.peerBatch.merged.Load()}
	}
	if t := n.proxy.Store().Disk(); t != nil {
		s.Disk = &DiskStatus{Stats: t.Stats(), Path: n.cfg.Cache.DiskPath, Promoted: n.proxy.Store().Promoted()}
	}
	s.Sites = n.siteStatus()
	s.ConfigHash = n.ConfigHash()
	if n.admCerts != nil {
		if in := n.admCerts.set.Load().infos; len(in) > 0 {
			s.AdminTLS = &in[0]
		}
	}
	if n.tls != nil {
		s.TLS = &TLSStatus{Listen: n.tls.ln.Addr().String(), HTTP3: n.tls.h3 != nil, ACME: n.cfg.TLS.ACMEDomains,
			Redirect: n.cfg.TLS.RedirectToHTTPS, HSTS: n.cfg.TLS.HSTS, Certificates: n.tls.certificates()}
		if n.tls.h2 != nil {
			st := n.tls.h2.Stats()
			s.TLS.HTTP2 = &st
		}
	}
	var total, hits float64
	for k, v := range s.Requests {
		if k == "rejected" {
			continue
		}
		total += v
		if servedFromCache(k) {
			hits += v
		}
	}
	if total > 0 {
		s.HitRatio = hits / total
	}
	if n.cluster != nil {
		s.Peers = n.cluster.Peers()
		s.LocalDelayMs = n.cluster.LocalDelay().Seconds() * 1000
		s.Detector = n.cluster.DetectorSummary()
		ss := n.cluster.SharedSilence()
		s.SharedSilence = &ss
		nl := n.cluster.NetworkLoss()
		s.NetworkLoss = &nl
		cf := n.cluster.Confirm()
		s.Confirm = &cf
		s.PurgeHeld = n.cluster.PurgeHeldCopies()
		s.OwedKept, s.OwedSaveErrors = n.cluster.OwedState()
		s.OwedPulled = n.cluster.Pulled()
		pr := n.cluster.ProbeRaces()
		s.ProbeRaces = &pr
		m := n.cluster.Monitoring()
		m.Membership = n.cluster.MembershipDetail()
		s.PeerResumes = n.cluster.Resumes()
		s.PeerWhole = n.cluster.WholeAnswers()
		s.Monitoring = &m
	}
	s.HotKeys = n.proxy.HotKeys(15)
	return s
}

func (n *Node) statusJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(n.guardHot(n.Snapshot(), n.authorized(r, true)))
}

// routeNeedsToken: the route explorer tells how often a URL was asked
// here and whether a peer holds it, which names what users visited (a
// review asked it whether /account/reset?token=… had been opened): like
// the hottest URLs, it needs the admin token.
const routeNeedsToken = "the route explorer needs the admin token (open the page with ?login=1, or send it as a bearer token)"

// guardHot hides from a request without the admin token the hottest URLs
// (they can name users' private pages) and the membership keys'
// fingerprints: a fingerprint is a fast hash of a key derived from
// cluster.secret alone, so showing it gave anyone an offline test of
// guesses of the secret (a review's
// TestS29AdminKeyFingerprintIsNoOracleForTheClusterSecret). With the
// token (the page's ?login=1) operators still compare them across nodes.
// authed is n.authorized of the request, asked once per request: each
// wrong token asked is charged to its address (adminguard.go), and the
// status page asked twice (a review's
// TestS30AdminStatusRouteChargesOneRequestOnce).
func (n *Node) guardHot(s Status, authed bool) Status {
	if !authed {
		s.HotKeys, s.HotHidden = nil, true
		if s.Monitoring != nil {
			for i := range s.Monitoring.Membership.Keys {
				s.Monitoring.Membership.Keys[i].Fingerprint = keyHidden
			}
		}
	}
	return s
}

// keyHidden stands for a key's fingerprint on a page asked without the token.
const keyHidden = "(hidden without the admin token)"

// humanBytes writes a byte count for people: 1.5 MiB, 312 KiB, 87 B.
func humanBytes(v any) string {
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	case int:
		f = float64(x)
	case float64:
		f = x
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(f, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}

// humanCount writes a count for people: 1,234,567.
func humanCount(v any) string {
	var n uint64
	switch x := v.(type) {
	case int64:
		n = uint64(max(x, 0))
	case uint64:
		n = x
	case int:
		n = uint64(max(x, 0))
	case float64:
		n = uint64(max(x, 0))
	}
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"bytes": humanBytes,
	"count": humanCount,
	"pct":   func(f float64) float64 { return 100 * f },
	"share": func(part, whole uint64) float64 { return 100 * float64(part) / float64(max(whole, 1)) },
	"ratio": func(out, in float64) string {
		if in <= 0 {
			return "—"
		}
		return strconv.FormatFloat(out/in, 'f', 3, 64)
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>edge {{.Node}}</title>{{if .Refresh}}
<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}th{background:#f4f4f4}
.bar{background:#e8e8e8;width:20em;height:1em}.fill{background:#3a7;height:1em}
.ok{color:#1a7f37}.bad{color:#b42318}.hist{font-size:11px;color:#666}.note{font-size:12px;color:#555}</style></head>
<body><h1>edge node <code>{{.Node}}</code></h1>
<p>version {{.Version}}{{if .ConfigHash}} · config <code>{{.ConfigHash}}</code>{{end}}{{if .Origin}} · origin <code>{{.Origin}}</code>{{end}} · up {{.Uptime}}{{if .Refresh}} · this page refreshes every {{.Refresh}} s (<a href="?refresh=0">stop</a>){{end}}</p>
<h2>Sites</h2>
<table><tr><th>site</th><th>requests</th><th>per second (last minute)</th><th>answered from the cache</th><th>rate limit</th><th>upstream now (part kept)</th></tr>
{{range .Sites}}<tr><td>{{.Name}}</td><td>{{count .Requests}}</td><td>{{printf "%.1f" .RequestsRate}}</td><td>{{printf "%.1f" (pct .HitRatio)}} %</td><td>{{if .RateLimit}}{{.RateLimit}} · {{count .RateLimited}} refused{{else}}—{{end}}</td><td>{{.Upstream}}{{if .UpstreamReserved}} ({{.UpstreamReserved}}){{end}}</td></tr>{{end}}</table>
<h2>Origins</h2>
<table><tr><th>site</th><th>origin</th><th>state</th><th>in flight</th><th>failures in a row</th></tr>
{{range .Sites}}{{$site := .Name}}{{range .Origins}}<tr><td>{{$site}}</td><td><code>{{.URL}}</code></td><td>{{if .Up}}<span class="ok">up</span>{{else}}<b class="bad">ejected</b> until {{.EjectedTill.Format "15:04:05"}}{{end}}</td><td>{{.Outstanding}}</td><td>{{.Failures}}</td></tr>{{end}}{{end}}</table>
{{range .Sites}}{{if or .Rules .RateLimit}}<h3>Site {{.Name}}: cache rules{{if .RateLimit}} · rate limit {{.RateLimit}} ({{.RateLimited}} refused){{end}}</h3>
{{if .Rules}}<table><tr><th>rule</th><th>does</th><th>hit</th><th>miss</th><th>pass</th><th>other</th><th>upstream requests</th></tr>
{{range .Rules}}<tr><td><code>{{.Name}}</code></td><td class="note">{{range .Does}}{{.}}<br>{{end}}</td><td>{{index .Requests "hit"}}</td><td>{{index .Requests "miss"}}</td><td>{{index .Requests "pass"}}</td><td>{{index .Requests "other"}}</td><td>{{index .Requests "upstream"}}</td></tr>{{end}}</table>{{end}}{{end}}{{end}}
<h2>Store (RAM tier)</h2>
<table><tr><th>held</th><td>{{bytes .StoreBytes}} of {{bytes .StoreBudget}}</td></tr>
<tr><th>objects</th><td>{{count .StoreObjects}}</td></tr><tr><th>evictions</th><td>{{count .Evictions}}</td></tr>
<tr><th>buffered (fills, evicted responses still being sent)</th><td>{{bytes .BufferedBytes}} of {{bytes .BufferBudget}}</td></tr>
<tr><th>spilled to disk (slow readers of what cannot be stored)</th><td>{{if .SpoolBudget}}{{bytes .SpoolBytes}} of {{bytes .SpoolBudget}} in {{.SpoolFiles}} files; {{printf "%.0f" .SpoolOpened}} spilled (responses and request bodies), {{printf "%.0f" .SpoolFull}} filled their share{{else}}off (limits.spool_bytes: 0){{end}}</td></tr>
<tr><th>request bodies (read whole before a slot: a slow upload holds none)</th><td>{{printf "%.0f" (index .RequestBodies "memory")}} in memory, {{printf "%.0f" (index .RequestBodies "disk")}} on disk; {{printf "%.0f" (index .RequestBodies "streamed")}} streamed ({{if .RequestBuffering}}no room to read them whole{{else}}limits.request_buffering: false{{end}})</td></tr></table>
{{with .Disk}}<h2>Disk tier</h2>
<table><tr><th>path</th><td><code>{{.Path}}</code> · {{if .Up}}<span class="ok">up</span>{{else}}<b class="bad">down</b>: serving from RAM only until a probe write succeeds{{end}}</td></tr>
<tr><th>held</th><td>{{bytes .Bytes}} of {{bytes .Budget}} ({{bytes .QueueBytes}} queued for writing)</td></tr>
<tr><th>objects</th><td>{{count .Objects}}</td></tr>
<tr><th>hits / misses (of RAM misses)</th><td>{{.Hits}} / {{.Misses}} · promoted to RAM {{.Promoted}}</td></tr>
<tr><th>writes / dropped / evictions</th><td>{{.Writes}} / {{.Dropped}} / {{.Evictions}}</td></tr>
<tr><th>errors</th><td>read {{.ReadErrors}} · write {{.WriteErrors}} · corrupt records discarded {{.Corrupt}}{{if .LastError}} · last: <code>{{.LastError}}</code> at {{.LastErrorAt.Format "15:04:05"}}{{end}}</td></tr>
<tr><th>last startup</th><td>{{.RecoveryObjects}} objects ({{bytes .RecoveryBytes}}) indexed in {{printf "%.3f" .RecoverySeconds}} s {{if .RecoveryFromSnapshot}}from the clean shutdown's index snapshot{{else}}by scanning the files{{end}}; {{.RecoveryDiscarded}} partial or corrupt files, {{.RecoveryTempFiles}} interrupted writes and {{.RecoveryRekeyed}} files of another cache-key version removed</td></tr></table>{{end}}
<h2>Client connections</h2><p>{{with .Connections}}{{count .Open}} open of {{count .Max}} (limits.max_connections){{if .PerClient}}, at most {{count .PerClient}} per address{{end}} · closed at once over the bound: {{count .RefusedMax}} (all), {{count .RefusedPerClient}} (per address) · QUIC first packets refused before a handshake: {{count .RefusedQUICInitials}}{{end}}</p>
<h2>Requests</h2><p>hit ratio {{printf "%.1f" (pct .HitRatio)}} %</p>
<div class="bar"><div class="fill" style="width:{{printf "%.1f" (pct .HitRatio)}}%"></div></div>
<table><tr><th>result</th><th>requests</th><th>per second (last minute)</th></tr>{{range .Rows}}<tr><td>{{.Name}}</td><td>{{count .Value}}</td><td>{{printf "%.1f" .Rate}}</td></tr>{{end}}</table>
{{with .HitPath}}<h2>HTTP/1.1 hit path</h2>
<p>fresh hits answered without net/http: {{.Answered}} · open plain connections {{.Connections}} · left to net/http for good {{.Kept}}</p>
<table><tr><th>requests given to net/http, by reason</th><th>requests</th></tr>{{range $k, $v := .Passed}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}</table>{{end}}
{{with .PeerConnections}}<h2>Cluster listener connections</h2><p>{{count .Open}} open, at most {{count .PerAddress}} from one address (half the descriptors kept back from clients) · closed at once over it: {{count .Refused}}</p>{{end}}
{{with .AdminConnections}}<h2>Admin listener connections</h2><p>{{count .Open}} open (this page's included), at most {{count .Max}} in all and {{count .PerAddress}} from one address · idle or unfinished ones closed to make room: {{count .Evicted}} · new ones closed at once, every one in a request: {{count .RefusedMax}} (in all), {{count .RefusedPerAddress}} (one address)</p>{{end}}
{{with .PeerHitPath}}<h2>Cluster listener read loop</h2>
<p>peers' requests answered with a fresh hit without net/http: {{.Answered}} · open peer connections {{.Connections}} · left to net/http for good {{.Kept}}</p>
<table><tr><th>peer requests given to net/http (misses, climbs on, refusals), by reason</th><th>requests</th></tr>{{range $k, $v := .Passed}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}</table>{{end}}
{{with .WriteBatching}}<h2>Write batching</h2>
<p>client connections: {{.ClientWrites}} write system calls, {{.ClientMerged}} response writes merged into one · cluster listener (peer answers): {{.PeerWrites}} write system calls, {{.PeerMerged}} merged</p>{{end}}
{{with .AdminTLS}}<p>Admin listener over HTTPS (admin.tls): <code>{{.Source}}</code> for {{range .Names}}{{.}} {{end}}, expires {{.NotAfter.Format "2006-01-02 15:04 MST"}}</p>{{end}}
{{with .TLS}}<h2>HTTPS</h2>
<p>listener <code>{{.Listen}}</code> · HTTP/1.1 and HTTP/2{{if .HTTP3}} · HTTP/3 (QUIC, advertised with Alt-Svc){{end}}{{if .Redirect}} · plain HTTP redirected{{end}}{{if .HSTS}} · HSTS <code>{{.HSTS}}</code>{{end}}{{if .ACME}} · ACME for {{range .ACME}}<code>{{.}}</code> {{end}}{{end}}</p>
{{with .HTTP2}}<p>HTTP/2 (edge's server): open connections {{.Connections}} · hits answered on the read loop {{count .Hits}} · through the request pipeline {{count .Handled}} · client protocol errors {{count .StreamErrors}} on streams, {{count .ConnErrors}} ending connections</p>{{end}}
<table><tr><th>certificate</th><th>names</th><th>expires</th></tr>{{range .Certificates}}<tr><td>{{.Source}}</td><td>{{range .Names}}{{.}} {{end}}</td><td>{{.NotAfter.Format "2006-01-02 15:04 MST"}}</td></tr>{{else}}<tr><td colspan="3">none yet (ACME pending)</td></tr>{{end}}</table>{{end}}
<h2>Compression</h2>
{{with .Coding}}{{if .Enabled}}<table><tr><th>coding</th><th>responses</th><th>encoded in</th><th>encoded out</th><th>ratio</th><th>encode time</th></tr>
{{range $name, $n := .Responses}}<tr><td>{{$name}}</td><td>{{printf "%.0f" $n}}</td>{{with index $.Coding.EncodedIn $name}}<td>{{bytes .}}</td><td>{{bytes (index $.Coding.EncodedOut $name)}}</td><td>{{ratio (index $.Coding.EncodedOut $name) .}}</td><td>{{printf "%.3f" (index $.Coding.EncodeSecs $name)}} s</td>{{else}}<td colspan="4">sent as stored</td>{{end}}</tr>{{else}}<tr><td colspan="6">no compressible responses yet</td></tr>{{end}}</table>
<p class="note">Encoded live (misses, and hits while their stored form is made in the background, at the stream levels): {{range $name, $in := .StreamIn}}{{$name}} {{bytes $in}} in, {{printf "%.3f" (index $.Coding.StreamSecs $name)}} s; {{end}}hits sent in identity while forming (every live encoder busy): {{printf "%.0f" .IdentityNow}}; forms deferred (every form worker busy): {{printf "%.0f" .Deferred}}.</p>
<p class="note">Forms are made once per stored response, in the background, and kept with it. Decoded for clients that do not accept the origin's coding: {{bytes .DecodedOut}}. Decompression bombs refused: {{printf "%.0f" .Bombs}}; corrupt bodies: {{printf "%.0f" .CodingError}}. Over the buffer budget (coder memory is charged before it is spent): encodes sent as identity {{printf "%.0f" (index .OverBudget "encode")}}, decodes refused (503) {{printf "%.0f" (index .OverBudget "decode")}}. Forms no smaller than identity, not kept: {{printf "%.0f" .LargerForms}}.</p>
{{else}}<p class="note">off (compression.enabled: false): bodies pass as the origin sent them.</p>{{end}}{{end}}
<h2>What reaches the origin</h2>
<p>Client request fields not forwarded as sent: dropped (underscore names, method overrides, URL rewrites) {{printf "%.0f" (index .Fields "dropped")}} · forwarding fields replaced by the edge's own {{printf "%.0f" (index .Fields "replaced")}} · unknown fields forwarded and keyed {{printf "%.0f" (index .Fields "keyed")}}. Requests whose Host is not a host (400; net/http's own 400s for a Host it cannot read are not counted): {{printf "%.0f" .BadHosts}}. Admin requests with a wrong token {{printf "%.0f" (index .AdminAuthFailures "wrong")}}, refused unread after too many from one address {{printf "%.0f" (index .AdminAuthFailures "throttled")}}.</p>
<p>Requests answered by another request's fetch (coalesced): {{printf "%.0f" .Coalesced}} · stale-while-revalidate background refreshes {{printf "%.0f" (index .Refreshes "ok")}} stored, {{printf "%.0f" (index .Refreshes "uncacheable")}} not storable, {{printf "%.0f" (index .Refreshes "error")}} failed, {{if index .Refreshes "refused"}}<b class="bad">{{printf "%.0f" (index .Refreshes "refused")}}</b>{{else}}0{{end}} put off for want of an upstream slot · the origin's 103 (Early Hints) answers relayed to their client {{printf "%.0f" (index .EarlyHints "relayed")}}, dropped {{printf "%.0f" (index .EarlyHints "dropped")}} · client answers a rule's browser_ttl named {{printf "%.0f" (index .BrowserTTL "rewritten")}} with its max-age, {{printf "%.0f" (index .BrowserTTL "kept")}} kept as the origin made them (personal answers).</p>
{{if .Peers}}<h2>Cluster</h2>
{{with .Monitoring}}<p>Monitoring: <b>{{.Mode}}</b>, heartbeats to {{.Monitored}} of {{.Members}} members{{if eq .Mode "subset"}} (its neighbours and the peers it routes to); the others are trusted while members (peers marked ◦){{end}}.</p>
{{with .Membership}}<p>Membership (memberlist, on the cluster port): {{if .Running}}<b>{{.Alive}}</b> members alive or suspect, health score {{.Health}} (0 is healthy), {{.Refutes}} refutations of a suspicion after a silence{{else}}not running yet{{end}}; keys:{{range .Keys}} {{.Fingerprint}}{{if .Primary}} (primary){{end}}{{end}}.</p>
{{if .Members}}<details><summary>Members as memberlist sees them (alive or suspect)</summary><table><tr><th>member</th><th>address</th><th>region</th></tr>{{range .Members}}<tr><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{.Region}}</td></tr>{{end}}</table></details>{{end}}{{end}}{{end}}
<p>Peers' climbs that fetched for themselves rather than wait on a fill here that may be waiting on them (the wait order): {{printf "%.0f" .KeptApart}} · pages a peer gave that were served but not kept because a purge was going round the cluster: {{.PurgeHeld}} · purges owed to peers kept {{if .OwedKept}}in {{.OwedKept}}{{if .OwedSaveErrors}} (<b class="bad">{{.OwedSaveErrors}} writes failed</b>){{end}}{{else}}in memory only (cluster.state_dir unset: a restart loses them){{end}}{{with .OwedPulled}} · at start, before serving, asked {{.Asked}} peers for purges owed to this node: {{.Purges}} delivered ({{index .Outcomes "delivered"}} peers owed some, {{index .Outcomes "nothing"}} none, {{index .Outcomes "unreachable"}} unreachable{{if index .Outcomes "failed"}}, <b class="bad">{{index .Outcomes "failed"}} failed</b>{{end}}) in {{printf "%.0f" .TookMs}} ms{{end}}</p>
{{with .PeerWhole}}<p>Peer answers read whole before their header: in time {{index . "whole"}} · larger, streamed {{index . "streamed"}} · failed before a byte was sent (the climb went on) {{index . "failed"}} · stalled or crawling on a lossy link, raced against the origin: peer first {{index . "race_peer"}}, origin first {{index . "race_origin"}}</p>{{end}}
{{with .PeerResumes}}<p>Peer answers resumed from the origin (Range, If-Range): after a break {{index . "ok"}} · stalls taken over {{index . "raced"}} · stalls that recovered first {{index . "stall_recovered"}} · crawls on a lossy link taken over {{index . "crawl_raced"}} · failed {{index . "failed"}}</p>{{end}}
<table><tr><th>peer</th><th>state</th><th>last heartbeat</th><th>RTT</th><th>suspicions and history</th></tr>
{{range .Peers}}<tr><td>{{.ID}}{{if .Region}} ({{.Region}}){{end}}{{if not .Monitored}} ◦{{end}}</td><td>{{if not .Member}}<b class="bad">not a member</b>{{else if .Trusted}}<span class="ok">trusted</span>{{else}}<b class="bad">suspected</b>{{end}}{{if .OwedPurges}} · <b class="bad">owed {{.OwedPurges}} purges</b>{{end}}</td><td>{{if .LastSeenAgoS}}{{printf "%.2f" .LastSeenAgoS}} s ago{{else}}—{{end}}</td>
<td>{{printf "%.2f" .RTTms}} ms</td><td>{{.Suspicions}}{{if .Rerouted}} ({{.Rerouted}} requests rerouted, {{.ReroutedWrongly}} wrongly){{end}}{{if or .SuspectEnded .SuspectStreaming}} (open at a suspicion: {{.SuspectEnded}} ended, {{.SuspectStreaming}} left streaming){{end}}{{range .History}} <span class="hist">{{if .Trusted}}▲{{else}}▼{{end}}{{.At.Format "15:04:05.000"}}</span>{{end}}</td></tr>{{end}}</table>
<p class="note">{{with .Detector}}Failure detector: {{.}}. {{end}}▲ trusted / ▼ suspected at the time shown (last 20 changes).{{with .SharedSilence}}{{if .On}} Shared-silence hold (cluster.shared_silence_hold): {{.Held}} suspicions held since start ({{.HeldNow}} now) because no other peer's heartbeat came on time either; {{.Ended}} silences every peer shared have ended.{{else}} Shared-silence hold off: a peer is suspected on its detector alone.{{end}}{{end}}{{with .NetworkLoss}}{{if .On}} Network-loss margin (cluster.network_loss_margin): most links lose {{printf "%.1f" (pct .Loss)}} % of heartbeats now, adding up to {{.MaxExtra}} periods to a peer's margin; {{.Deferred}} suspicions deferred since start{{if .Onset}}, {{.OnsetDeferred}} of them at a burst's onset (cluster.network_loss_onset: the links' last few due heartbeats){{end}}.{{else}} Network-loss margin off: each link's margin follows its own loss only.{{end}}{{end}}{{with .Confirm}}{{if .On}} Confirmation probe (cluster.confirm_probe): {{.Asked}} silent peers asked before a suspicion: {{.Answered}} answered in time (not suspected), {{.Unanswered}} unanswered (suspected; {{.Late}} answers came after the wait), {{.Overtaken}} overtaken by a heartbeat{{if .Superseded}}, {{.Superseded}} superseded (the point moved on during the wait: asked again){{end}}{{if .Abandoned}}, {{.Abandoned}} abandoned (the peer stopped being monitored during the wait){{end}}{{if .Skipped}}; {{.Skipped}} silences not probed (round trip longer than the wait){{end}}; {{.AnswersGiven}} answers given to peers' probes{{if .AnswersRefused}}, {{.AnswersRefused}} asks refused (replayed, over the limit, or no address){{end}}.{{else}} Confirmation probe off: a silent peer is suspected without asking it.{{end}}{{end}}</p>
{{range .Peers}}{{if .Shadows}}<p class="note">{{.ID}}, shadow detectors (cluster.shadow_detectors: compared on the same heartbeats, never acted on):{{range $name, $h := .Shadows}} <b>{{$name}}</b>{{range $h}} <span class="hist">{{if .Trusted}}▲{{else}}▼{{end}}{{.At.Format "15:04:05.000"}}</span>{{end}};{{end}}</p>{{end}}{{end}}
<details><summary>Detector and indicator details</summary>
<table><tr><th>peer</th><th>FD margin</th><th>heartbeat loss</th><th>indicator epoch</th><th>fpr</th><th>fnr</th><th>q</th><th>π</th><th>ν</th><th>ν (its own pages)</th><th>negative probes</th><th>of which hit</th><th>ν correction</th><th>recent negative hit rate</th></tr>
{{range .Peers}}<tr><td>{{.ID}}</td><td>{{printf "%.1f" .MarginMs}} ms</td><td>{{printf "%.1f" (pct .LossRatio)}} %</td><td>{{if .ReplicaAgeS}}{{.Epoch}} ({{printf "%.0f" .ReplicaAgeS}} s old){{else}}none pulled yet{{end}}</td>
<td>{{printf "%.4f" .Exclusion.FPR}}</td><td>{{printf "%.4f" .Exclusion.FNR}}</td><td>{{printf "%.3f" .Exclusion.Q}}</td><td>{{printf "%.3f" .Exclusion.Pi}}</td><td>{{printf "%.3f" .Exclusion.Nu}}</td>
<td>{{printf "%.3f" .HomeExclusion.Nu}}</td><td>{{.NegativeProbes}}</td><td>{{if .NegativeProbes}}{{.NegativeHits}} ({{printf "%.0f" (share .NegativeHits .NegativeProbes)}} %){{else}}—{{end}}</td><td>×{{printf "%.2f" .Calibration}}</td><td>{{if ge .NegativeOutcomes 1.0}}{{printf "%.1f" (pct .NegativeHitRate)}} % of ~{{printf "%.0f" .NegativeOutcomes}}{{else}}—{{end}}</td></tr>{{end}}</table>
<p class="note">Estimates: the peer's fpr and fnr as it reports them (fnr is the authors' estimate from the bits set since the last advertisement, which reads high on a filter far from full: with a few hundred pages in a filter sized for indicators.capacity, 28 % of them missed reads as about 0.95; docs/indicators.md), and this node's q, π (a positive indication is wrong) and ν (a negative one is wrong); ν over the pages homed at the peer, which fna-home and fna-learned use; the probes sent to it despite a negative indication and how many found the page (false negatives recovered); fna-learned's correction, realised negative-probe hits over the hits the derived ν predicted; and the recent hit rate of the negative probes for the peer's own pages (faded over about 500 of them), which fna-rate prices its negative indications with. This node's own recent scheduling delay, added to every freshness point so that a starved node does not blame its peers: {{printf "%.1f" .LocalDelayMs}} ms.{{with .ProbeRaces}}{{with .Pooled}} Negative probes hit, over each region's peers,{{range $region, $k := .}} ×{{printf "%.2f" $k}} ({{if $region}}{{$region}}{{else}}no region{{end}}){{end}} the derived ν's prediction: a peer with few negative probes of its own starts from its region's correction.{{end}} Negative probes {{if .Beside}}race the climb (cluster.negative_probes beside_climb): the climb answered first {{.ClimbWon}} times, a negative probe's hit {{.NegativeWon}} times{{else}}are waited for before the climb (cluster.negative_probes before_climb){{end}}.{{if .FirstHopWithProbes}} The climb's first hop is asked beside the probes a request waits for (cluster.first_hop_with_probes): {{.FirstHopAsked}} times, {{.FirstHopHits}} of them holding the page fresh.{{else if .ProbeFirstHop}} The climb's first hop is a probe candidate like any peer (cluster.probe_first_hop).{{else}} The climb's first hop is asked only once the probes missed (cluster.first_hop_with_probes off).{{end}} A probe's stale answer is no win (the request climbs, and the hop holding the copy refreshes it); when the climb then failed, a stale copy a probe had found answered instead {{.StaleServed}} times.{{if .StaleWhileClimbing}} A stale copy answered before the climb did {{.StaleServedEarly}} times (cluster.stale_while_climbing: the climb ran on and refreshed the page at its hop, as a single cache refreshes in the background).{{end}}{{end}}</p></details>{{end}}
<h2>Hottest pages</h2>
{{if .HotHidden}}<p class="note">The hottest URLs are shown with the admin token: <a href="/status?login=1">sign in</a> (any user name, the token as password).</p>{{else}}<table><tr><th>key</th><th>requests (estimate)</th></tr>{{range .HotKeys}}<tr><td><code>{{.Key}}</code></td><td>{{.Requests}}</td></tr>{{else}}<tr><td colspan="2">no requests yet</td></tr>{{end}}</table><p class="note">Counted on one request in 16, chosen at random, and multiplied by 16, so that a hit pays one random draw: a count under a few hundred is rough (a page asked once may show 16, or nothing), and a page new to the table starts from the count of the one it replaced (space-saving), so it is never under-counted.</p>{{end}}
<h2>Route explorer</h2>
<form method="get" action="/status"><input name="url" size="60" placeholder="a URL this node serves, e.g. https://www.example.com/index.html" value="{{.RouteURL}}"> <input type="hidden" name="refresh" value="0"><button>explain</button></form>
{{if .RouteError}}<p class="bad">{{.RouteError}}</p>{{end}}
{{with .Route}}<table>
<tr><th>cache key</th><td><code>{{.Key}}</code> (hash {{.KeyHash}})</td></tr>
<tr><th>routing mode</th><td>{{.Mode}}, {{.Placement}} placement; view {{range .View}}{{.}} {{end}}</td></tr>
<tr><th>home (rank 2)</th><td>{{.Home}}</td></tr>
<tr><th>misses planned here</th><td>{{.Requests}} ({{if .Hot}}hot: random tree{{else}}cold: home only{{end}})</td></tr>
<tr><th>cold path</th><td>{{range .ColdPath}}{{.}} → {{end}}origin</td></tr>
<tr><th>hot path (from the last leaf)</th><td>{{range .HotPath}}{{.}} → {{end}}origin</td></tr>
<tr><th>miss penalty M</th><td>{{if .Candidates}}{{printf "%.1f" .MissPenalty}} (climb latency / cheapest peer's access cost){{else}}— (no candidate to probe){{end}}; {{if .Site}}site {{.Site}}'s{{else}}the cluster-wide{{end}} climb latency {{if .ClimbMs}}{{printf "%.1f" .ClimbMs}} ms{{else}}not measured yet{{end}}</td></tr>
</table>
<table><tr><th>candidate</th><th>region</th><th>RTT</th><th>access cost</th><th>on path</th><th>indicated</th><th>cost c</th><th>ρ</th><th>probed ({{.Policy}})</th></tr>
{{range .Candidates}}<tr><td>{{.Peer}}</td><td>{{.Region}}</td><td>{{printf "%.2f" .RTTms}} ms</td><td>{{printf "%.2f" .AccessMs}} ms</td><td>{{.OnPath}}</td><td>{{.Indicated}}</td><td>{{printf "%.2f" .Cost}}</td><td>{{printf "%.3f" .Rho}}</td><td>{{if .Chosen}}<b>yes</b>{{else}}no{{end}}</td></tr>{{else}}<tr><td colspan="9">no candidates</td></tr>{{end}}</table>
<p class="note">Access cost: the configured cost of the region pair (cluster.region_costs), else the measured RTT; c is it divided by the cheapest trusted peer's.</p>{{end}}
<p><a href="/metrics">metrics</a> · <a href="/status.json">status.json</a></p>
</body></html>`))

// explain fills the route explorer for ?url=.
func (n *Node) explain(s *Status, u string) {
	s.RouteURL = u
	if u == "" {
		return
	}
	if n.cluster == nil {
		s.RouteError = "single node: every miss goes to the origin"
		return
	}
	e, err := n.cluster.Explain(u, n.proxy.URLKey)
	if err != nil {
		s.RouteError = err.Error()
		return
	}
	s.Route = &e
}

func (n *Node) routeJSON(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("url") != "" && !n.authorized(r, true) {
		http.Error(w, routeNeedsToken, http.StatusUnauthorized)
		return
	}
	s := n.Snapshot()
	n.explain(&s, r.URL.Query().Get("url"))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Route *cluster.Explanation `json:"route,omitempty"`
		Error string               `json:"error,omitempty"`
	}{s.Route, s.RouteError})
}

func (n *Node) statusPage(w http.ResponseWriter, r *http.Request) {
	authed := n.authorized(r, true)
	if r.URL.Query().Get("login") == "1" && !authed {
		w.Header().Set("WWW-Authenticate", `Basic realm="edge-admin"`)
		http.Error(w, "the admin token is the password", http.StatusUnauthorized)
		return
	}
	s := n.guardHot(n.Snapshot(), authed)
	if u := r.URL.Query().Get("url"); u != "" && !authed {
		s.RouteError = routeNeedsToken
	} else {
		n.explain(&s, u)
	}
	type row struct {
		Name        string
		Value, Rate float64
	}
	rows := make([]row, 0, len(s.Requests))
	for k, v := range s.Requests {
		rows = append(rows, row{k, v, s.RequestRates[k]})
	}
	ranking.ByCount(rows, func(r row) float64 { return r.Value }, func(r row) string { return r.Name })
	// The page refreshes itself (10 s, ?refresh=N, 0 for never), except
	// while the route explorer shows a URL.
	refresh := 10
	if v, err := strconv.Atoi(r.URL.Query().Get("refresh")); err == nil && v >= 0 {
		refresh = v
	}
	if r.URL.Query().Get("url") != "" {
		refresh = 0
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = statusTmpl.Execute(w, struct {
		Status
		Rows    []row
		Refresh int
		Uptime  string
	}{s, rows, refresh, time.Duration(s.UptimeSeconds * float64(time.Second)).Round(time.Second).String()})
}

// counterOf reads a counter's value for the status page.
func counterOf(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
