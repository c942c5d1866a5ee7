package sim

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
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
	simLog   = flag.Bool("simlog", false, "print the servers' logs of every run")
)

// summary adds up the runs of TestSeeds.
type summary struct {
	mu        sync.Mutex
	runs      int
	simulated time.Duration
	ops       int
	faults    map[FaultKind]int
	failed    []uint64
}

func (s *summary) add(res *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	s.simulated += res.Simulated
	s.ops += len(res.Ops)
	for _, f := range res.Faults {
		s.faults[f.Kind]++
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

// TestSeeds runs -seeds seeded runs from -seed, two at a time: a cluster of
// the default layout, three client hosts running the fault run's workload
// for -simtime of simulated time under the seed's faults, as long to
// settle, final reads, and the checker over the history. A failing seed is
// run once more, to say whether it replays, and the test goes on with the
// other seeds. With -v every seed prints a line as it ends.
func TestSeeds(t *testing.T) {
	sum := &summary{faults: map[FaultKind]int{}}
	next := make(chan uint64)
	go func() {
		defer close(next)
		for seed := *seedFrom; seed < *seedFrom+uint64(*seeds); seed++ {
			next <- seed
		}
	}()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range next {
				checkSeed(t, seed, sum)
			}
		}()
	}
	wg.Wait()
	t.Logf("summary: %s", sum)
}

// checkSeed runs one seed, and once more if it fails, and reports it.
func checkSeed(t *testing.T, seed uint64, sum *summary) {
	res, rep, err := runSeed(t, seed)
	if res != nil {
		sum.add(res)
	}
	if err == nil && rep.Valid() {
		return
	}
	sum.mu.Lock()
	sum.failed = append(sum.failed, seed)
	sum.mu.Unlock()
	replay := fmt.Sprintf("go test ./test/sim -run 'TestSeeds$' -seed %d -seeds 1 -simtime %v -pause %v -simlog -v", seed, *simTime, *pause)
	var faults strings.Builder
	if res != nil {
		for _, f := range res.Faults {
			fmt.Fprintf(&faults, "\n  fault: %s", f)
		}
	}
	_, again, err2 := runSeed(t, seed)
	replays := "it failed again when run a second time"
	if err2 == nil && again.Valid() {
		replays = "it passed when run a second time: the goroutines ran in another order"
	}
	if err != nil {
		t.Errorf("seed %d: %v (%s)%s\nreplay: %s", seed, err, replays, faults.String(), replay)
		return
	}
	t.Errorf("seed %d: %s (%s)%s\nreplay: %s", seed, rep, replays, faults.String(), replay)
}

// runSeed runs one seed in a bubble of its own and checks its history.
func runSeed(t *testing.T, seed uint64) (*Result, checker.Report, error) {
	dir := t.TempDir()
	var logs bytes.Buffer
	var res *Result
	var runErr error
	real := time.Now()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		cfg := RunConfig{Seed: seed, Dir: dir, Log: io.Writer(&logs), Duration: *simTime, Settle: *simTime, Pause: *pause}
		if *simLog {
			cfg.Log = os.Stderr
		}
		res, runErr = Run(ctx, cfg)
	})
	if runErr != nil {
		return nil, checker.Report{}, runErr
	}
	rep := checker.Check(res.Ops, checker.Options{Timeout: time.Minute})
	t.Logf("seed %d: %d faults, %v simulated in %v: %s", seed, len(res.Faults), res.Simulated.Round(time.Second), time.Since(real).Round(time.Millisecond), rep)
	return res, rep, nil
}
