package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairnfs/cairn/pkg/checker"
)

var (
	seeds    = flag.Int("seeds", 20, "seeded runs of TestSeeds")
	seedFrom = flag.Uint64("seed", 1, "first seed of TestSeeds")
	simTime  = flag.Duration("simtime", 30*time.Second, "simulated time of each run's workload and faults")
	pause    = flag.Duration("pause", 100*time.Millisecond, "each worker's pause between two operations, in simulated time")
	simLog   = flag.Bool("simlog", false, "print the servers' logs of the run (TestSeed)")
	one      = flag.Uint64("one", 0, "the seed TestSeed runs (0: TestSeed is skipped)")
	kinds    = flag.String("faults", "", "the kinds of faults drawn, comma-separated (empty: every kind; none: no fault)")
)

// faultFlag reads -faults.
func faultFlag() (out []FaultKind, none bool, err error) {
	switch *kinds {
	case "":
		return nil, false, nil
	case "none":
		return nil, true, nil
	}
	for _, k := range strings.Split(*kinds, ",") {
		if !slices.Contains(faultKinds, FaultKind(k)) {
			return nil, false, fmt.Errorf("-faults: no fault kind %q (kinds: %v)", k, faultKinds)
		}
		out = append(out, FaultKind(k))
	}
	return out, false, nil
}

// resultMarker starts the line on which TestSeed reports to TestSeeds.
const resultMarker = "cairn-sim-result "

// seedResult is what one seed's process reports.
type seedResult struct {
	Seed      uint64
	Simulated time.Duration
	Real      time.Duration
	Ops       int
	Faults    []Fault
	Anomalies []string // the checker's findings; empty when valid
	Err       string   // the run could not finish
	Kept      string   // where the history and logs of a failed run are
}

func (r seedResult) failed() bool { return r.Err != "" || len(r.Anomalies) > 0 }

// what says why a failed run failed: its error, or the checker's findings.
func (r seedResult) what() string {
	if r.Err != "" {
		return r.Err
	}
	return strings.Join(r.Anomalies, "\n  ")
}

// TestSeed runs the one seed -one names, in this process (a bubble's
// channels must not meet another bubble's through the store's pools, so
// every seed gets a process of its own), checks its history, and reports
// on a line TestSeeds reads. This is the command a failing seed prints to
// replay it, with -simlog for the servers' logs.
func TestSeed(t *testing.T) {
	if *one == 0 {
		t.Skip("runs only the seed -one names (TestSeeds runs it)")
	}
	r := runSeed(t, *one)
	if r.Err == "" && r.Simulated == 0 {
		t.Fatal("no run")
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", resultMarker, b)
	if r.Err != "" {
		t.Fatalf("seed %d: %s", r.Seed, r.Err)
	}
	if len(r.Anomalies) > 0 {
		t.Fatalf("seed %d: %s\n%s", r.Seed, strings.Join(r.Anomalies, "\n"), r.Kept)
	}
}

// runSeed runs one seed in a bubble and checks its history.
func runSeed(t *testing.T, seed uint64) seedResult {
	dir := t.TempDir()
	var logs, hist bytes.Buffer
	var res *Result
	var runErr error
	real := time.Now()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		cfg := RunConfig{Seed: seed, Dir: dir, Log: io.Writer(&logs), History: &hist, Duration: *simTime, Settle: *simTime, Pause: *pause}
		var none bool
		if cfg.Kinds, none, runErr = faultFlag(); runErr != nil {
			return
		}
		if none {
			cfg.MaxFaults = -1
		}
		if *simLog {
			cfg.Log = os.Stderr
		}
		res, runErr = Run(ctx, cfg)
		Drain()
	})
	r := seedResult{Seed: seed, Real: time.Since(real)}
	if runErr != nil {
		r.Err = runErr.Error()
		r.Kept = keep(seed, hist.Bytes(), logs.Bytes())
		return r
	}
	r.Simulated, r.Ops, r.Faults = res.Simulated, len(res.Ops), res.Faults
	rep := checker.Check(res.Ops, checker.Options{Timeout: time.Minute})
	t.Logf("seed %d: %d faults, %v simulated in %v: %s", seed, len(res.Faults), res.Simulated.Round(time.Second), time.Since(real).Round(time.Millisecond), rep)
	for _, a := range rep.Anomalies {
		r.Anomalies = append(r.Anomalies, fmt.Sprintf("%s %s: %s", a.Class, a.Key, a.Detail))
	}
	if r.failed() {
		r.Kept = keep(seed, hist.Bytes(), logs.Bytes())
	}
	return r
}

// keep writes a failed run's history and servers' logs where they outlive
// the test, and says where.
func keep(seed uint64, history, logs []byte) string {
	dir := filepath.Join(os.TempDir(), "cairn-sim", fmt.Sprintf("seed-%d", seed))
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "history.jsonl"), history, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "servers.log"), logs, 0o644)
	}
	if err != nil {
		return fmt.Sprintf("history and logs not kept: %v", err)
	}
	return "history and servers' logs: " + dir
}

// TestSeeds runs -seeds seeds from -seed, each in a process of its own
// (TestSeed), two at a time: a cluster of the default layout, three client
// hosts running the fault run's workload for -simtime of simulated time
// under the seed's faults, as long to settle, final reads, and the checker
// over the history. A failing seed is run once more, to say whether it
// replays, and the test goes on with the other seeds. With -v every seed
// prints a line as it ends, and the test a summary.
func TestSeeds(t *testing.T) {
	if *one != 0 {
		t.Skip("-one runs TestSeed alone")
	}
	sum := &summary{faults: map[FaultKind]int{}}
	all := make([]uint64, 0, *seeds)
	for seed := *seedFrom; seed < *seedFrom+uint64(*seeds); seed++ {
		all = append(all, seed)
	}
	twoAtATime(all, func(seed uint64) { checkSeed(t, seed, sum) })
	t.Logf("summary: %s", sum)
}

// twoAtATime calls f on every item, two at a time (each call runs a
// seed's process, which takes a core).
func twoAtATime[T any](items []T, f func(T)) {
	next := make(chan T)
	go func() {
		defer close(next)
		for _, it := range items {
			next <- it
		}
	}()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				f(it)
			}
		}()
	}
	wg.Wait()
}

// checkSeed runs one seed's process, and once more if it fails, and
// reports it.
func checkSeed(t *testing.T, seed uint64, sum *summary) {
	r := runSeedProcess(seed, *kinds)
	sum.add(r)
	line := fmt.Sprintf("seed %d: %d faults, %v simulated in %v, %d operations", seed, len(r.Faults), r.Simulated.Round(time.Second), r.Real.Round(time.Millisecond), r.Ops)
	if !r.failed() {
		t.Log(line + ": no anomaly")
		return
	}
	replay := replayCommand(seed, *kinds)
	var b strings.Builder
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "\n  fault: %s", f)
	}
	again := runSeedProcess(seed, *kinds)
	replays := "it failed again when run a second time"
	if !again.failed() {
		replays = "it passed when run a second time: the goroutines ran in another order"
	}
	t.Errorf("%s: %s\n(%s)%s\n%s\nreplay: %s", line, r.what(), replays, b.String(), r.Kept, replay)
}

// replayCommand is the command that runs seed again with faults, with
// the servers' logs.
func replayCommand(seed uint64, faults string) string {
	return fmt.Sprintf("go test ./test/sim -run 'TestSeed$' -one %d -simtime %v -pause %v -faults '%s' -simlog -v", seed, *simTime, *pause, faults)
}

// seedTimeout bounds a seed's process. A seed takes about a second of
// real time; one still running after minutes hangs (the simulated clock
// stopped), and the timeout's panic prints every goroutine, which is kept
// with the run's logs.
const seedTimeout = 5 * time.Minute

// runSeedProcess runs TestSeed for seed in a child process, with the
// fault kinds faults (the -faults flag's form), and reads its report.
func runSeedProcess(seed uint64, faults string) seedResult {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSeed$", "-test.v", "-test.timeout", seedTimeout.String(),
		"-one", fmt.Sprint(seed), "-simtime", simTime.String(), "-pause", pause.String(), "-faults", faults)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), resultMarker); ok {
			var r seedResult
			if jerr := json.Unmarshal([]byte(rest), &r); jerr == nil {
				return r
			}
		}
	}
	// No report: the process died (a panic in a server, a deadlock in the
	// bubble). Keep its output.
	tail := out.Bytes()
	if len(tail) > 4000 {
		tail = tail[len(tail)-4000:]
	}
	return seedResult{Seed: seed, Err: fmt.Sprintf("the seed's process ended without a report (%v); the end of its output:\n%s", err, tail),
		Kept: keep(seed, nil, out.Bytes())}
}

// summary adds up the runs of TestSeeds.
type summary struct {
	mu        sync.Mutex
	runs      int
	simulated time.Duration
	ops       int
	faults    map[FaultKind]int
	failed    []uint64
}

func (s *summary) add(r seedResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	s.simulated += r.Simulated
	s.ops += r.Ops
	for _, f := range r.Faults {
		s.faults[f.Kind]++
	}
	if r.failed() {
		s.failed = append(s.failed, r.Seed)
	}
}

func (s *summary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var kinds []string
	total := 0
	for _, k := range faultKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, s.faults[k]))
		total += s.faults[k]
	}
	failed := "none"
	if len(s.failed) > 0 {
		slices.Sort(s.failed)
		failed = fmt.Sprint(s.failed)
	}
	return fmt.Sprintf("%d seeds, %v simulated, %d operations, %d faults (%s); seeds with anomalies or errors: %s",
		s.runs, s.simulated.Round(time.Second), s.ops, total, strings.Join(kinds, ", "), failed)
}
