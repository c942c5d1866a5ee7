package multiraft

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a host's counters to Prometheus. It reads Stats on every
// scrape, so it costs nothing between scrapes.
type Collector struct {
	h *Host
}

// NewCollector returns a collector for h; register it once per host.
func NewCollector(h *Host) *Collector { return &Collector{h: h} }

var (
	descCounters = map[string]*prometheus.Desc{}
	counterNames = []struct{ name, help string }{
		{"rounds", "Processing rounds run."},
		{"sync_commits", "Synced Pebble batches written (one per round that needed durability, whatever the group count)."},
		{"batches_sent", "Transport batches sent (at most one per peer per round)."},
		{"messages_sent", "Raft messages sent in full form."},
		{"heartbeats_sent", "Coalesced heartbeats and heartbeat responses sent."},
		{"batches_received", "Transport batches received and processed."},
		{"dropped_inbox_full", "Inbound batches dropped because the inbox was full."},
		{"dropped_malformed", "Inbound batches, messages or heartbeats dropped as malformed."},
		{"dropped_stale", "Inbound heartbeats dropped as older than the replica they reached (a commit index beyond its log)."},
		{"entries_applied", "Log entries applied to state machines."},
		{"snapshots_taken", "Snapshots taken for log truncation."},
		{"peers_down", "Peers declared dead by the node-level liveness rule."},
		{"commit_notices_held", "Appends without entries (commit index only) held back in case an append with entries replaced them."},
		{"commit_notices_saved", "Held commit notices replaced by an append with entries, never sent."},
	}
	descGroups   = prometheus.NewDesc("cairn_raft_groups", "Raft groups on this host.", nil, nil)
	descQuiesced = prometheus.NewDesc("cairn_raft_groups_quiesced", "Raft groups on this host that are quiesced.", nil, nil)
	descPerPeer  = prometheus.NewDesc("cairn_raft_peer_batches_sent_total", "Transport batches sent, by peer node.", []string{"peer"}, nil)
)

func init() {
	for _, c := range counterNames {
		descCounters[c.name] = prometheus.NewDesc("cairn_raft_"+c.name+"_total", c.help, nil, nil)
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descCounters {
		ch <- d
	}
	ch <- descGroups
	ch <- descQuiesced
	ch <- descPerPeer
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.h.Stats()
	values := map[string]uint64{
		"rounds": s.Rounds, "sync_commits": s.SyncCommits, "batches_sent": s.BatchesSent,
		"messages_sent": s.MessagesSent, "heartbeats_sent": s.HeartbeatsSent, "batches_received": s.BatchesReceived,
		"dropped_inbox_full": s.DroppedInboxFull, "dropped_malformed": s.DroppedMalformed,
		"dropped_stale":   s.DroppedStale,
		"entries_applied": s.EntriesApplied, "snapshots_taken": s.SnapshotsTaken, "peers_down": s.PeersDown,
		"commit_notices_held": s.CommitNoticesHeld, "commit_notices_saved": s.CommitNoticesSaved,
	}
	for name, v := range values {
		ch <- prometheus.MustNewConstMetric(descCounters[name], prometheus.CounterValue, float64(v))
	}
	ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, float64(s.Groups))
	ch <- prometheus.MustNewConstMetric(descQuiesced, prometheus.GaugeValue, float64(s.GroupsQuiesced))
	for peer, n := range s.BatchesSentPerPeer {
		ch <- prometheus.MustNewConstMetric(descPerPeer, prometheus.CounterValue, float64(n), strconv.FormatUint(uint64(peer), 10))
	}
}

// TransportCollector exports a GRPCTransport's counters to Prometheus,
// read on every scrape: how many batches went out (and how many of the
// calls one-way), how many were dropped for a full peer queue or a closed
// transport, how often a peer's connection broke, and what came in.
type TransportCollector struct {
	t *GRPCTransport
}

// NewTransportCollector returns a collector for t; register it once per
// transport.
func NewTransportCollector(t *GRPCTransport) *TransportCollector { return &TransportCollector{t: t} }

var transportCounters = []struct {
	desc  *prometheus.Desc
	value func(TransportStats) uint64
}{
	{prometheus.NewDesc("cairn_raft_transport_batches_sent_total", "Batches handed to peers' connections.", nil, nil),
		func(s TransportStats) uint64 { return s.BatchesSent }},
	{prometheus.NewDesc("cairn_raft_transport_one_way_calls_total", "Deliver calls sent one-way (no answer awaited), to peers that take them.", nil, nil),
		func(s TransportStats) uint64 { return s.OneWayCalls }},
	{prometheus.NewDesc("cairn_raft_transport_batches_dropped_total", "Outbound batches dropped for a full peer queue or a closed transport.", nil, nil),
		func(s TransportStats) uint64 { return s.BatchesDropped }},
	{prometheus.NewDesc("cairn_raft_transport_send_errors_total", "Connections to peers that broke or could not be made (each retried with backoff).", nil, nil),
		func(s TransportStats) uint64 { return s.SendErrors }},
	{prometheus.NewDesc("cairn_raft_transport_batches_received_total", "Inbound batches handed to the host.", nil, nil),
		func(s TransportStats) uint64 { return s.BatchesReceived }},
	{prometheus.NewDesc("cairn_raft_transport_malformed_total", "Inbound raft messages or batches dropped as malformed or misaddressed.", nil, nil),
		func(s TransportStats) uint64 { return s.Malformed }},
	{prometheus.NewDesc("cairn_raft_transport_undelivered_total", "Inbound batches that arrived before the host was set.", nil, nil),
		func(s TransportStats) uint64 { return s.Undelivered }},
}

// Describe implements prometheus.Collector.
func (c *TransportCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, tc := range transportCounters {
		ch <- tc.desc
	}
}

// Collect implements prometheus.Collector.
func (c *TransportCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.t.Stats()
	for _, tc := range transportCounters {
		ch <- prometheus.MustNewConstMetric(tc.desc, prometheus.CounterValue, float64(tc.value(s)))
	}
}
