package progress

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench"
	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// syncBuffer is a bytes.Buffer safe for the display's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run drives a display with a real in-process workload and a silent remote
// worker, as the master does.
func run(t *testing.T, d Display) {
	t.Helper()
	f, err := fsys.Open(context.Background(), "posix:"+t.TempDir(), fsys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workload.Resolve("metadata", map[string]string{"files": "300", "trees": "1", "threads": "2"})
	if err != nil {
		t.Fatal(err)
	}
	live := &workload.Progress{}
	r, err := workload.NewRunner(f, spec, workload.Placement{Workers: 1, Dir: "w"}, live)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	info := bench.RunInfo{Workload: "metadata", Target: "posix:x", Repetition: 1, Repetitions: 1, Index: 1, Total: 1,
		Bound: time.Minute, Workers: []bench.WorkerInfo{{Name: "local", Live: live, Threads: 2}, {Name: "10.0.0.2:7070", Threads: 2}}}
	d.Note("setting up")
	d.Begin(info)
	done := make(chan struct{})
	go func() {
		r.Run(context.Background())
		time.Sleep(300 * time.Millisecond) // at least one refresh
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("workload did not finish")
	}
	ended := make(chan struct{})
	go func() {
		d.End(info, []report.Failure{{Worker: "10.0.0.2:7070", Stage: "run", Error: "no answer"}})
		d.Close()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the display hung at the end of a run")
	}
}

func TestLines(t *testing.T) {
	var out syncBuffer
	run(t, New(&out, Lines, 100*time.Millisecond))
	s := out.String()
	for _, want := range []string{"setting up", "· local: ", "ops/s", "· 10.0.0.2:7070: running", "done, 1 worker failure(s)"} {
		if !strings.Contains(s, want) {
			t.Errorf("lines lack %q:\n%s", want, s)
		}
	}
}

func TestBarsDoNotHang(t *testing.T) {
	var out syncBuffer
	run(t, New(&out, Bars, 0))
	if !strings.Contains(out.String(), "metadata on posix:x") {
		t.Errorf("bars output:\n%s", out.String())
	}
}

func TestModes(t *testing.T) {
	for _, m := range []string{"auto", "bars", "lines", "off"} {
		if _, err := ParseMode(m); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseMode("fancy"); err == nil {
		t.Error("fancy accepted")
	}
	var b bytes.Buffer
	if IsTerminal(&b) {
		t.Error("a buffer is a terminal")
	}
	if _, ok := New(&b, Auto, 0).(*lineDisplay); !ok {
		t.Error("auto on a non-terminal is not lines")
	}
	d := New(&b, Off, 0)
	d.Note("x")
	d.Close()
	if b.Len() != 0 {
		t.Error("off wrote something")
	}
}
