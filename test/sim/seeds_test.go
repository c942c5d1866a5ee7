package sim

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairnfs/cairn/pkg/checker"
)

var (
	seeds    = flag.Int("seeds", 3, "seeded runs of TestSeeds")
	seedFrom = flag.Uint64("seed", 1, "first seed of TestSeeds")
	simLog   = flag.Bool("simlog", false, "print the servers' logs of every run")
)

// TestSeeds runs -seeds seeded runs from -seed: a cluster of the default
// layout, three client hosts running the fault run's workload for a
// simulated minute under the seed's faults, a simulated minute to settle,
// final reads, and the checker over the history.
func TestSeeds(t *testing.T) {
	for seed := *seedFrom; seed < *seedFrom+uint64(*seeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runSeed(t, seed) })
	}
}

func runSeed(t *testing.T, seed uint64) {
	dir := t.TempDir()
	var logs bytes.Buffer
	var res *Result
	var runErr error
	real := time.Now()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		cfg := RunConfig{Seed: seed, Dir: dir, Log: &logs}
		if *simLog {
			cfg.Log = os.Stderr
		}
		res, runErr = Run(ctx, cfg)
	})
	replay := fmt.Sprintf("go test ./test/sim -run 'TestSeeds/seed%d$' -seed %d -seeds 1 -simlog -v", seed, seed)
	if runErr != nil {
		t.Fatalf("seed %d: %v\nreplay: %s", seed, runErr, replay)
	}
	rep := checker.Check(res.Ops, checker.Options{Timeout: time.Minute})
	t.Logf("seed %d: %d faults, %v simulated in %v: %s", seed, len(res.Faults), res.Simulated.Round(time.Second), time.Since(real).Round(time.Millisecond), rep)
	if !rep.Valid() {
		for _, f := range res.Faults {
			t.Logf("fault: %s", f)
		}
		t.Fatalf("seed %d: %d anomalies\nreplay: %s", seed, len(rep.Anomalies), replay)
	}
}
