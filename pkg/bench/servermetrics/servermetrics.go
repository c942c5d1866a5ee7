// Package servermetrics reads the meta nodes' own counters for cairn bench:
// it fetches every meta node's Prometheus /metrics endpoint (plain HTTP,
// text exposition format), sums the series of the metrics below across
// label sets and nodes, and turns two readings taken around a benchmark
// phase into figures such as "metadata requests per open, from the meta
// nodes' metrics". Unlike the client's own counts, these include every
// client of the cluster during the phase.
//
// A node that cannot be read, or that does not export a metric, is never
// counted as zero: the figures that depend on it are left out and a note
// says why.
package servermetrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The meta nodes' metrics this package reads.
const (
	// ClientRequests counts requests received from clients, one series per
	// RPC (label rpc); every series is summed.
	ClientRequests = "cairn_meta_client_requests_total"
	// NSFetches counts namespace-replica entries a meta node fetched from
	// other partitions (server-to-server lookups, not in ClientRequests).
	NSFetches = "cairn_meta_ns_fetches_total"
	// NSEntries and NSBytes are gauges: entries and bytes of a meta node's
	// namespace replica.
	NSEntries = "cairn_meta_ns_replica_entries"
	NSBytes   = "cairn_meta_ns_replica_bytes"
	// Proposals counts the Raft proposals the meta partitions' leaders
	// made (each carries one or more merged Txns).
	Proposals = "cairn_meta_proposals_total"
	// Syncs counts the synced log writes of the meta nodes' Raft hosts:
	// one per round that needed durability, whatever the number of groups
	// in it, on every replica (a proposal on three replicas is at least
	// three).
	Syncs = "cairn_raft_sync_commits_total"
)

// Names lists the metrics a Scraper keeps.
var Names = []string{ClientRequests, NSFetches, NSEntries, NSBytes, Proposals, Syncs}

// Figure names (report extras) derived from two samples.
const (
	FigRequests        = "server_meta_requests"
	FigRequestsPerOpen = "server_meta_requests_per_open"
	FigRequestsPerOp   = "server_meta_requests_per_op"
	FigFetches         = "server_ns_fetches"
	FigFetchesPerOpen  = "server_ns_fetches_per_open"
	FigFetchesPerOp    = "server_ns_fetches_per_op"
	FigEntries         = "server_ns_replica_entries"
	FigBytes           = "server_ns_replica_bytes"
	FigBytesPerEntry   = "server_ns_replica_bytes_per_entry"
	FigNodes           = "server_meta_nodes"
	FigProposals       = "server_raft_proposals"
	FigProposalsPerOp  = "server_raft_proposals_per_op"
	FigSyncs           = "server_raft_syncs"
	FigSyncsPerOp      = "server_raft_syncs_per_op"
)

// maxBody bounds one /metrics answer.
const maxBody = 32 << 20

// Parse reads the Prometheus text exposition format from r and returns,
// for every name of names the input has samples of, the sum of its samples
// over all label sets (counters, gauges and untyped values; histograms and
// summaries are not summed). Names absent from the input are absent from
// the map. A malformed input is an error naming its line.
func Parse(r io.Reader, names []string) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := map[string]float64{}
	for _, n := range names {
		mf, ok := fams[n]
		if !ok {
			continue
		}
		var sum float64
		seen := false
		for _, m := range mf.GetMetric() {
			v, ok := value(mf.GetType(), m)
			if !ok {
				continue
			}
			sum += v
			seen = true
		}
		if seen {
			out[n] = sum
		}
	}
	return out, nil
}

func value(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), m.GetCounter() != nil
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), m.GetGauge() != nil
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), m.GetUntyped() != nil
	}
	return 0, false
}

// Node is one node's reading.
type Node struct {
	Addr string
	// Values holds the metrics of Names the node exported, each summed over
	// its label sets.
	Values map[string]float64
	// Err says why the node could not be read; Values is nil then.
	Err error
}

// Sample is one reading of every meta node of a volume.
type Sample struct {
	// At is when the reading was taken.
	At time.Time
	// Nodes are the nodes read, sorted by address.
	Nodes []Node
	// Err says that the list of nodes could not be read, or not completely
	// (Nodes then holds the ones that could).
	Err error
}

// Scraper reads the metrics of a set of nodes. Its zero value is not
// usable: Addrs is required.
type Scraper struct {
	// Addrs lists the HOST:PORT endpoints to read. It is called for every
	// sample; it may return addresses together with an error saying that
	// the list is incomplete.
	Addrs func(ctx context.Context) ([]string, error)
	// Client does the HTTP requests (default: a client without proxies).
	Client *http.Client
	// Timeout bounds reading one node (default 5 s).
	Timeout time.Duration
}

var defaultClient = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}

// Sample reads every node in parallel. It never fails as a whole: what
// could not be read is recorded in the sample.
func (s *Scraper) Sample(ctx context.Context) Sample {
	out := Sample{At: time.Now()}
	addrs, err := s.Addrs(ctx)
	if err != nil {
		out.Err = err
	}
	addrs = slices.Clone(addrs)
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	out.Nodes = make([]Node, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := s.read(ctx, a)
			out.Nodes[i] = Node{Addr: a, Values: v, Err: err}
		}()
	}
	wg.Wait()
	if out.Err == nil && len(addrs) == 0 {
		out.Err = fmt.Errorf("no meta node to read")
	}
	return out
}

func (s *Scraper) read(ctx context.Context, addr string) (map[string]float64, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	// The text format, not the protobuf or OpenMetrics ones.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	c := s.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
	v, err := Parse(io.LimitReader(resp.Body, maxBody), Names)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return v, nil
}

// Figures compares two samples taken before and after a phase that opened
// opens files and measured ops operations (0: unknown or none) and returns
// the figures with notes on what is missing. Counters (requests, namespace fetches) are the increase
// over the phase summed over the nodes read both times; gauges (namespace
// replica entries and bytes) are the sum at the end. A figure is left out,
// and a note says why, when a node it depends on could not be read, does
// not export the metric, or its counter went down (a restart).
func Figures(before, after Sample, opens, ops int64) (map[string]float64, []string) {
	figs := map[string]float64{}
	var notes []string
	note := func(format string, a ...any) { notes = append(notes, fmt.Sprintf(format, a...)) }
	if before.Err != nil {
		note("meta nodes' metrics before the phase: %v", before.Err)
	}
	if after.Err != nil {
		note("meta nodes' metrics after the phase: %v", after.Err)
	}
	b := map[string]Node{}
	for _, n := range before.Nodes {
		b[n.Addr] = n
	}
	a := map[string]Node{}
	for _, n := range after.Nodes {
		a[n.Addr] = n
	}
	complete := before.Err == nil && after.Err == nil
	var both []string
	for _, n := range after.Nodes {
		if _, ok := b[n.Addr]; ok {
			both = append(both, n.Addr)
		} else {
			complete = false
			note("meta node %s was not a meta node of the volume before the phase: its counters are not in the figures", n.Addr)
		}
	}
	for _, n := range before.Nodes {
		if _, ok := a[n.Addr]; !ok {
			complete = false
			note("meta node %s was no longer a meta node of the volume after the phase: its counters are not in the figures", n.Addr)
		}
	}
	for _, addr := range both {
		if err := b[addr].Err; err != nil {
			complete = false
			note("meta node %s could not be read before the phase: %v", addr, err)
		}
		if err := a[addr].Err; err != nil {
			complete = false
			note("meta node %s could not be read after the phase: %v", addr, err)
		}
	}
	// counter sums a counter's increase over the nodes read both times; ok
	// is false (and a note says why) when a node lacks it or it went down.
	counter := func(name string) (float64, bool) {
		var sum float64
		ok, seenAny := complete, false
		var lacking []string
		for _, addr := range both {
			bn, an := b[addr], a[addr]
			if bn.Err != nil || an.Err != nil {
				continue
			}
			bv, bok := bn.Values[name]
			av, aok := an.Values[name]
			if !bok || !aok {
				lacking = append(lacking, addr)
				ok = false
				continue
			}
			seenAny = true
			if av < bv {
				note("%s of meta node %s went down during the phase (%s to %s: restarted?)", name, addr, fmtNum(bv), fmtNum(av))
				ok = false
				continue
			}
			sum += av - bv
		}
		if len(lacking) > 0 {
			if seenAny {
				note("meta node(s) %s export no %s", strings.Join(lacking, ", "), name)
			} else {
				note("the meta nodes export no %s (built before it existed?)", name)
			}
		}
		return sum, ok
	}
	gauge := func(name string) (float64, bool) {
		var sum float64
		ok := after.Err == nil && len(after.Nodes) > 0
		var lacking []string
		for _, n := range after.Nodes {
			if n.Err != nil {
				ok = false
				if _, inBoth := b[n.Addr]; !inBoth {
					note("meta node %s could not be read after the phase: %v", n.Addr, n.Err)
				}
				continue
			}
			v, has := n.Values[name]
			if !has {
				lacking = append(lacking, n.Addr)
				ok = false
				continue
			}
			sum += v
		}
		if len(lacking) > 0 && len(lacking) < len(after.Nodes) {
			note("meta node(s) %s export no %s", strings.Join(lacking, ", "), name)
		} else if len(lacking) > 0 {
			note("the meta nodes export no %s (built before it existed?)", name)
		}
		return sum, ok
	}
	if len(both) > 0 {
		figs[FigNodes] = float64(len(both))
	}
	for _, m := range []struct {
		read        func(string) (float64, bool)
		metric, fig string
	}{
		{counter, ClientRequests, FigRequests}, {counter, NSFetches, FigFetches},
		{gauge, NSEntries, FigEntries}, {gauge, NSBytes, FigBytes},
		{counter, Proposals, FigProposals}, {counter, Syncs, FigSyncs},
	} {
		if v, ok := m.read(m.metric); ok {
			figs[m.fig] = v
		}
	}
	Derive(figs, opens, ops)
	return figs, dedupe(notes)
}

// Derive (re)computes the relative figures from the raw ones in figs:
// requests and fetches per open (when opens > 0), requests, fetches, Raft
// proposals and synced log writes per operation (when ops > 0), and
// namespace replica bytes per entry (when there are entries).
func Derive(figs map[string]float64, opens, ops int64) {
	for _, f := range []struct {
		raw     string
		per     string
		divisor int64
	}{
		{FigRequests, FigRequestsPerOpen, opens}, {FigFetches, FigFetchesPerOpen, opens},
		{FigRequests, FigRequestsPerOp, ops}, {FigFetches, FigFetchesPerOp, ops},
		{FigProposals, FigProposalsPerOp, ops}, {FigSyncs, FigSyncsPerOp, ops},
	} {
		if v, ok := figs[f.raw]; ok && f.divisor > 0 {
			figs[f.per] = v / float64(f.divisor)
		}
	}
	if e, ok := figs[FigEntries]; ok && e > 0 {
		if v, ok := figs[FigBytes]; ok {
			figs[FigBytesPerEntry] = v / e
		}
	}
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

func dedupe(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
