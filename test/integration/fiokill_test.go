package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fioKillJob writes sequentially and at random offsets (blocks of 4 KiB to
// 1 MiB, overwrites included) from five jobs at once, stamping a crc32c in
// every block, then reads every block back and checks it. The seq files
// grow as they are written, which tells the test when the writes are well
// under way.
const fioKillJob = fioGlobal + `
[seq]
rw=write
size=64m
numjobs=2

[rand]
rw=randwrite
size=32m
bssplit=4k/30:64k/30:256k/20:1m/20
numjobs=2

[rand-small]
rw=randwrite
bs=4k
size=8m
`

// TestFioVerifySurvivesDataNodeKill is fio's own check of every byte with
// the worst data-node failure on the default layout (cairn up: 3 data
// nodes, 3 replicas): while fio writes through the mount, kill -9 the data
// node that heads the most data partitions (the primary of the chains and
// the Raft leader of the overwrites being written). fio must finish
// without an error and its verify pass must find every block intact. Then
// the node comes back and catches up, the other node heading the most
// partitions is killed, and fio's verify-only pass reads every block again
// from what is left, the rejoined replica included.
func TestFioVerifySurvivesDataNodeKill(t *testing.T) {
	fio := needFio(t)
	dir := filepath.Join(t.TempDir(), "fiokill")
	startUp(t, dir)
	st := waitLeaders(t, dir)
	first := victim(t, dir, st, mostLeading(st, "data"), "data")
	work, job := fioWork(t, filepath.Join(dir, "mnt"), fioKillJob)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, fio, "--directory="+work, job)
	cmd.Dir = work
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Kill once the sequential writers are a quarter through.
	seqWritten := func() int64 {
		var n int64
		for _, name := range []string{"seq.0.0", "seq.1.0"} {
			if fi, err := os.Stat(filepath.Join(work, name)); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	for start := time.Now(); seqWritten() < 32<<20; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("fio ended before the kill (%v):\n%s", err, out.String())
		default:
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("fio wrote %d bytes of its sequential files in 2 minutes", seqWritten())
		}
	}
	first.kill()
	t.Logf("killed %s with %d MiB of the sequential files written", first.name, seqWritten()>>20)
	err := <-done
	report := out.String()
	if ctx.Err() != nil {
		t.Fatalf("fio did not finish within 4 minutes of its start:\n%s", report)
	}
	if err != nil {
		t.Fatalf("fio failed after the kill: %v\n%s", err, report)
	}
	checkFio(t, report, 5)

	// The first victim returns and catches up; the node now heading the
	// most partitions dies; every block is read and checked again.
	first.restart()
	took := waitHealthy(t, dir, 2*time.Minute)
	t.Logf("every partition healthy %s after the restart", took.Round(time.Millisecond))
	st = getStatus(t, dir)
	next := mostLeading(st, "data")
	if next == first.id {
		// Still heading the most: take the next one, so that the rejoined
		// node serves its share of the reads.
		for _, n := range st.Nodes {
			if n.Role == "data" && n.ID != first.id {
				next = n.ID
				break
			}
		}
	}
	second := victim(t, dir, st, next, "data")
	second.kill()
	t.Logf("killed %s after the recovery", second.name)
	report = runBounded(t, 3*time.Minute, work, fio, "--directory="+work, "--verify_only", job)
	checkFio(t, report, 5)
	for _, l := range strings.Split(report, "\n") {
		if strings.Contains(l, "READ:") {
			t.Logf("verify-only pass: %s", strings.TrimSpace(l))
		}
	}
}

// checkFio fails t unless fio's report shows jobs jobs, each with err=0,
// and no verification complaint.
func checkFio(t *testing.T, report string, jobs int) {
	t.Helper()
	for _, l := range strings.Split(report, "\n") {
		if strings.Contains(l, "verify") && (strings.Contains(l, "bad") || strings.Contains(l, "error")) {
			t.Errorf("fio: %s", l)
		}
	}
	if n, ok := strings.Count(report, "err= "), strings.Count(report, "err= 0"); n != jobs || ok != jobs {
		t.Fatalf("fio reported %d jobs, %d without an error, want %d of each:\n%s", n, ok, jobs, report)
	}
}
