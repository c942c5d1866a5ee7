package integration

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDiskFillsDuringRecovery: a data node whose disk is far smaller than
// one data partition (a 16 MiB tmpfs) joins a cairn up cluster under a
// write load through the mount. The master starts moving a replica to it
// (its share of the existing ones); its disk fills up during the copy. The
// move must be abandoned, the node must receive no other replica while
// it has no room, it must stay up and delete its partial copy, no write
// may fail, every partition must end healthy on the other nodes, and every
// file must read back intact.
func TestDiskFillsDuringRecovery(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "full")
	startUp(t, dir)
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)

	// Every data partition holds more than the small disk: the files go
	// to partitions at random, so some may need more than their share.
	seeded := seedPartitions(t, dir, mnt, 17<<20)
	l := startLoad(filepath.Join(mnt, "load"), 2)

	small := filepath.Join(dir, "small-data")
	must(t, os.MkdirAll(small, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Fatalf("mount a 16 MiB tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", small).Run() })
	before := map[uint64]bool{}
	for _, n := range st.Nodes {
		before[n.ID] = true
	}
	extra := startExtraNode(t, dir, st, "data", small)

	// The move to the new node starts, then is abandoned.
	var node uint64
	seen := false
	start := time.Now()
	for {
		time.Sleep(500 * time.Millisecond)
		var rows []nodeListRow
		if err := jsonUnmarshal(mustCairn(t, "node", "list", "--json", "--data-dir", dir), &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if !before[r.ID] {
				node = r.ID
				seen = seen || r.Joining > 0
				if seen && r.Joining == 0 {
					if r.Replicas != 0 {
						t.Fatalf("node %d holds %d replicas: a move to a disk smaller than the partition completed", node, r.Replicas)
					}
					goto abandoned
				}
			}
		}
		if time.Since(start) > 90*time.Second {
			l.end()
			t.Fatalf("no move to the small node started and was abandoned within 90s (new node %d, move seen %v):\n%s",
				node, seen, mustCairn(t, "node", "list", "--data-dir", dir))
		}
	}
abandoned:
	t.Logf("the move to node %d was abandoned %s after it started", node, time.Since(start).Round(time.Millisecond))

	// No further replica goes there while it has no room, and it deletes
	// its partial copy.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var rows []nodeListRow
		if err := jsonUnmarshal(mustCairn(t, "node", "list", "--json", "--data-dir", dir), &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.ID == node && (r.Joining > 0 || r.Replicas > 0) {
				t.Fatalf("node %d got a replica again after its disk filled: %+v", node, r)
			}
		}
		time.Sleep(time.Second)
	}
	// A replica promoted to voter before its disk filled stays a voter
	// until the group's leader removes it (the data node's retire.go);
	// the node deletes it once the leader's report shows it gone.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left, _ := filepath.Glob(filepath.Join(small, "dp-*"))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the full node still holds %v 25 s after the move was abandoned; its log:\n%s", left, tail(extra.log, 40))
			break
		}
	}
	if extra.cmd == nil || syscall.Kill(extra.cmd.Process.Pid, 0) != nil {
		t.Fatalf("the data node whose disk filled is not running; its log:\n%s", tail(extra.log, 30))
	}

	files, errs, longest, ops := l.end()
	t.Logf("%d operations, %d files, longest operation %s", ops, len(files), longest.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Fatalf("%d operations failed while a disk filled:\n%s", len(errs), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	waitHealthy(t, dir, time.Minute)
	if bad := verify(t, append(seeded, files...)); bad > 0 {
		t.Fatalf("%d of %d files differ", bad, len(seeded)+len(files))
	}
}

// seedPartitions writes files of 12 MiB through the mount at mnt until
// every data partition reports holding at least least bytes (at most 100
// files).
func seedPartitions(t *testing.T, dir, mnt string, least uint64) []written {
	t.Helper()
	var seeded []written
	var total uint64
	write := func(n int) {
		for range n {
			i := len(seeded)
			data := bytes.Repeat([]byte(fmt.Sprintf("seed %02d ", i%100)), (12<<20)/8)
			p := filepath.Join(mnt, fmt.Sprintf("seed%02d", i))
			must(t, writeSync(p, data))
			seeded = append(seeded, written{path: p, sum: sha256.Sum256(data), size: len(data)})
			total += uint64(len(data))
		}
	}
	write(20)
	for {
		// The partitions report their usage with their heartbeats: wait
		// until the reports account for what was written.
		var st status
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			if st = getStatus(t, dir); st.dataUsed() >= total || time.Now().After(deadline) {
				break
			}
		}
		smallest := uint64(1 << 63)
		for _, p := range st.Partitions {
			if p.Kind == "data" {
				smallest = min(smallest, p.UsedBytes)
			}
		}
		if smallest >= least {
			t.Logf("seeded %d files of 12 MiB; the smallest data partition holds %d MiB", len(seeded), smallest>>20)
			return seeded
		}
		if len(seeded) >= 100 {
			t.Fatalf("after %d files of 12 MiB a data partition still holds only %d bytes", len(seeded), smallest)
		}
		write(5)
	}
}

// TestWritableRunsLow: on cairn up --datas 5, the two data nodes that
// share the most data partitions are killed under a write load through
// the mount. The partitions that lost both are read-only (below their
// write quorum); the master must add data partitions on the three alive
// nodes until the volume has as many writable ones as it was created
// with, writes must go on without an error, and every file must read back
// intact once the two nodes are back.
func TestWritableRunsLow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "low")
	startUp(t, dir, "--datas", "5")
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	initial := map[uint64]bool{}
	share := map[[2]uint64]int{}
	for _, p := range st.Partitions {
		if p.Kind != "data" {
			continue
		}
		initial[p.ID] = true
		for i, a := range p.Replicas {
			for _, b := range p.Replicas[i+1:] {
				share[[2]uint64{min(a, b), max(a, b)}]++
			}
		}
	}
	var pair [2]uint64
	for k, n := range share {
		if n > share[pair] || n == share[pair] && (k[0] < pair[0] || k[0] == pair[0] && k[1] < pair[1]) {
			pair = k
		}
	}
	created := len(initial)
	t.Logf("killing data nodes %d and %d, which share %d of %d data partitions", pair[0], pair[1], share[pair], created)

	l := startLoad(filepath.Join(mnt, "load"), 3)
	time.Sleep(2 * time.Second)
	var victims []*victimProc
	for _, id := range pair {
		v := victim(t, dir, st, id, "data")
		v.kill()
		victims = append(victims, v)
	}
	killed := time.Now()
	for {
		time.Sleep(time.Second)
		st = getStatus(t, dir)
		writable, total := 0, 0
		for _, p := range st.Partitions {
			if p.Kind != "data" {
				continue
			}
			total++
			if p.Health != "read-only" {
				writable++
			}
			if !initial[p.ID] && (slices.Contains(p.Replicas, pair[0]) || slices.Contains(p.Replicas, pair[1])) {
				t.Fatalf("added partition %d was placed on a dead node: %+v", p.ID, p)
			}
		}
		if writable >= created && total > created {
			t.Logf("%d data partitions, %d writable, %s after the kills", total, writable, time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Since(killed) > time.Minute {
			l.end()
			t.Fatalf("%d of %d data partitions writable a minute after the kills (want %d)", writable, total, created)
		}
	}
	time.Sleep(3 * time.Second) // writes land on the new partitions too
	files, errs, longest, ops := l.end()
	t.Logf("%d operations, %d files, longest operation %s", ops, len(files), longest.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Fatalf("%d operations failed:\n%s", len(errs), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	if longest > 10*time.Second {
		t.Errorf("an operation took %s: writes paused longer than 10s", longest)
	}
	// The partitions on both dead nodes lost their quorum: their one
	// live replica cannot know whether the others committed an overwrite
	// without it, so it serves no reads until a peer is back.
	for _, v := range victims {
		v.restart()
	}
	waitHealthy(t, dir, 2*time.Minute)
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ", bad, len(files))
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
