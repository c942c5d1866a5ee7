package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/lab"
)

var (
	jepsenSeed     = flag.Uint64("lab.seed", 41, "seed of TestLabJepsen's faults and operations (0: from the clock)")
	jepsenDuration = flag.Duration("lab.duration", 90*time.Second, "how long TestLabJepsen injects faults")
)

// TestLabJepsen is the short nemesis run (make jepsen-short): a lab of 5 server
// hosts in 3 zones and 2 client hosts, faults of every kind drawn from a
// seeded schedule for 90 s while workers on both client hosts work through
// their mounts, then the heal, the recovery, the final reads from both
// hosts and the checker. Any anomaly, a cluster that does not recover, or
// a volume fsck does not find clean fails it. make jepsen runs the long one;
// make jepsen-short runs this one alone.
//
// Seed 41 draws isolate, kill, pause, slow, host-down and zone-down faults;
// the other kinds (one-way and bridge cuts, splits, a full disk) come with
// other seeds (-lab.seed) and in make jepsen.
func TestLabJepsen(t *testing.T) {
	dir := labDir(t)
	seed := *jepsenSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *jepsenDuration+10*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Config{Dir: dir, Hosts: 5, Zones: 3, Clients: 2, Binary: cairnBin, Out: testLog{t},
		SmallDisk: []string{"s5"}, MountOptions: []string{"op_timeout=10"}})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "jepsen")
	res, err := l.Jepsen(ctx, lab.JepsenConfig{
		Duration: *jepsenDuration, Seed: seed, Out: out, Progress: testLog{t},
		Nemesis: lab.NemesisConfig{FaultMin: 5 * time.Second, FaultMax: 15 * time.Second, GapMin: 2 * time.Second, GapMax: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	report, _ := os.ReadFile(filepath.Join(out, "report.md"))
	t.Logf("seed %d\n%s", seed, report)
	injected := 0
	for _, e := range res.Events {
		if !e.Heal && e.Err == "" {
			injected++
		}
	}
	if injected < 3 {
		t.Errorf("only %d faults injected in %v", injected, *jepsenDuration)
	}
	if res.Report.OK < 100 {
		t.Errorf("only %d operations succeeded: the workload hardly ran", res.Report.OK)
	}
	if res.Failed() {
		labDiagnose(ctx, t, l, dir)
		// Keep the run's files (the history above all) and the logs:
		// the test's directory goes with it.
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("cairn-jepsen-seed%d-%s", seed, time.Now().UTC().Format("20060102T150405")))
		err := os.CopyFS(keep, os.DirFS(out))
		if err == nil {
			// And every process's log (hosts/<host>/<role>.log).
			logs, _ := filepath.Glob(filepath.Join(dir, "hosts", "*", "*.log"))
			for _, f := range logs {
				host := filepath.Base(filepath.Dir(f))
				if b, rerr := os.ReadFile(f); rerr == nil {
					_ = os.MkdirAll(filepath.Join(keep, "logs", host), 0o755)
					_ = os.WriteFile(filepath.Join(keep, "logs", host, filepath.Base(f)), b, 0o644)
				}
			}
		}
		if err != nil {
			t.Logf("keeping the run's files: %v", err)
		} else {
			t.Logf("the run's files are kept in %s (cairn lab check %s checks them again)", keep, keep)
		}
		t.Fatalf("seed %d: %d anomalies, recovered %v (%s), fsck clean %v; replay with go test ./test/integration -run TestLabJepsen -lab.seed %d",
			seed, len(res.Report.Anomalies), res.Recovered, res.Unrecovered, res.FsckClean, seed)
	}
}
