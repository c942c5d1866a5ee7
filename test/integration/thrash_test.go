package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestThrash injects one fault at a time into a default cairn up cluster
// (3 meta nodes, 3 data nodes) under a write load through the mount: every
// few seconds a random meta or data node is killed with SIGKILL or paused
// with SIGSTOP, and after a few seconds restarted or resumed. At the end,
// with every node back, the cluster must heal by itself, every file whose
// write and fsync succeeded must read back intact (0 mismatches), and new
// writes must succeed. Operations that failed while replicas were lost are
// counted, not failures: with one fault at a time they are rare.
//
// CAIRN_THRASH sets how long faults are injected (default 40s, as in CI;
// make thrash runs 10 minutes). CAIRN_THRASH_DIR, if set, is where the
// cluster goes instead of a temporary directory, kept afterwards with
// its logs.
func TestThrash(t *testing.T) {
	length := 40 * time.Second
	if s := os.Getenv("CAIRN_THRASH"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("CAIRN_THRASH=%q: want a positive duration such as 10m", s)
		}
		length = d
	}
	base := os.Getenv("CAIRN_THRASH_DIR")
	if base == "" {
		base = t.TempDir()
	}
	dir := filepath.Join(base, "thrash")
	startUp(t, dir)
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	procs := map[string]*victimProc{}
	var names []string
	for _, n := range st.Nodes {
		if n.Role == "meta" || n.Role == "data" {
			v := victim(t, dir, st, n.ID, n.Role)
			procs[v.name] = v
			names = append(names, v.name)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	t.Logf("thrashing %d nodes for %s (seed from the clock; the fault log follows)", len(names), length)

	l := startLoad(filepath.Join(mnt, "load"), 3)
	end := time.Now().Add(length)
	var faults []string
	for time.Now().Before(end) {
		v := procs[names[rng.IntN(len(names))]]
		hold := 2*time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
		if rng.IntN(2) == 0 {
			v.kill()
			time.Sleep(hold)
			v.restart()
			faults = append(faults, fmt.Sprintf("%s kill -9 for %s", v.name, hold.Round(time.Millisecond)))
		} else {
			v.signal(syscall.SIGSTOP)
			time.Sleep(hold)
			v.signal(syscall.SIGCONT)
			faults = append(faults, fmt.Sprintf("%s SIGSTOP for %s", v.name, hold.Round(time.Millisecond)))
		}
		t.Log(faults[len(faults)-1])
		time.Sleep(2*time.Second + time.Duration(rng.IntN(3000))*time.Millisecond)
	}
	files, errs, longest, ops := l.end()
	took := waitHealthy(t, dir, 2*time.Minute)
	mismatches := verify(t, files)
	t.Logf("thrash: %d faults, %d operations (%d acknowledged files, %d failed), longest operation %s, healed %s after the last fault, %d mismatches",
		len(faults), ops, len(files), len(errs), longest.Round(time.Millisecond), took.Round(time.Millisecond), mismatches)
	if len(errs) > 0 {
		t.Logf("failed operations (first 10):\n%s", strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	if mismatches > 0 {
		t.Fatalf("%d of %d acknowledged files differ", mismatches, len(files))
	}
	if err := writeSync(filepath.Join(mnt, "load", "after"), []byte("after the thrash\n")); err != nil {
		t.Fatalf("a write after the thrash: %v", err)
	}
}
