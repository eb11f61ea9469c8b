package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
)

// probeOutcomes are the outcomes a probe is counted by (recordAnswer).
var probeOutcomes = []string{"hit", "stale", "miss", "error", "lost", "cancelled"}

// Metrics are the cluster's Prometheus collectors. Per-peer labels are
// bounded by the cluster's size.
type Metrics struct {
	OwedPurgeEvents       *prometheus.CounterVec
	PeerUp                *prometheus.GaugeVec // 1 trusted, 0 suspected, per peer
	PeerMember            *prometheus.GaugeVec
	Suspicions            *prometheus.CounterVec // peer suspected, per peer
	ShadowSuspicions      *prometheus.CounterVec // suspicions by shadow detectors (Config.Shadows), per detector
	Rerouted              prometheus.Counter     // requests sent to another home because this node suspected theirs
	ReroutedWrongly       prometheus.Counter     // of those, the ones of suspicions that turned out wrong
	DetectionTime         prometheus.Histogram   // last heartbeat → suspicion
	FDMargin              *prometheus.GaugeVec   // current safety margin of the detector, per peer
	HeartbeatLoss         *prometheus.GaugeVec   // heartbeat loss rate the loss-aware margin estimates, per peer
	PeerRTT               *prometheus.GaugeVec   // smoothed RTT from heartbeat echoes, per peer
	LocalStalls           prometheus.Counter     // rounds skipped because this process stalled
	HeldSuspicions        prometheus.Counter     // suspicions held for a silence every peer shared
	SuspectedPeerRequests *prometheus.CounterVec // requests open to a peer when it was suspected: ended (no header yet) or streaming (left to run while it flows)
	SharedSilences        prometheus.Counter     // silences every peer shared, ended
	NetworkLoss           prometheus.Gauge       // loss most links show at once (networkloss.go)
	NetworkLossDeferrals  prometheus.Counter     // suspicions the network's loss deferred
	NetworkOnsetDeferrals prometheus.Counter     // those the onset estimate alone deferred
	ConfirmProbes         *prometheus.CounterVec // confirmation probes by outcome (confirm.go)
	ProbeAnswers          *prometheus.CounterVec // answers to peers' probes, sent or rate-limited
	LocalDelay            prometheus.Gauge       // worst recent scheduling delay of this process, added to freshness points
	ViewSize              prometheus.Gauge       // members in the view (self included)
	ViewChanges           prometheus.Counter     // ring rebuilds
	ViewRebuild           prometheus.Histogram   // time to rebuild the ring on a view change
	HeartbeatPackets      *prometheus.CounterVec // heartbeat packets, by direction (sent, received)
	HeartbeatBytes        *prometheus.CounterVec // their bytes, by direction
	Advertisements        prometheus.Counter     // own indicator epochs published
	AdvertisementBytes    *prometheus.CounterVec // bytes served to peers, by kind (full, delta)
	IndicatorEpoch        prometheus.Gauge       // own epoch
	IndicatorPulls        *prometheus.CounterVec // replicas updated, per peer
	IndicatorRejected     *prometheus.CounterVec // payloads rejected, by reason
	Probes                *prometheus.CounterVec // by indication (positive, negative) and outcome (hit, miss, error, lost)
	BesideClimb           *prometheus.CounterVec // requests whose negative probes raced the climb, by winner
	PurgeHeldCopies       prometheus.Counter     // peers' pages not kept because a purge was going round (purgehold.go)
	OwedSaveErrors        prometheus.Counter     // failed writes of the owed purges' state file (owedstate.go)
	OwedPulls             *prometheus.CounterVec // peers asked at start for what they owe this node, by outcome (owedpull.go)
	NegativeProbes        *prometheus.CounterVec // probes despite a negative indication, per peer, by outcome (hit, miss)
	StaleFallbacks        *prometheus.CounterVec // a failed climb's request asked the probes' stale copies again (stalefallback.go), by outcome
	FirstHopProbes        *prometheus.CounterVec // the climb's first hop asked beside the probes (cluster.first_hop_with_probes), by outcome
	ClimbHops             *prometheus.CounterVec // climb steps by outcome (ok, failover, next_home, next_home_failed)
	ClimbSeconds          prometheus.Histogram   // ingress climb latency (the miss penalty M)
	TreeHops              prometheus.Histogram   // caches on a planned path
	PeerRequests          *prometheus.CounterVec // signed data requests served, by mode
	PeerRejected          *prometheus.CounterVec // peer requests refused, by reason
	PeerLoopHits          prometheus.Counter     // of PeerRequests, the fresh hits the cluster listener's read loop answered (peerhit.go)
	Resumes               *prometheus.CounterVec // peer bodies broken mid-way and resumed from the origin, by outcome
	WholeAnswers          *prometheus.CounterVec // peer answers read whole before their header went to the client, by outcome
	IndicatorEstimates    *prometheus.GaugeVec   // fpr, fnr, pi, nu, q, home_nu, home_q, nu_calibration, home_negative_hit_rate, home_negative_outcomes per peer
	ReplicaEpoch          *prometheus.GaugeVec   // epoch of the replica held for each peer
	ReplicaAge            *prometheus.GaugeVec   // seconds since the replica of each peer last changed (indicator staleness)
	PooledCalibration     *prometheus.GaugeVec   // fna-learned's correction over the negative probes of a region's peers (indicators.CalibrationPool)
	MonitoredPeers        prometheus.Gauge       // peers this node exchanges heartbeats with
	MonitoringSubset      prometheus.Gauge       // 1 with bounded-subset monitoring, 0 all-to-all
	GossipPackets         *prometheus.CounterVec // membership packets on the cluster port, by direction
	GossipBytes           *prometheus.CounterVec // their bytes, by direction
	GossipDropped         prometheus.Counter     // membership packets or streams dropped on a full queue
	GossipRejected        *prometheus.CounterVec // membership traffic refused, by reason (key, plain)
	MembershipEvents      *prometheus.CounterVec // memberlist events: join, update, leave, conflict, refused, refute
	MembershipJoins       *prometheus.CounterVec // join attempts through seeds, by outcome
	reg                   prometheus.Registerer
}

// registerVerifier exports the heartbeat verifier's rejection counts, plus
// heartbeats from nodes that are not peers.
func (m *Metrics) registerVerifier(v *wire.Verifier, unknown func() uint64) {
	for _, r := range wire.RejectReasons {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "edge_heartbeat_rejections_total", Help: "Heartbeats refused, by reason.", ConstLabels: prometheus.Labels{"reason": string(r)},
		}, func() float64 { return float64(v.Rejections()[r]) }))
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "edge_heartbeat_rejections_total", Help: "Heartbeats refused, by reason.", ConstLabels: prometheus.Labels{"reason": "unknown_peer"},
	}, func() float64 { return float64(unknown()) }))
}

// registerOwed exports how many purges peers are owed.
func (m *Metrics) registerOwed(count func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_purge_owed", Help: "Purges owed to peers that did not take them when they went round, summed over peers (delivered when each is trusted again; cluster/purgeowed.go)."},
		func() float64 { return float64(count()) }))
}

// registerMembership exports memberlist's own view: its member count
// (alive and suspect) and this node's health score (Lifeguard's local
// awareness: 0 is healthy, higher when this node misses its own probe
// deadlines, which stretches its timeouts).
func (m *Metrics) registerMembership(state func() MembershipState) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_membership_members", Help: "Members memberlist counts alive or suspect, self included (0 before it runs)."},
		func() float64 { return float64(state().Alive) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_membership_health_score", Help: "memberlist's health score of this node (0 healthy; Lifeguard raises it when this node misses its own probe deadlines)."},
		func() float64 { return float64(state().Health) }))
}

// NewMetrics registers the cluster's collectors.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	lat := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	m := &Metrics{
		PeerUp:                prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_peer_up", Help: "1 if the peer is trusted, 0 if suspected."}, []string{"peer"}),
		PeerMember:            prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_peer_member", Help: "1 while the peer is expected: a member of the cluster, configured in cluster.peers, or gone without saying goodbye (a crash or a partition, suspected before memberlist agreed it dead); 0 once it left on purpose (its goodbye came while its heartbeats did) and is not configured. The series goes when the peer is forgotten (cluster.forget_departed_after). EdgePeerDown pages only for peers at 1."}, []string{"peer"}),
		Suspicions:            prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_suspicions_total", Help: "Times the failure detector suspected the peer."}, []string{"peer"}),
		DetectionTime:         prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edge_fd_detection_seconds", Help: "Time from a peer's last heartbeat to its suspicion.", Buckets: []float64{.05, .1, .15, .2, .3, .5, .75, 1, 2, 5}}),
		FDMargin:              prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_fd_margin_seconds", Help: "Safety margin of the peer's failure detector."}, []string{"peer"}),
		HeartbeatLoss:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_heartbeat_loss_ratio", Help: "Share of the peer's heartbeats lost, as the loss-aware margin's averages of every loss read it (cluster.loss_budget)."}, []string{"peer"}),
		PeerRTT:               prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_peer_rtt_seconds", Help: "Smoothed round-trip time to the peer, from heartbeat echoes."}, []string{"peer"}),
		LocalStalls:           prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_local_stalls_total", Help: "Detector rounds skipped because this process itself stalled."}),
		SuspectedPeerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_suspected_requests_total", Help: "Requests open to a peer when this node suspected it: ended (no header yet: failed over at once) or streaming (the body goes on while it flows; it ends after cluster.peer_timeout of silence); of the streaming, crawled: ended later for moving under 16 KiB/s while read."}, []string{"outcome"}),
		HeldSuspicions:        prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_held_suspicions_total", Help: "Suspicions held because no other peer's heartbeat came on time either (cluster.shared_silence_hold): each held peer once per silence."}),
		NetworkLoss:           prometheus.NewGauge(prometheus.GaugeOpts{Name: "edge_fd_network_loss_ratio", Help: "Heartbeat loss most links show at once: the lower median of the monitored links' quick (about 10-heartbeat) loss estimates (cluster.network_loss_margin)."}),
		NetworkLossDeferrals:  prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_network_loss_deferrals_total", Help: "Suspicions deferred because the loss on most links widened the peer's margin (cluster.network_loss_margin): each silence once."}),
		NetworkOnsetDeferrals: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_network_loss_onset_deferrals_total", Help: "Suspicions deferred by the network's loss read from the links' last few due heartbeats alone, at a loss burst's onset, before the quick estimates learned it (cluster.network_loss_onset): each silence once."}),
		SharedSilences:        prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_shared_silences_total", Help: "Silences every peer shared (no heartbeat on time for 2.5 periods) that ended; peers not heard since get a whole freshness interval from the end."}),
		LocalDelay:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "edge_fd_local_delay_seconds", Help: "Worst recent scheduling delay of this process (Go run-queue latency or monitor lag), added to every freshness point before suspecting."}),
		ViewSize:              prometheus.NewGauge(prometheus.GaugeOpts{Name: "edge_view_members", Help: "Members of the routing view, self included."}),
		ViewChanges:           prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_view_changes_total", Help: "Ring rebuilds after a view change."}),
		Advertisements:        prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_indicator_advertisements_total", Help: "Own indicator epochs published."}),
		AdvertisementBytes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_indicator_advertisement_bytes_total", Help: "Indicator bytes served to peers, by encoding."}, []string{"kind"}),
		IndicatorEpoch:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "edge_indicator_epoch", Help: "Own advertised indicator epoch."}),
		IndicatorPulls:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_indicator_pulls_total", Help: "Peer indicator replicas updated."}, []string{"peer"}),
		IndicatorRejected:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_indicator_rejections_total", Help: "Indicator payloads rejected, by reason."}, []string{"reason"}),
		Probes:                prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_probes_total", Help: "only-if-cached probes by indication and outcome: hit, stale (the peer holds the page stale: no win, the request climbs, and the estimators count it a miss), miss, error (no headers in time), lost (any other answer) or cancelled (its request ended before the answer came). A negative-indication hit is a false negative, a positive-indication miss a false positive."}, []string{"indication", "outcome"}),
		ClimbHops:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_climb_hops_total", Help: "Climb steps to peers, by outcome: ok, failover (the hop failed), next_home (the page's next home answered for a failed home), next_home_failed."}, []string{"outcome"}),
		ClimbSeconds:          prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edge_climb_duration_seconds", Help: "Latency of a climb from the ingress (the measured miss penalty).", Buckets: lat}),
		TreeHops:              prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edge_tree_path_caches", Help: "Caches on a planned tree path (self excluded).", Buckets: []float64{0, 1, 2, 3, 4, 5, 6, 8}}),
		PeerRequests:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_requests_total", Help: "Signed data requests served to peers, by mode."}, []string{"mode"}),
		PeerLoopHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_peer_loop_hits_total",
			Help: "Of the signed data requests served to peers, the fresh RAM hits answered on the cluster listener's read loop (tuning.hit_path) instead of net/http."}),
		PeerRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_request_rejections_total", Help: "Peer requests refused, by reason; answer_key_version counts answers this node refused as the asker (a peer of another cache-key version)."}, []string{"reason"}),
		WholeAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_answers_whole_total", Help: "Peer answers at the ingress read whole before their header went to the client (cluster.peer_whole_bytes): whole (in time), streamed (larger: streamed from there), failed (the body failed before a byte was sent; the climb went on), race_peer and race_origin (silent for the stall limit, or still arriving then on a link with heartbeat loss: raced against the origin; race_origin when the origin's answer, below 500, was served, because it came first or the peer's broke after it was asked)."}, []string{"outcome"}),
		Resumes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_body_resumes_total", Help: "Peer answers resumed from the origin by Range and If-Range: ok (after a break), raced (a stall the origin's answer took over), stall_recovered (the stream came back, or ended, first), crawl_raced (a stream crawling on a lossy link that the origin took over), failed (the body failed as before)."}, []string{"outcome"}),
		BesideClimb:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_probe_climb_races_total", Help: "Requests whose negative probes raced the climb (cluster.negative_probes beside_climb), by what answered first: climb, or negative_probe (a false negative recovered while the climb was on its way)."}, []string{"winner"}),
		StaleFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_stale_fallbacks_total",
			Help: "Requests that asked again the peers a probe had found holding the page stale (no win, edge_peer_probes_total's stale), once their climb failed or, with cluster.stale_while_climbing, beside the climb: served (a stale copy the site allows answered instead of an error), served_early (a stale copy answered before the climb did, which runs on and refreshes the page at its hop), climb_first (the climb answered first and was served), none (no peer answered it: the climb's answer or error was served), purged (a purge naming the page went round since the request began: nothing served) or cancelled (the request ended first)."}, []string{"outcome"}),
		FirstHopProbes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_first_hop_probes_total",
			Help: "The climb's first hop (the page's home in this region) asked only-if-cached beside the probes a request waited for (cluster.first_hop_with_probes), by outcome, as edge_peer_probes_total's (a hit answered the page, or would have had another probe's hit not come first; cancelled, the request climbed to it first), and stale: it held the page stale, which the climb to it then refreshes."}, []string{"outcome"}),
		NegativeProbes:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_peer_negative_probes_total", Help: "Probes sent despite a negative indication, per peer, by outcome: a hit is a false negative the probe recovered, a miss the probe's cost, stale a copy the peer held stale (no win: the request climbed)."}, []string{"peer", "outcome"}),
		IndicatorEstimates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_indicator_estimate", Help: "Per-peer indicator estimates (fpr, fnr, pi, nu, q; home_nu and home_q over the pages homed at the peer; nu_calibration, realised over predicted negative-probe hits; home_negative_hit_rate, the recent hit rate of negative probes for the peer's own pages, which fna-rate prices them with (0 while fewer than one outcome is left), and home_negative_outcomes, how many (faded) outcomes it is over)."}, []string{"peer", "estimate"}),
		ReplicaAge:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_indicator_replica_age_seconds", Help: "Seconds since the indicator replica of each peer last changed."}, []string{"peer"}),
		ReplicaEpoch:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_indicator_replica_epoch", Help: "Epoch of the replica held for each peer."}, []string{"peer"}),
	}
	m.ViewRebuild = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "edge_view_rebuild_seconds", Help: "Time to rebuild the ring when the view changes.",
		Buckets: []float64{1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2}})
	m.HeartbeatPackets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_heartbeat_packets_total", Help: "Heartbeat packets sent and received (accepted or not), by direction."}, []string{"direction"})
	m.HeartbeatBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_heartbeat_bytes_total", Help: "Heartbeat bytes (UDP payload) sent and received, by direction."}, []string{"direction"})
	for _, d := range []string{"sent", "received"} {
		m.HeartbeatPackets.WithLabelValues(d)
		m.HeartbeatBytes.WithLabelValues(d)
	}
	m.MonitoredPeers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "edge_cluster_monitored_peers", Help: "Peers this node exchanges heartbeats with (all of them, or its bounded subset)."})
	m.MonitoringSubset = prometheus.NewGauge(prometheus.GaugeOpts{Name: "edge_cluster_monitoring_subset", Help: "1 with bounded-subset monitoring (neighbours and the peers routed to), 0 with all-to-all heartbeats."})
	m.GossipPackets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_membership_packets_total", Help: "Membership (memberlist) packets on the cluster port, by direction."}, []string{"direction"})
	m.GossipBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_membership_bytes_total", Help: "Membership (memberlist) packet bytes on the cluster port, by direction."}, []string{"direction"})
	m.GossipDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_membership_dropped_total", Help: "Membership packets or streams dropped because memberlist's queue was full."})
	m.GossipRejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_membership_rejections_total", Help: "Membership traffic refused, by reason: key (no installed key decrypts it: a different cluster.secret), plain (unencrypted), stale (an announcement of a node not in the view, made more than 75 s before: a replay, or a clock behind)."}, []string{"reason"})
	m.MembershipEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_membership_events_total", Help: "Membership events: join, update (metadata), leave (dead or left, agreed by memberlist), conflict (a node id claimed from two addresses), refused (metadata not understood), refute (this node announced itself alive with a new incarnation after a silence of its peers' heartbeats)."}, []string{"event"})
	m.MembershipJoins = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_membership_joins_total", Help: "Join attempts through seeds that are not members, by outcome (ok, partial, failed)."}, []string{"outcome"})
	for _, d := range []string{"sent", "received"} {
		m.GossipPackets.WithLabelValues(d)
		m.GossipBytes.WithLabelValues(d)
	}
	// Every reason a peer request is refused for exists from the start:
	// the alert on forged ones (deploy/alerts.yml EdgeHeartbeatForgery)
	// reads increase(), which counts nothing for a series' first sample
	// (a review: a short burst of forgeries paged nobody).
	for _, r := range []string{"unsigned", "malformed", "skew", "mac", "misdirected", "replay", "key_version", "answer_key_version", "loop", "response", "site"} {
		m.PeerRejected.WithLabelValues(r)
	}
	for _, r := range []string{"key", "plain", "stale"} {
		m.GossipRejected.WithLabelValues(r)
	}
	for _, e := range []string{"join", "update", "leave", "conflict", "refused", "refute"} {
		m.MembershipEvents.WithLabelValues(e)
	}
	for _, o := range []string{"ok", "partial", "failed"} {
		m.MembershipJoins.WithLabelValues(o)
	}
	// Labelled by the configured shadow detectors only: a bounded set.
	m.ShadowSuspicions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_fd_shadow_suspicions_total", Help: "Suspicions by detectors run beside cluster.detector for comparison only (cluster.shadow_detectors), summed over peers, by detector."}, []string{"detector"})
	m.Rerouted = prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_rerouted_requests_total", Help: "Requests sent to another home because this node suspected the page's home (with all-to-all monitoring a suspicion changes only this node's view)."})
	m.ReroutedWrongly = prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_fd_rerouted_requests_wrongly_total", Help: "Rerouted requests whose suspected home was later heard from the same process: it had not crashed (a false suspicion, or a partition)."})
	m.ConfirmProbes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_fd_confirm_probes_total", Help: "Confirmation probes of a silent peer before suspecting it (cluster.confirm_probe), by outcome: asked (probes sent), each then answered (in time: no suspicion), unanswered (suspected), overtaken (a heartbeat came first), superseded (the freshness point moved on past the wait: asked again) or abandoned (the peer stopped being monitored during the wait); late counts answers after the wait (their probes among the others: unanswered, overtaken, superseded or abandoned); skipped counts silences not probed (the least of the link's recent round trips too long for the wait)."}, []string{"outcome"})
	m.ProbeAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_fd_probe_answers_total", Help: "Asks of peers' confirmation probes, by outcome: sent (answered), replayed (not of the peer's newest probe, or its nonce answered already: refused), limited (over the per-peer limit of a period), no_route (the peer's heartbeat address not resolved yet)."}, []string{"outcome"})
	for _, o := range []string{"asked", "answered", "unanswered", "overtaken", "superseded", "abandoned", "late", "skipped"} {
		m.ConfirmProbes.WithLabelValues(o)
	}
	for _, o := range []string{"sent", "replayed", "limited", "no_route"} {
		m.ProbeAnswers.WithLabelValues(o)
	}
	reg.MustRegister(m.ConfirmProbes, m.ProbeAnswers)
	m.OwedPurgeEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_purge_owed_events_total", Help: "Purges owed to peers that did not take them when they went round (suspected, gone, not answering), by what became of them: delivered (taken when the peer was trusted again), refused (the peer answered it will not take it), incomplete (the peer ran it but a file stayed on its failing disk), failed (a delivery attempt that got no answer: tried again), collapsed (a peer owed too many purges is owed one purge of everything instead), expired (dropped a day after the last purge owed to a peer that did not come back)."}, []string{"outcome"})
	for _, o := range []string{"delivered", "refused", "incomplete", "failed", "collapsed", "expired"} {
		m.OwedPurgeEvents.WithLabelValues(o)
	}
	reg.MustRegister(m.OwedPurgeEvents)
	m.PurgeHeldCopies = prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_purge_held_peer_copies_total", Help: "Pages a peer gave this node that it served but did not keep, because a purge was going round the cluster (the peer may not have had it yet)."})
	reg.MustRegister(m.PurgeHeldCopies)
	m.OwedSaveErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_purge_owed_save_errors_total", Help: "Failed writes of the file in cluster.state_dir that keeps the purges peers are owed across a restart (tried again at the next change or monitor round; until one succeeds a restart loses what changed)."})
	reg.MustRegister(m.OwedSaveErrors)
	m.OwedPulls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_purge_owed_pulls_total", Help: "Peers this node asked to deliver the purges they owe it, by when (start: when it started, before it served a client; silence: a peer heard again after a silence long enough to refute a suspicion; joined: a peer membership brought in after the start's asking, learnt by gossip or back from an agreed death) and outcome: delivered (it owed some and they ran here), nothing (it owed none), unreachable (no answer within the bound), failed (it could not deliver them all: the rest come as before), dropped (not asked: more peers came back at once than the queue holds; they deliver once they trust this node again)."}, []string{"when", "outcome"})
	for _, w := range []string{askAtStart, askAfterSilence, askJoined} {
		for _, o := range []string{pullDelivered, pullNothing, pullUnreachable, pullFailed} {
			m.OwedPulls.WithLabelValues(w, o)
		}
		if w != askAtStart { // the start asks every peer itself, queueing none
			m.OwedPulls.WithLabelValues(w, pullDropped)
		}
	}
	reg.MustRegister(m.OwedPulls)
	m.PooledCalibration = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_indicator_pooled_nu_calibration", Help: "fna-learned's ν correction over the negative probes of a region's peers (realised over predicted hits): the prior a peer of that region with few negative probes of its own starts from."}, []string{"region"})
	reg.MustRegister(m.ShadowSuspicions, m.Rerouted, m.ReroutedWrongly, m.PooledCalibration)
	reg.MustRegister(m.ViewRebuild, m.HeartbeatPackets, m.HeartbeatBytes, m.MonitoredPeers, m.MonitoringSubset,
		m.GossipPackets, m.GossipBytes, m.GossipDropped, m.GossipRejected, m.MembershipEvents, m.MembershipJoins)
	reg.MustRegister(m.PeerUp, m.PeerMember, m.Suspicions, m.SuspectedPeerRequests, m.DetectionTime, m.FDMargin, m.HeartbeatLoss, m.PeerRTT, m.LocalStalls, m.HeldSuspicions, m.SharedSilences, m.NetworkLoss, m.NetworkLossDeferrals, m.NetworkOnsetDeferrals, m.LocalDelay,
		m.ViewSize, m.ViewChanges, m.Advertisements, m.AdvertisementBytes, m.IndicatorEpoch, m.IndicatorPulls, m.IndicatorRejected,
		m.Probes, m.StaleFallbacks, m.FirstHopProbes, m.NegativeProbes, m.BesideClimb, m.ClimbHops, m.ClimbSeconds, m.TreeHops, m.PeerRequests, m.PeerLoopHits, m.PeerRejected, m.Resumes, m.WholeAnswers, m.IndicatorEstimates, m.ReplicaEpoch, m.ReplicaAge)
	m.reg = reg
	for _, r := range indicators.AllReasons {
		m.IndicatorRejected.WithLabelValues(string(r))
	}
	for _, ind := range []string{"positive", "negative"} {
		for _, o := range probeOutcomes {
			m.Probes.WithLabelValues(ind, o)
		}
	}
	for _, o := range []string{"served", "served_early", "climb_first", "none", "purged", "cancelled"} {
		m.StaleFallbacks.WithLabelValues(o)
	}
	for _, o := range probeOutcomes {
		m.FirstHopProbes.WithLabelValues(o)
	}
	for _, o := range resumeOutcomes {
		m.Resumes.WithLabelValues(o)
	}
	for _, o := range wholeOutcomes {
		m.WholeAnswers.WithLabelValues(o)
	}
	return m
}

// peerMember sets edge_peer_member of peer: whether it is expected in
// the cluster: a member, a configured peer, or one that left without
// saying goodbye (a crash, a partition: a review found a crashed member
// at 0, so that EdgePeerDown never paged for it).
func (m *Metrics) peerMember(p *Peer) {
	v := 0.0
	if p.member || p.configured || !p.saidGoodbye {
		v = 1
	}
	m.PeerMember.WithLabelValues(p.ID).Set(v)
}

func (m *Metrics) peerUp(peer string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.PeerUp.WithLabelValues(peer).Set(v)
}
