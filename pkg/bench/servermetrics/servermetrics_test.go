package servermetrics

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const exposition = `# HELP cairn_meta_client_requests_total Requests received from clients.
# TYPE cairn_meta_client_requests_total counter
cairn_meta_client_requests_total{rpc="Path"} 120
cairn_meta_client_requests_total{rpc="Txn"} 30
cairn_meta_client_requests_total{rpc="GetInode"} 7.5e1
# HELP cairn_meta_ns_fetches_total Namespace entries fetched from other partitions.
# TYPE cairn_meta_ns_fetches_total counter
cairn_meta_ns_fetches_total 4
# TYPE cairn_meta_ns_replica_entries gauge
cairn_meta_ns_replica_entries{mp="1"} 10
cairn_meta_ns_replica_entries{mp="2"} 20
# TYPE cairn_meta_ns_replica_bytes gauge
cairn_meta_ns_replica_bytes 2880
# TYPE cairn_grpc_latency_seconds histogram
cairn_grpc_latency_seconds_bucket{le="0.1"} 3
cairn_grpc_latency_seconds_bucket{le="+Inf"} 4
cairn_grpc_latency_seconds_sum 0.2
cairn_grpc_latency_seconds_count 4
go_goroutines 42
`

func TestParse(t *testing.T) {
	got, err := Parse(strings.NewReader(exposition), append(Names, "go_goroutines", "cairn_grpc_latency_seconds", "absent_total"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{ClientRequests: 225, NSFetches: 4, NSEntries: 30, NSBytes: 2880, "go_goroutines": 42}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["absent_total"]; ok {
		t.Error("a metric the input lacks has a value")
	}
	if _, ok := got["cairn_grpc_latency_seconds"]; ok {
		t.Error("a histogram was summed")
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{
		"cairn_meta_client_requests_total{rpc=\"Path\" 12\n",
		"cairn_meta_client_requests_total twelve\n",
		"# TYPE x counter\n# TYPE x gauge\nx 1\n",
	} {
		if _, err := Parse(strings.NewReader(in), Names); err == nil {
			t.Errorf("Parse(%q) succeeded", in)
		}
	}
	got, err := Parse(strings.NewReader(""), Names)
	if err != nil || len(got) != 0 {
		t.Errorf("empty input: %v %v", got, err)
	}
}

// fakeNode is a meta node's /metrics endpoint with settable values.
type fakeNode struct {
	mu     sync.Mutex
	values map[string]float64 // metric -> value; absent metrics are not exported
	status int
	srv    *httptest.Server
}

func newFakeNode(t *testing.T, values map[string]float64) *fakeNode {
	n := &fakeNode{values: values, status: http.StatusOK}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.status != http.StatusOK {
			http.Error(w, "not ready", n.status)
			return
		}
		for _, name := range Names {
			v, ok := n.values[name]
			if !ok {
				continue
			}
			if name == ClientRequests {
				// Two RPCs: the sum is what counts.
				fmt.Fprintf(w, "# TYPE %s counter\n%s{rpc=\"Path\"} %g\n%s{rpc=\"Txn\"} 0\n", name, name, v, name)
				continue
			}
			fmt.Fprintf(w, "%s %g\n", name, v)
		}
	}))
	t.Cleanup(n.srv.Close)
	return n
}

func (n *fakeNode) addr() string { return strings.TrimPrefix(n.srv.URL, "http://") }

func (n *fakeNode) set(name string, v float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.values[name] = v
}

func scraperOf(nodes ...*fakeNode) *Scraper {
	return &Scraper{Addrs: func(context.Context) ([]string, error) {
		var out []string
		for _, n := range nodes {
			out = append(out, n.addr())
		}
		return out, nil
	}, Timeout: 2 * time.Second}
}

func full(req, fetch, entries, bytes float64) map[string]float64 {
	return map[string]float64{ClientRequests: req, NSFetches: fetch, NSEntries: entries, NSBytes: bytes, Proposals: 0, Syncs: 0}
}

func TestScrapeAndFigures(t *testing.T) {
	a, b := newFakeNode(t, full(100, 1, 10, 1000)), newFakeNode(t, full(50, 0, 5, 500))
	s := scraperOf(a, b)
	ctx := context.Background()
	before := s.Sample(ctx)
	if before.Err != nil || len(before.Nodes) != 2 {
		t.Fatalf("sample: %+v", before)
	}
	a.set(ClientRequests, 160)
	b.set(ClientRequests, 90) // 100 requests in all
	a.set(NSFetches, 5)       // 4 fetches
	a.set(NSEntries, 20)
	a.set(NSBytes, 2000) // 2500 B over 25 entries at the end
	a.set(Proposals, 300)
	b.set(Proposals, 100) // 400 proposals
	a.set(Syncs, 600)
	b.set(Syncs, 600) // 1200 synced writes (three replicas each)
	figs, notes := Figures(before, s.Sample(ctx), 50, 200)
	if len(notes) != 0 {
		t.Errorf("notes %v", notes)
	}
	want := map[string]float64{FigRequests: 100, FigRequestsPerOpen: 2, FigFetches: 4, FigFetchesPerOpen: 0.08,
		FigRequestsPerOp: 0.5, FigFetchesPerOp: 0.02,
		FigProposals: 400, FigProposalsPerOp: 2, FigSyncs: 1200, FigSyncsPerOp: 6,
		FigEntries: 25, FigBytes: 2500, FigBytesPerEntry: 100, FigNodes: 2}
	for k, v := range want {
		if got, ok := figs[k]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	// Without opens or operations there is nothing per open, the totals remain.
	figs, _ = Figures(before, s.Sample(ctx), 0, 0)
	if _, ok := figs[FigRequestsPerOpen]; ok || figs[FigRequests] != 100 || figs[FigRequestsPerOp] != 0 {
		t.Errorf("no opens: %v", figs)
	}
}

// A node that cannot be read is never a zero: the counts that need it are
// left out and a note names it.
func TestFiguresWithUnreadableNode(t *testing.T) {
	a, b := newFakeNode(t, full(100, 1, 10, 1000)), newFakeNode(t, full(50, 0, 5, 500))
	s := scraperOf(a, b)
	ctx := context.Background()
	before := s.Sample(ctx)
	a.set(ClientRequests, 200)
	b.srv.Close()
	after := s.Sample(ctx)
	figs, notes := Figures(before, after, 10, 0)
	for _, k := range []string{FigRequests, FigRequestsPerOpen, FigFetches, FigEntries, FigBytes, FigBytesPerEntry} {
		if v, ok := figs[k]; ok {
			t.Errorf("%s = %v although a node could not be read", k, v)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], b.addr()) || !strings.Contains(notes[0], "could not be read after the phase") {
		t.Errorf("notes %q", notes)
	}

	// An HTTP error is a failure too, with the server's message.
	c := newFakeNode(t, full(1, 1, 1, 1))
	c.status = http.StatusServiceUnavailable
	smp := scraperOf(c).Sample(ctx)
	if err := smp.Nodes[0].Err; err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("HTTP 503: %v", err)
	}
}

func TestFiguresNotes(t *testing.T) {
	ctx := context.Background()
	t.Run("missing metric", func(t *testing.T) {
		a := newFakeNode(t, map[string]float64{ClientRequests: 1, NSEntries: 1, NSBytes: 1, Proposals: 1, Syncs: 1})
		b := newFakeNode(t, full(1, 1, 1, 1))
		s := scraperOf(a, b)
		figs, notes := Figures(s.Sample(ctx), s.Sample(ctx), 1, 0)
		if _, ok := figs[FigFetches]; ok {
			t.Errorf("fetches without every node's counter: %v", figs)
		}
		if figs[FigRequests] != 0 || len(notes) != 1 || !strings.Contains(notes[0], a.addr()+" export no "+NSFetches) {
			t.Errorf("figs %v notes %q", figs, notes)
		}
	})
	t.Run("old meta nodes", func(t *testing.T) {
		a := newFakeNode(t, map[string]float64{})
		s := scraperOf(a)
		figs, notes := Figures(s.Sample(ctx), s.Sample(ctx), 1, 0)
		if len(figs) != 1 || figs[FigNodes] != 1 {
			t.Errorf("figs %v", figs)
		}
		if len(notes) != len(Names) || !strings.Contains(notes[0], "the meta nodes export no "+ClientRequests) {
			t.Errorf("notes %q", notes)
		}
	})
	t.Run("restart", func(t *testing.T) {
		a := newFakeNode(t, full(100, 1, 1, 1))
		s := scraperOf(a)
		before := s.Sample(ctx)
		a.set(ClientRequests, 3)
		figs, notes := Figures(before, s.Sample(ctx), 1, 0)
		if _, ok := figs[FigRequests]; ok || len(notes) != 1 || !strings.Contains(notes[0], "went down") {
			t.Errorf("figs %v notes %q", figs, notes)
		}
	})
	t.Run("node list", func(t *testing.T) {
		a, b := newFakeNode(t, full(1, 1, 1, 1)), newFakeNode(t, full(1, 1, 1, 1))
		before := scraperOf(a).Sample(ctx)
		figs, notes := Figures(before, scraperOf(a, b).Sample(ctx), 1, 0)
		if _, ok := figs[FigRequests]; ok || len(notes) != 1 || !strings.Contains(notes[0], "was not a meta node of the volume before") {
			t.Errorf("figs %v notes %q", figs, notes)
		}
		broken := &Scraper{Addrs: func(context.Context) ([]string, error) { return nil, fmt.Errorf("no master leader") }}
		smp := broken.Sample(ctx)
		figs, notes = Figures(smp, smp, 1, 0)
		if len(figs) != 0 || len(notes) != 2 || !strings.Contains(notes[0], "no master leader") {
			t.Errorf("figs %v notes %q", figs, notes)
		}
	})
}

// A node that does not answer is bounded by the scraper's timeout.
func TestScrapeTimeout(t *testing.T) {
	stuck := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stuck)
	s := &Scraper{Addrs: func(context.Context) ([]string, error) { return []string{strings.TrimPrefix(srv.URL, "http://")}, nil },
		Timeout: 200 * time.Millisecond}
	start := time.Now()
	smp := s.Sample(context.Background())
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("sample took %s", took)
	}
	if smp.Nodes[0].Err == nil {
		t.Error("a node that never answered was read")
	}
}

func TestDerive(t *testing.T) {
	figs := map[string]float64{FigRequests: 300, FigFetches: 30, FigEntries: 0, FigBytes: 0}
	Derive(figs, 100, 300)
	if figs[FigRequestsPerOpen] != 3 || figs[FigFetchesPerOpen] != 0.3 || figs[FigRequestsPerOp] != 1 || figs[FigFetchesPerOp] != 0.1 {
		t.Errorf("%v", figs)
	}
	if _, ok := figs[FigBytesPerEntry]; ok {
		t.Errorf("bytes per entry of no entries: %v", figs)
	}
}
