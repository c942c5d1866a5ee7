package datanode

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/handshake"
)

type metrics struct {
	requests       *prometheus.CounterVec   // op, code
	latency        *prometheus.HistogramVec // op
	bytesIn        *prometheus.CounterVec   // op
	bytesOut       *prometheus.CounterVec   // op
	chainFailures  prometheus.Counter
	alignedBytes   prometheus.Counter
	alignErrors    prometheus.Counter
	badBlocks      prometheus.Counter
	repairedBlocks prometheus.Counter
	reopens        prometheus.Counter
	// Chunks (OpWriteChunk): stored and acknowledged, by role (primary:
	// the client's write; replica: a forwarded one), and refused because
	// their bytes did not match their fingerprint.
	chunkWrites     *prometheus.CounterVec // role
	chunkBytes      *prometheus.CounterVec // role
	chunkMismatches prometheus.Counter
	// Extent grants clients presented (OpGrant): accepted, and refused
	// (a bad signature, another certificate's, expired, an unknown key).
	grantsAccepted, grantsRefused prometheus.Counter
	// Metadata logs rewritten because they had been idle, and the bytes
	// that gave back (compactIdle).
	journalCompactions, journalReclaimed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, h *Host) (*metrics, error) {
	m := &metrics{
		journalCompactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_journal_idle_compactions_total", Help: "Partition metadata logs rewritten because they had grown and then stayed idle.",
		}),
		journalReclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_journal_reclaimed_bytes_total", Help: "Bytes given back by rewriting idle metadata logs.",
		}),
		grantsAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_grants_accepted_total", Help: "Extent grants clients presented that this node verified and took.",
		}),
		grantsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_grants_refused_total", Help: "Extent grants clients presented that this node refused: a bad signature, another certificate's, expired, or signed with a key it does not know.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_data_requests_total", Help: "Data-path requests answered, by op and result code.",
		}, []string{"op", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cairn_data_request_seconds", Help: "Time from receiving a data-path request to queueing its response, by op.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"op"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_data_bytes_in_total", Help: "Payload bytes received in data-path requests, by op.",
		}, []string{"op"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_data_bytes_out_total", Help: "Payload bytes sent in data-path responses, by op.",
		}, []string{"op"}),
		chainFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_chain_failures_total", Help: "Writes failed because the next replica of the chain failed or did not answer.",
		}),
		alignedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_aligned_bytes_total", Help: "Bytes copied from a peer to align this node's extents.",
		}),
		alignErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_align_errors_total", Help: "Alignment passes that failed (retried later).",
		}),
		badBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_bad_blocks_total", Help: "Blocks found failing their checksum (scrub or read).",
		}),
		repairedBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_repaired_blocks_total", Help: "Bad blocks repaired from a healthy replica.",
		}),
		reopens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_store_reopens_total", Help: "Extent stores reopened (or rebuilt) after they failed.",
		}),
		chunkWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_data_chunk_writes_total", Help: "Content-addressed chunks stored and acknowledged, by role (primary or replica).",
		}, []string{"role"}),
		chunkBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_data_chunk_bytes_total", Help: "Bytes of content-addressed chunks stored and acknowledged, by role (primary or replica).",
		}, []string{"role"}),
		chunkMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_data_chunk_fingerprint_mismatches_total", Help: "Chunk writes refused because the bytes did not hash to their fingerprint.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.requests, m.latency, m.bytesIn, m.bytesOut, m.chainFailures, m.alignedBytes,
		m.alignErrors, m.badBlocks, m.repairedBlocks, m.reopens, m.chunkWrites, m.chunkBytes, m.chunkMismatches, m.grantsAccepted, m.grantsRefused,
		m.journalCompactions, m.journalReclaimed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cairn_data_journal_bytes", Help: "Bytes of the data partitions' metadata logs (extent records, and the bytes of small appends they journal).",
		}, func() float64 { return float64(h.journal().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cairn_data_journal_reclaimable_bytes", Help: "Bytes of the data partitions' metadata logs past their snapshots: what rewriting them would give back, less the records of what is still live.",
		}, func() float64 { j := h.journal(); return float64(j.Bytes - j.SnapshotBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cairn_data_sendfile_bytes_total", Help: "Read bytes sent with sendfile(2) (zero-copy).",
		}, func() float64 { return float64(h.srv.Stats().SendfileBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cairn_data_copied_bytes_total", Help: "Read bytes sent through a user-space buffer.",
		}, func() float64 { return float64(h.srv.Stats().CopiedBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cairn_data_connections", Help: "Open data-path connections.",
		}, func() float64 { return float64(h.srv.Stats().Conns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cairn_data_handshakes_pending", Help: "Data-path connections in their TLS handshake now (pkg/handshake bounds them).",
		}, func() float64 { return float64(h.srv.Stats().Handshakes.Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cairn_data_partitions", Help: "Data partitions open on this node.",
		}, func() float64 {
			h.mu.RLock()
			defer h.mu.RUnlock()
			return float64(len(h.parts))
		}),
	}
	// The handshakes' outcomes, one series each: a flood of connections
	// that never authenticate shows as refused_source, evicted and
	// timed_out.
	for _, o := range []struct {
		name string
		get  func(handshake.Stats) uint64
	}{
		{"admitted", func(s handshake.Stats) uint64 { return s.Admitted }},
		{"refused_source", func(s handshake.Stats) uint64 { return s.RefusedSource }},
		{"evicted", func(s handshake.Stats) uint64 { return s.Evicted }},
		{"completed", func(s handshake.Stats) uint64 { return s.Completed }},
		{"failed", func(s handshake.Stats) uint64 { return s.Failed }},
		{"timed_out", func(s handshake.Stats) uint64 { return s.TimedOut }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cairn_data_handshakes_total", Help: "Data-path connections by how their TLS handshake went.",
			ConstLabels: prometheus.Labels{"outcome": o.name},
		}, func() float64 { return float64(o.get(h.srv.Stats().Handshakes)) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("data node metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one answered request.
func (m *metrics) observe(op dataproto.Op, code dataproto.Code, in, out int, seconds float64) {
	ops := op.String()
	m.requests.WithLabelValues(ops, code.String()).Inc()
	m.latency.WithLabelValues(ops).Observe(seconds)
	if in > 0 {
		m.bytesIn.WithLabelValues(ops).Add(float64(in))
	}
	if out > 0 {
		m.bytesOut.WithLabelValues(ops).Add(float64(out))
	}
}
