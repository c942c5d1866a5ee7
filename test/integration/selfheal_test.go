package integration

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// victimProc is a server process of a cairn up cluster that a test kills
// with SIGKILL and later starts again with the command line it had.
type victimProc struct {
	t    *testing.T
	id   uint64
	name string
	pid  int
	args []string
	log  string
	cmd  *exec.Cmd // the restarted process, nil before
}

// victim captures node id's command line (from /proc) so it can be
// restarted after a kill.
func victim(t *testing.T, dir string, st status, id uint64, role string) *victimProc {
	t.Helper()
	for _, n := range st.Nodes {
		if n.ID != id || n.Role != role {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.Pid))
		if err != nil {
			t.Fatalf("%s node %d: %v", role, id, err)
		}
		v := &victimProc{t: t, id: id, name: fmt.Sprintf("%s node %d", role, id), pid: n.Pid,
			args: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"),
			log:  filepath.Join(dir, fmt.Sprintf("%s-%d-restarted.log", role, id))}
		t.Cleanup(v.stop)
		return v
	}
	t.Fatalf("no %s node %d in the status", role, id)
	return nil
}

// kill sends SIGKILL and waits until the process is gone.
func (v *victimProc) kill() {
	v.t.Helper()
	pid := v.pid
	if v.cmd != nil {
		pid = v.cmd.Process.Pid
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		v.t.Fatalf("kill %s: %v", v.name, err)
	}
	if v.cmd != nil {
		_ = v.cmd.Wait()
		v.cmd = nil
		return
	}
	for i := 0; pidAlive(pid); i++ {
		if i > 400 {
			v.t.Fatalf("%s (pid %d) alive 20s after kill -9", v.name, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signal sends sig to the running process (the restarted one, if any).
func (v *victimProc) signal(sig syscall.Signal) {
	v.t.Helper()
	pid := v.pid
	if v.cmd != nil {
		pid = v.cmd.Process.Pid
	}
	if err := syscall.Kill(pid, sig); err != nil {
		v.t.Fatalf("signal %v to %s: %v", sig, v.name, err)
	}
}

// restart starts the process again as cairn up had started it.
func (v *victimProc) restart() { v.restartWith() }

// restartWith starts the process again with extra flags after the ones
// cairn up gave it (a flag given twice takes the last value).
func (v *victimProc) restartWith(extra ...string) {
	v.t.Helper()
	logf, err := os.OpenFile(v.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		v.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(v.args[0], append(slices.Clone(v.args[1:]), extra...)...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		v.t.Fatalf("restart %s: %v", v.name, err)
	}
	v.cmd = cmd
}

func (v *victimProc) stop() {
	if v.cmd == nil {
		return
	}
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = v.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = v.cmd.Process.Kill()
		<-done
	}
	v.cmd = nil
}

// mostLeading returns the node of role that heads the most partitions of
// kind (replicas[0] for data, the reported Raft leader for meta): the
// victim that hurts most.
func mostLeading(st status, kind string) uint64 {
	count := map[uint64]int{}
	for _, p := range st.Partitions {
		if p.Kind != kind {
			continue
		}
		if kind == "data" {
			count[p.Replicas[0]]++
		} else if p.Leader != 0 {
			count[p.Leader]++
		}
	}
	var best uint64
	for id, n := range count {
		if best == 0 || n > count[best] || n == count[best] && id < best {
			best = id
		}
	}
	return best
}

// waitLeaders waits until every meta partition has reported a leader.
func waitLeaders(t *testing.T, dir string) status {
	t.Helper()
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		st := getStatus(t, dir)
		ok := true
		for _, p := range st.Partitions {
			ok = ok && (p.Kind != "meta" || p.Leader != 0)
		}
		if ok {
			return st
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("meta partitions without a reported leader after 30s: %+v", st.Partitions)
		}
	}
}

// written is a file the load wrote and fsynced successfully.
type written struct {
	path string
	sum  [32]byte
	size int
	seed uint64 // of its contents (fileContent), 0 when they cannot be made again
}

// fileContent is the contents of a load's file: size bytes from seed, so
// that a file that reads back wrong can be compared byte by byte.
func fileContent(seed uint64, size int) []byte {
	rng := rand.New(rand.NewPCG(seed, 17))
	data := make([]byte, size)
	for j := range data {
		data[j] = byte(rng.Uint32())
	}
	return data
}

// load writes files through the mount from several goroutines (each file
// written, fsynced and closed; sizes from 1 KiB to 3 MiB) and creates
// directories, until stop closes. It records every file that was
// acknowledged, every error, and the longest time one operation took.
type load struct {
	mu      sync.Mutex
	files   []written
	errs    []string
	longest time.Duration
	ops     int
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startLoad(root string, writers int) *load {
	l := &load{stop: make(chan struct{})}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			dir := filepath.Join(root, fmt.Sprintf("w%d", w))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				l.fail("mkdir", err)
				return
			}
			rng := rand.New(rand.NewPCG(uint64(w), 17))
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				size := 1<<10 + rng.IntN(64<<10)
				if i%4 == 0 {
					size = 1<<20 + rng.IntN(2<<20)
				}
				seed := uint64(w+1)<<32 | uint64(i)
				data := fileContent(seed, size)
				p := filepath.Join(dir, fmt.Sprintf("f%05d", i))
				start := time.Now()
				err := writeSync(p, data)
				if i%8 == 0 && err == nil {
					err = os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%05d", i)), 0o755)
				}
				l.done(time.Since(start))
				if err != nil {
					l.fail(p, err)
					continue
				}
				l.mu.Lock()
				l.files = append(l.files, written{path: p, sum: sha256.Sum256(data), size: size, seed: seed})
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (l *load) done(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops++
	l.longest = max(l.longest, d)
}

func (l *load) fail(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
}

// end stops the load and returns what it wrote.
func (l *load) end() ([]written, []string, time.Duration, int) {
	close(l.stop)
	l.wg.Wait()
	return l.files, l.errs, l.longest, l.ops
}

// verify reads every file back and counts the ones whose bytes differ.
func verify(t *testing.T, files []written) int {
	t.Helper()
	bad := 0
	for _, f := range files {
		got, err := os.ReadFile(f.path)
		if err != nil || sha256.Sum256(got) != f.sum {
			bad++
			if bad <= 5 {
				t.Errorf("%s: %d bytes, want %d (err %v)%s", f.path, len(got), f.size, err, describeDiff(f, got))
			}
		}
	}
	return bad
}

// describeDiff says where a file that read back wrong differs from what
// was written: its inode, the first and last differing bytes, how many
// differ, and whether the wrong ones are zeros.
func describeDiff(f written, got []byte) string {
	if f.seed == 0 {
		return ""
	}
	want := fileContent(f.seed, f.size)
	first, last, n, zeros := -1, -1, 0, 0
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			last = i
			n++
			if got[i] == 0 {
				zeros++
			}
		}
	}
	var ino uint64
	if fi, err := os.Stat(f.path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
	}
	return fmt.Sprintf("; inode %d, %d bytes differ in [%d, %d], %d of them zeros", ino, n, first, last+1, zeros)
}

// waitCopying waits until cairn node list shows data node id copying data
// to catch up (bytes left to copy).
func waitCopying(t *testing.T, dir string, id uint64) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(300 * time.Millisecond) {
		var rows []nodeListRow
		if err := jsonUnmarshal(mustCairn(t, "node", "list", "--json", "--data-dir", dir), &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.ID == id && r.CopyLeft > 0 {
				t.Logf("node %d has %d bytes to copy", id, r.CopyLeft)
				return
			}
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("node %d shows nothing to copy 30s after its restart:\n%s", id, mustCairn(t, "node", "list", "--data-dir", dir))
		}
	}
}

// waitHealthy waits until every partition is healthy (no replica down or
// stale) and returns how long that took.
func waitHealthy(t *testing.T, dir string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st := getStatus(t, dir)
		var sick []string
		for _, p := range st.Partitions {
			if p.Health != "healthy" {
				sick = append(sick, fmt.Sprintf("%d:%s down%v stale%v", p.ID, p.Health, p.Down, p.Stale))
			}
		}
		if len(sick) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("partitions not healthy %s after the restart: %s", within, strings.Join(sick, ", "))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestWritesSurviveNodeKills is the worst case on the default layout (cairn
// up: 3 meta nodes, 3 data nodes, 3 replicas, so every data partition has a
// replica on every data node): under a write load through the mount, it
// kills -9 the data node that heads the most data partitions and the meta
// node that leads the most meta partitions. Every write must succeed (no
// error, no operation paused more than 10 s), and every acknowledged file
// must read back intact. The two nodes are then restarted, the data node
// is killed again while it copies what it missed and restarted once more:
// every partition must come back to health (the data node's replicas
// catch up and leave the stale state) without any command. Then the two other data nodes are
// killed: writes must fail with EIO (replicas lost, not space), they
// resume once one of the two returns, and every acknowledged byte reads
// back from the rejoined node and the returned one. (Alone, the rejoined
// node serves no reads: without a quorum it cannot rule out an overwrite
// the other two committed.)
func TestWritesSurviveNodeKills(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "heal")
	startUp(t, dir)
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	dataVictim := victim(t, dir, st, mostLeading(st, "data"), "data")
	metaVictim := victim(t, dir, st, mostLeading(st, "meta"), "meta")

	l := startLoad(filepath.Join(mnt, "load"), 4)
	time.Sleep(3 * time.Second)
	killedAt := time.Now()
	dataVictim.kill()
	metaVictim.kill()
	t.Logf("killed %s and %s under load", dataVictim.name, metaVictim.name)
	time.Sleep(15 * time.Second)
	files, errs, longest, ops := l.end()
	t.Logf("%d operations, %d files acknowledged, longest operation %s", ops, len(files), longest.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Fatalf("%d operations failed after the kills at %s:\n%s", len(errs), killedAt.Format("15:04:05.000"), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	if longest > 10*time.Second {
		t.Errorf("an operation took %s: writes paused longer than 10s", longest)
	}
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ after the kills", bad, len(files))
	}
	st = getStatus(t, dir)
	for _, p := range st.Partitions {
		if p.Kind == "data" && !slices.Contains(p.Down, dataVictim.id) {
			t.Errorf("data partition %d: the killed node is not down in the map: %+v", p.ID, p)
		}
	}

	// Both come back. The data node is killed again while it catches up
	// (copying slowly, so that the kill lands mid-copy), then comes back
	// for good: its replicas catch up by themselves.
	dataVictim.restartWith("--recovery-mbps", "2")
	metaVictim.restart()
	waitCopying(t, dir, dataVictim.id)
	time.Sleep(2 * time.Second)
	dataVictim.kill()
	t.Logf("killed %s again during its own recovery", dataVictim.name)
	dataVictim.restart()
	took := waitHealthy(t, dir, 90*time.Second)
	t.Logf("every partition healthy %s after the restart", took.Round(time.Millisecond))

	// The rejoined data node must now hold everything: kill the other two.
	st = getStatus(t, dir)
	var others []*victimProc
	for _, n := range st.Nodes {
		if n.Role == "data" && n.Pid != 0 && n.Pid != dataVictim.cmd.Process.Pid {
			others = append(others, victim(t, dir, st, n.ID, "data"))
		}
	}
	if len(others) != 2 {
		t.Fatalf("expected two other data nodes, found %d", len(others))
	}
	for _, o := range others {
		o.kill()
	}
	// Alone, the rejoined node has no quorum in any data partition: it
	// cannot know whether the other two committed an overwrite without it,
	// so it serves no reads until one returns (docs/design.md, "Partitions
	// and zones"); every byte is read back below, once one has.
	err := writeSync(filepath.Join(mnt, "load", "two-down"), bytes.Repeat([]byte("x"), 200<<10))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("a write with two of three data nodes dead: %v, want EIO", err)
	}
	others[1].restart()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := writeSync(filepath.Join(mnt, "load", "one-back"), bytes.Repeat([]byte("y"), 200<<10))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume within 60s of a second data node's return: %v", err)
		}
		time.Sleep(time.Second)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "load", "one-back"))
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte("y"), 200<<10)) {
		t.Fatalf("the file written after the return reads back wrong: %d bytes, %v", len(got), err)
	}
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ with the rejoined data node and one other alive", bad, len(files))
	}
}

// TestReReplicationAfterOut: on a cluster with a spare node of each role
// (cairn up --datas 4 --metas 4), kill -9 the data node heading the most
// data partitions and the meta node leading the most meta partitions under
// a write load through the mount. Writes go on without an error; once the
// nodes are out (--out-after), every partition is back to three healthy
// replicas on the remaining nodes without any command; every acknowledged
// file reads back intact; and the data node, started again, deletes the
// replicas that moved off it.
func TestReReplicationAfterOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rerep")
	startUp(t, dir, "--datas", "4", "--metas", "4", "--out-after", "8s")
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	dataVictim := victim(t, dir, st, mostLeading(st, "data"), "data")
	metaVictim := victim(t, dir, st, mostLeading(st, "meta"), "meta")
	dataDir := ""
	for i, a := range dataVictim.args {
		if a == "--data-dir" && i+1 < len(dataVictim.args) {
			dataDir = dataVictim.args[i+1]
		}
	}

	l := startLoad(filepath.Join(mnt, "load"), 4)
	time.Sleep(3 * time.Second)
	dataVictim.kill()
	metaVictim.kill()
	killed := time.Now()
	t.Logf("killed %s and %s under load", dataVictim.name, metaVictim.name)

	// Keep the load on until every partition has three healthy replicas
	// that avoid the dead nodes.
	var healed time.Duration
	for {
		time.Sleep(time.Second)
		st := getStatus(t, dir)
		ok := true
		for _, p := range st.Partitions {
			dead := slices.Contains(p.Replicas, dataVictim.id) && p.Kind == "data" || slices.Contains(p.Replicas, metaVictim.id) && p.Kind == "meta"
			if p.Health != "healthy" || dead || len(p.Replicas) != 3 {
				ok = false
			}
		}
		if ok {
			healed = time.Since(killed)
			break
		}
		if time.Since(killed) > 2*time.Minute {
			l.end()
			t.Fatalf("partitions not back to three healthy replicas 2 minutes after the kills: %+v", st.Partitions)
		}
	}
	files, errs, longest, ops := l.end()
	t.Logf("healed %s after the kills; %d operations, %d files, longest operation %s", healed.Round(time.Millisecond), ops, len(files), longest.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Fatalf("%d operations failed:\n%s", len(errs), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	if longest > 10*time.Second {
		t.Errorf("an operation took %s: writes paused longer than 10s", longest)
	}
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ after re-replication", bad, len(files))
	}

	// The data node comes back: what moved off it is deleted there.
	dataVictim.restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, _ := filepath.Glob(filepath.Join(dataDir, "dp-*"))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the returned data node still holds %v 30s after its restart", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestDecommission drains a data node (the one heading the most data
// partitions) and a meta node (the one leading the most meta partitions)
// of a cairn up --datas 4 --metas 4 cluster under a write load through the
// mount: both end with no replica, every partition healthy on the other
// nodes, no write failed, and every file reads back intact.
func TestDecommission(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "decom")
	startUp(t, dir, "--datas", "4", "--metas", "4")
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	dataNode, metaNode := mostLeading(st, "data"), mostLeading(st, "meta")

	l := startLoad(filepath.Join(mnt, "load"), 3)
	time.Sleep(2 * time.Second)
	for _, id := range []uint64{dataNode, metaNode} {
		out := mustCairn(t, "node", "decommission", fmt.Sprint(id), "--data-dir", dir)
		t.Log(strings.TrimSpace(out))
	}
	start := time.Now()
	for {
		time.Sleep(time.Second)
		var rows []nodeListRow
		if err := jsonUnmarshal(mustCairn(t, "node", "list", "--json", "--data-dir", dir), &rows); err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, r := range rows {
			if r.ID == dataNode || r.ID == metaNode {
				left += r.Replicas + r.Joining
			}
		}
		st := getStatus(t, dir)
		healthy := true
		for _, p := range st.Partitions {
			healthy = healthy && p.Health == "healthy"
		}
		if left == 0 && healthy {
			break
		}
		if time.Since(start) > 2*time.Minute {
			l.end()
			t.Fatalf("nodes %d and %d still hold %d replicas 2 minutes after the decommission: %+v", dataNode, metaNode, left, st.Partitions)
		}
	}
	files, errs, longest, ops := l.end()
	t.Logf("drained in %s; %d operations, %d files, longest operation %s", time.Since(start).Round(time.Millisecond), ops, len(files), longest.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Fatalf("%d operations failed during the decommission:\n%s", len(errs), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ after the decommission", bad, len(files))
	}
	if out := mustCairn(t, "node", "list", "--data-dir", dir); !strings.Contains(out, "decommissioned") {
		t.Fatalf("node list does not show the decommissioned nodes:\n%s", out)
	}
}

// nodeListRow is the part of `cairn node list --json` the tests read.
type nodeListRow struct {
	ID       uint64 `json:"id"`
	Replicas int    `json:"replicas"`
	Joining  int    `json:"joining"`
	Draining bool   `json:"draining"`
	CopyLeft uint64 `json:"copy_left_bytes"`
}

// TestNewNodesTakeShare adds a data node and a meta node to a running
// default cluster holding files: the master moves existing replicas to
// them, one at a time, until every node of a role holds within one replica
// of the others, and every file still reads back intact.
func TestNewNodesTakeShare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grow")
	startUp(t, dir)
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	l := startLoad(filepath.Join(mnt, "load"), 2)
	time.Sleep(3 * time.Second)

	for _, role := range []string{"data", "meta"} {
		startExtraNode(t, dir, st, role, filepath.Join(dir, "new-"+role))
	}

	start := time.Now()
	for {
		time.Sleep(time.Second)
		var rows []nodeListRow
		var roles []struct {
			ID   uint64 `json:"id"`
			Role string `json:"role"`
		}
		out := mustCairn(t, "node", "list", "--json", "--data-dir", dir)
		if err := jsonUnmarshal(out, &rows); err != nil {
			t.Fatal(err)
		}
		if err := jsonUnmarshal(out, &roles); err != nil {
			t.Fatal(err)
		}
		spread := map[string][2]int{} // role -> min, max
		nodes := map[string]int{}
		moving := 0
		for i, r := range rows {
			role := roles[i].Role
			nodes[role]++
			moving += r.Joining
			mm, ok := spread[role]
			if !ok {
				mm = [2]int{r.Replicas, r.Replicas}
			}
			spread[role] = [2]int{min(mm[0], r.Replicas), max(mm[1], r.Replicas)}
		}
		balanced := nodes["data"] == 4 && nodes["meta"] == 4 && moving == 0
		for _, role := range []string{"data", "meta"} {
			balanced = balanced && spread[role][1]-spread[role][0] <= 1
		}
		if balanced {
			t.Logf("balanced %s after the new nodes started: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(mustCairn(t, "node", "list", "--data-dir", dir)))
			break
		}
		if time.Since(start) > 3*time.Minute {
			l.end()
			t.Fatalf("not balanced 3 minutes after the new nodes started:\n%s", mustCairn(t, "node", "list", "--data-dir", dir))
		}
	}
	files, errs, _, ops := l.end()
	if len(errs) > 0 {
		t.Fatalf("%d of %d operations failed while replicas moved:\n%s", len(errs), ops, strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	waitHealthy(t, dir, time.Minute)
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ after the replicas moved", bad, len(files))
	}
}

// startExtraNode starts one more node of role as cairn up starts its
// nodes: the command line of an existing one with its own id, ports and
// data dir (dataDir).
func startExtraNode(t *testing.T, dir string, st status, role, dataDir string) *victimProc {
	t.Helper()
	var model *victimProc
	for _, n := range st.Nodes {
		if n.Role == role {
			model = victim(t, dir, st, n.ID, role)
			break
		}
	}
	name := filepath.Base(dataDir)
	extra := &victimProc{t: t, name: "new " + role + " node", log: filepath.Join(dir, name+".log")}
	t.Cleanup(extra.stop)
	for i := 0; i < len(model.args); i++ {
		a := model.args[i]
		extra.args = append(extra.args, a)
		if i+1 >= len(model.args) {
			continue
		}
		switch a {
		case "--node-id":
			extra.args = append(extra.args, "0")
			i++
		case "--data-dir":
			extra.args = append(extra.args, dataDir)
			i++
		case "--listen", "--metrics-addr", "--data-listen":
			extra.args = append(extra.args, freeAddr(t))
			i++
		}
	}
	extra.restart()
	return extra
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMasterLeaderKilledDuringMove: with three masters, a data node dies
// and stays out; as soon as the master leader has started moving its
// replicas, the leader is killed too. The next leader must finish (or
// restart) every move from the map: every data partition back to three
// healthy replicas without the dead node, every file intact.
func TestMasterLeaderKilledDuringMove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mmove")
	startUp(t, dir, "--masters", "3", "--datas", "4", "--out-after", "5s")
	mnt := filepath.Join(dir, "mnt")
	st := waitLeaders(t, dir)
	l := startLoad(filepath.Join(mnt, "load"), 2)
	time.Sleep(4 * time.Second)
	files, errs, _, _ := l.end()
	if len(errs) > 0 {
		t.Fatalf("writes failed before any fault: %v", errs)
	}
	dataVictim := victim(t, dir, st, mostLeading(st, "data"), "data")
	dataVictim.kill()

	// Wait for the first move, then kill the master leader.
	start := time.Now()
	for {
		var rows []nodeListRow
		r := cairn(t, "node", "list", "--json", "--data-dir", dir, "--timeout", "3s")
		if r.code == 0 && jsonUnmarshal(r.stdout, &rows) == nil {
			moving := 0
			for _, row := range rows {
				moving += row.Joining
			}
			if moving > 0 {
				break
			}
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("no replica move started a minute after data node %d died", dataVictim.id)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, leaderPid := getStatus(t, dir).leaders()
	if leaderPid == 0 {
		t.Fatal("no master leader pid in the status")
	}
	if err := syscall.Kill(leaderPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the master leader (pid %d) %s after the data node, during its replica moves", leaderPid, time.Since(start).Round(time.Millisecond))

	for {
		time.Sleep(time.Second)
		r := cairn(t, "status", "--data-dir", dir, "--json", "--timeout", "3s")
		var st status
		if r.code == 0 && jsonUnmarshal(r.stdout, &st) == nil {
			done := true
			for _, p := range st.Partitions {
				if p.Kind == "data" && (p.Health != "healthy" || slices.Contains(p.Replicas, dataVictim.id) || len(p.Replicas) != 3) {
					done = false
				}
			}
			if done {
				break
			}
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("data partitions not healed 2 minutes after the kills: %s", r.stdout)
		}
	}
	t.Logf("healed %s after the data node died", time.Since(start).Round(time.Millisecond))
	if bad := verify(t, files); bad > 0 {
		t.Fatalf("%d of %d files differ", bad, len(files))
	}
}
