package fusefs

import (
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnfs/cairn/pkg/client"
)

// Metrics are a mount's Prometheus metrics: requests by operation and
// result, their latencies, bytes through the mount, and the volume's
// traffic (bytes to and from data nodes, metadata requests).
type Metrics struct {
	ops        *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	readBytes  prometheus.Counter
	writeBytes prometheus.Counter
	// The change feed (coherence.go): notices sent to the kernel, and
	// times every long grant was taken back.
	feedNotices *prometheus.CounterVec
	listReads   *prometheus.CounterVec
	feedLosses  *prometheus.CounterVec
	epochs      prometheus.Counter
	// Lookups of names missing from a directory whose every name the
	// mount knows (listings.go), answered without a request.
	localLookups prometheus.Counter
	staleNames   prometheus.Counter
}

// NewMetrics registers a mount's metrics of v on reg.
func NewMetrics(reg prometheus.Registerer, v *client.Volume) (*Metrics, error) {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_fuse_requests_total", Help: "FUSE requests served, by operation and errno (0: success).",
		}, []string{"op", "errno"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cairn_fuse_request_seconds", Help: "Latency of FUSE requests by operation.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}, []string{"op"}),
		readBytes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_fuse_read_bytes_total", Help: "Bytes returned by FUSE reads."}),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_fuse_write_bytes_total", Help: "Bytes accepted by FUSE writes."}),
		localLookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_fuse_local_negative_lookups_total", Help: "Lookups of names missing from a directory this mount made and knows every name of, answered without a request.",
		}),
		staleNames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_fuse_stale_names_total", Help: "Lookups that found a file under a new name while the kernel held an old one another client had renamed: the file got a new generation (stalenames.go).",
		}),
		feedNotices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_fuse_feed_invalidations_total", Help: "Names and inodes the kernel was told to drop because another client changed them (change feed).",
		}, []string{"kind"}),
		listReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_fuse_listing_reads_total", Help: "Directories read to answer lookups of missing names without a request (listings.go), by outcome: kept (the read stood), spoiled (another client changed a name there meanwhile, an operation of this mount there failed, or the feed was lost), too_large, failed.",
		}, []string{"outcome"}),
		feedLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_fuse_feed_losses_total", Help: "Times every long-cached name and attribute was dropped: the change feed fell behind (behind), or a partition could not say what changed (reset).",
		}, []string{"why"}),
		epochs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_fuse_name_epochs_total", Help: "Times the kernel was made to check every name it cached (FUSE_NOTIFY_INC_EPOCH) when the mount took back its long grants.",
		}),
	}
	cs := []prometheus.Collector{
		m.ops, m.latency, m.readBytes, m.writeBytes, m.feedNotices, m.listReads, m.feedLosses, m.epochs, m.localLookups, m.staleNames,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_data_sent_bytes_total", Help: "File bytes written to data nodes."},
			func() float64 { return float64(v.Stats().BytesToData) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_data_received_bytes_total", Help: "File bytes read from data nodes."},
			func() float64 { return float64(v.Stats().BytesFromData) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_meta_requests_total", Help: "Requests sent to meta partitions (every attempt)."},
			func() float64 { return float64(v.Stats().MetaRequests) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_client_metadata_bytes", Help: "Estimated memory the client library holds for metadata (routing view, directory layout cache; not the kernel's caches)."},
			func() float64 { return float64(v.Stats().MetadataBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_chunk_dedup_bytes_total", Help: "Bytes of new chunks of chunked files not sent because the volume stored them already."},
			func() float64 { return float64(v.Stats().DedupBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_client_chunk_cache_bytes", Help: "Bytes of chunk contents in the client's chunk cache."},
			func() float64 { return float64(v.Stats().ChunkCache.Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_chunk_cache_hits_total", Help: "Chunk reads served from the client's chunk cache."},
			func() float64 { return float64(v.Stats().ChunkCache.Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_chunk_cache_misses_total", Help: "Chunk reads that fetched from data nodes."},
			func() float64 { return float64(v.Stats().ChunkCache.Misses) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_client_file_cache_bytes", Help: "Bytes of small files' contents in the client's file cache."},
			func() float64 { return float64(v.Stats().FileCache.Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_file_cache_hits_total", Help: "Reads of small files served from the client's file cache."},
			func() float64 { return float64(v.Stats().FileCache.Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_file_cache_misses_total", Help: "Reads of small files that fetched the file from data nodes."},
			func() float64 { return float64(v.Stats().FileCache.Misses) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_client_disk_cache_bytes", Help: "Bytes of files' contents in the client's disk cache (-o cache_size_mb)."},
			func() float64 { return float64(v.Stats().DiskCache.Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_disk_cache_hits_total", Help: "Reads served from the client's disk cache."},
			func() float64 { return float64(v.Stats().DiskCache.Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_disk_cache_misses_total", Help: "Reads the client's disk cache did not hold."},
			func() float64 { return float64(v.Stats().DiskCache.Misses) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_disk_cache_corrupt_total", Help: "Blocks of the client's disk cache that failed their CRC and were read from the data nodes instead."},
			func() float64 { return float64(v.Stats().DiskCache.Corrupt) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_disk_cache_dropped_total", Help: "Blocks the client's disk cache did not keep (queue full, no room, a write error)."},
			func() float64 { return float64(v.Stats().DiskCache.Dropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_client_data_write_failures_total", Help: "Data writes that failed on a partition and moved to another."},
			func() float64 { return float64(v.Stats().Data.WriteFailures) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(op string, start time.Time, st fuse.Status) {
	m.ops.WithLabelValues(op, strconv.Itoa(int(st))).Inc()
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (m *Metrics) invalidated(names, inodes int) {
	if m == nil {
		return
	}
	m.feedNotices.WithLabelValues("name").Add(float64(names))
	m.feedNotices.WithLabelValues("inode").Add(float64(inodes))
}

func (m *Metrics) listingRead(outcome string) {
	if m != nil {
		m.listReads.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) feedLost(why string) {
	if m != nil {
		m.feedLosses.WithLabelValues(why).Inc()
	}
}

func (m *Metrics) epochBumped() {
	if m != nil {
		m.epochs.Inc()
	}
}

func (m *Metrics) staleName() {
	if m != nil {
		m.staleNames.Inc()
	}
}

func (m *Metrics) answeredLocally() {
	if m != nil {
		m.localLookups.Inc()
	}
}
