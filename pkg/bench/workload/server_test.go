package workload

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/servermetrics"
)

// fakeServers is a ServerSampler whose one meta node has received 1000
// more client requests and 10 more namespace fetches at every sample.
type fakeServers struct {
	mu      sync.Mutex
	samples int
	fail    bool // every sample after the first fails
}

func (f *fakeServers) SampleServers(context.Context) servermetrics.Sample {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.samples++
	n := servermetrics.Node{Addr: "meta-1:9100", Values: map[string]float64{
		servermetrics.ClientRequests: float64(1000 * f.samples),
		servermetrics.NSFetches:      float64(10 * f.samples),
		servermetrics.NSEntries:      50,
		servermetrics.NSBytes:        5000,
		servermetrics.Proposals:      float64(300 * f.samples),
		servermetrics.Syncs:          float64(900 * f.samples),
	}}
	if f.fail && f.samples > 1 {
		n = servermetrics.Node{Addr: "meta-1:9100", Err: os.ErrDeadlineExceeded}
	}
	return servermetrics.Sample{At: time.Now(), Nodes: []servermetrics.Node{n}}
}

// The engine reads the servers' metrics around every phase and divides
// their increase by the files the phase opened, merged over processes.
func TestServerFigures(t *testing.T) {
	f, _ := openTemp(t, false)
	spec, err := Resolve("dl-traversal", map[string]string{"fanout": "2", "depth": "2", "files_per_dir": "5", "file_size": "1KiB",
		"epochs": "2", "threads": "2"})
	if err != nil {
		t.Fatal(err)
	}
	servers := &fakeServers{}
	ctx := context.Background()
	r, err := NewRunner(f, spec, Placement{Worker: 0, Workers: 1, Dir: "rep"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.SampleServersWith(servers)
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	res := r.Run(ctx)
	if res.Error != "" || len(res.Phases) != 2 {
		t.Fatalf("%+v", res)
	}
	for _, p := range res.Phases {
		x := p.Extra
		// 20 files read, one open each; 1000 requests and 10 fetches per phase.
		if x["opens"] != 20 || x[servermetrics.FigRequests] != 1000 || x[servermetrics.FigRequestsPerOpen] != 50 ||
			x[servermetrics.FigFetchesPerOpen] != 0.5 || x[servermetrics.FigBytesPerEntry] != 100 || len(p.Notes) != 0 {
			t.Errorf("%s: extra %v notes %v", p.Name, x, p.Notes)
		}
		if _, ok := x["meta_requests"]; ok {
			t.Errorf("%s: a posix target has client request counts: %v", p.Name, x)
		}
	}
	if servers.samples != 4 {
		t.Errorf("%d samples for 2 phases", servers.samples)
	}

	// Two processes that each opened 20 files over the same window: the
	// servers' count is the cluster's, the opens add up.
	m := MergePhases([]PhaseResult{res.Phases[0], res.Phases[0]})
	if m.Extra["opens"] != 40 || m.Extra[servermetrics.FigRequests] != 1000 || m.Extra[servermetrics.FigRequestsPerOpen] != 25 {
		t.Errorf("merged %v", m.Extra)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}

	// A meta node that cannot be read: a note, no count.
	servers = &fakeServers{fail: true}
	r, err = NewRunner(f, spec, Placement{Worker: 0, Workers: 1, Dir: "rep2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.SampleServersWith(servers)
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	res = r.Run(ctx)
	p := res.Phases[0]
	if _, ok := p.Extra[servermetrics.FigRequestsPerOpen]; ok || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "meta-1:9100 could not be read after the phase") {
		t.Errorf("extra %v notes %q", p.Extra, p.Notes)
	}
	if p.Error != "" || res.Error != "" {
		t.Errorf("unreadable metrics failed the phase: %q %q", p.Error, res.Error)
	}
	m = MergePhases([]PhaseResult{p, p})
	if len(m.Notes) != 1 {
		t.Errorf("merged notes %q", m.Notes)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := CleanupShared(f, spec, "rep2"); err != nil {
		t.Fatal(err)
	}
}

// A kept tree (key tree) is built once: later runs and targets find it
// complete and leave it as it is, and cleanup does not remove it.
func TestDLKeptTree(t *testing.T) {
	f, dir := openTemp(t, false)
	spec, err := Resolve("dl-traversal", map[string]string{"fanout": "3", "depth": "2", "files_per_dir": "4", "file_size": "uniform(1KiB,2KiB)",
		"epochs": "1", "threads": "2", "tree": "trees/t1"})
	if err != nil {
		t.Fatal(err)
	}
	ph := merged(runWorkers(t, f, spec, 2))
	if o := op(ph["epoch-1"], "read"); o.Count != 36 || o.Errors != 0 {
		t.Fatalf("first run: %d reads, %d errors", o.Count, o.Errors)
	}
	last := filepath.Join(dir, "trees/t1/d2/d2/f.3")
	if _, err := os.Stat(last); err != nil {
		t.Fatalf("the kept tree was removed: %v", err)
	}
	// Make the files look old: a rebuild would give them a new mtime.
	old := time.Now().Add(-time.Hour)
	err = filepath.Walk(filepath.Join(dir, "trees"), func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
	// One leaf left incomplete (its last file missing) is rebuilt.
	if err := os.Remove(filepath.Join(dir, "trees/t1/d0/d1/f.3")); err != nil {
		t.Fatal(err)
	}
	ph = merged(runWorkers(t, f, spec, 1))
	if o := op(ph["epoch-1"], "read"); o.Count != 36 || o.Errors != 0 {
		t.Fatalf("second run: %d reads, %d errors", o.Count, o.Errors)
	}
	st, err := os.Stat(last)
	if err != nil || math.Abs(st.ModTime().Sub(old).Seconds()) > 1 {
		t.Errorf("a complete leaf was rewritten: %v %v", st.ModTime(), err)
	}
	st, err = os.Stat(filepath.Join(dir, "trees/t1/d0/d1/f.0"))
	if err != nil || st.ModTime().Before(time.Now().Add(-time.Minute)) {
		t.Errorf("the incomplete leaf was not rebuilt: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "trees" {
		t.Errorf("left behind besides the tree: %v", ents)
	}
	if _, err := Resolve("dl-traversal", map[string]string{"tree": "../x"}); err == nil {
		t.Error("a tree outside the target was accepted")
	}
	if _, err := Resolve("dl-traversal", map[string]string{"tree": "."}); err == nil {
		t.Error("the target's root as the tree was accepted")
	}
}

// Setup reports how far it got, for the notes on a long setup.
func TestSetupProgress(t *testing.T) {
	f, _ := openTemp(t, false)
	spec, err := Resolve("dl-traversal", map[string]string{"fanout": "2", "depth": "1", "files_per_dir": "3", "file_size": "1KiB", "threads": "2"})
	if err != nil {
		t.Fatal(err)
	}
	prog := &Progress{}
	r, err := NewRunner(f, spec, Placement{Worker: 0, Workers: 1, Dir: "rep"}, prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := prog.Snapshot(); s.Phase != "setup" || s.Ops != 6 || s.Bytes != 6*1024 {
		t.Errorf("setup progress %+v", s)
	}
	if err := r.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := CleanupShared(f, spec, "rep"); err != nil {
		t.Fatal(err)
	}
}
