package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// block returns the i-th MiB of the test file: pseudo-random, so that it
// can be regenerated instead of kept in memory.
func block(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 0xca1a))
	b := make([]byte, 1<<20)
	for j := 0; j < len(b); j += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// TestDataWriteSurvivesFollowerKill writes a 1 GiB file (256 MiB with
// -short) through the data path of a real `cairn up` cluster with 4
// data nodes, kill -9s a data node a quarter of the way in and restarts it
// by hand with the command line it had, halfway. The writer moves off the
// partitions that lost a replica; every acknowledged byte must then read
// back with the same SHA-256, and the restarted node must serve its share.
func TestDataWriteSurvivesFollowerKill(t *testing.T) {
	size := 1 << 30
	if testing.Short() {
		size = 256 << 20
	}
	dir := filepath.Join(t.TempDir(), "data")
	up := startUp(t, dir, "--datas", "4")
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	conf := adminTLS(t, dir)
	mc, err := masterclient.New(l.MasterAddrs(), conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := dataclient.New(ctx, dataclient.MasterSource(mc, "default"), dataclient.Options{ExtentBytes: 32 << 20, Conn: dataproto.ConnOptions{TLS: conf}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The victim: the data node that is the primary of the fewest data
	// partitions (a follower where it can be), and not on every one of them.
	topo := cl.Topology()
	primaries, member := map[uint64]int{}, map[uint64]int{}
	for _, p := range topo.Partitions {
		primaries[p.Replicas[0]]++
		for _, r := range p.Replicas {
			member[r]++
		}
	}
	var victim uint64
	for id := range topo.Nodes {
		if member[id] < len(topo.Partitions) && (victim == 0 || primaries[id] < primaries[victim] || primaries[id] == primaries[victim] && id < victim) {
			victim = id
		}
	}
	if victim == 0 {
		t.Fatalf("every data node holds every partition: %v", member)
	}
	st := getStatus(t, dir)
	pid := 0
	for _, n := range st.Nodes {
		if n.ID == victim {
			pid = n.Pid
		}
	}
	if pid == 0 {
		t.Fatalf("no pid for data node %d", victim)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	t.Logf("victim: data node %d (pid %d), primary of %d of %d partitions, replica of %d; command: %s",
		victim, pid, primaries[victim], len(topo.Partitions), member[victim], strings.Join(args, " "))

	var restarted *exec.Cmd
	restartedLog := filepath.Join(dir, "data"+fmt.Sprint(victim)+"-restarted.log")
	defer func() {
		if restarted != nil {
			restarted.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { restarted.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				restarted.Process.Kill()
				<-done
			}
		}
	}()

	began := time.Now()
	w := cl.NewWriter(ctx, 0)
	blocks := size >> 20
	want := make([][32]byte, blocks)
	whole := sha256.New()
	var killedAt, restartedAt time.Duration
	for i := range blocks {
		b := block(i)
		want[i] = sha256.Sum256(b)
		whole.Write(b)
		if i == blocks/4 {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killedAt = time.Since(began)
		}
		if i == blocks/2 {
			// Let the node stay dead a moment (the writer keeps going on
			// other partitions meanwhile), then start it as cairn up did.
			for time.Since(began)-killedAt < time.Second || pidAlive(pid) {
				if time.Since(began)-killedAt > 20*time.Second {
					t.Fatalf("pid %d still alive 20s after kill -9", pid)
				}
				time.Sleep(50 * time.Millisecond)
			}
			restarted = exec.Command(args[0], args[1:]...)
			restarted.Env = cleanEnv()
			logf, err := os.OpenFile(restartedLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			restarted.Stdout, restarted.Stderr = logf, logf
			if err := restarted.Start(); err != nil {
				t.Fatal(err)
			}
			restartedAt = time.Since(began)
		}
		for off := 0; off < len(b); off += 256 << 10 {
			if _, err := w.Write(b[off : off+256<<10]); err != nil {
				t.Fatalf("write at %d MiB: %v", i, err)
			}
		}
	}
	keys, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	wrote := time.Since(began)
	stats := cl.Stats()
	t.Logf("wrote %d MiB in %s (%.0f MiB/s) as %d extent keys; node killed at %s, restarted at %s; %d write failures moved elsewhere",
		blocks, wrote.Round(time.Millisecond), float64(blocks)/wrote.Seconds(), len(keys), killedAt.Round(time.Millisecond), restartedAt.Round(time.Millisecond), stats.WriteFailures)
	if restarted == nil {
		t.Fatal("the write ended before the node could be restarted")
	}
	var at uint64
	for _, k := range keys {
		if k.FileOffset != at {
			t.Fatalf("keys do not tile the file at %d: %+v", at, k)
		}
		at += k.Size
	}
	if at != uint64(size) {
		t.Fatalf("keys cover %d bytes of %d", at, size)
	}

	began = time.Now()
	r := cl.NewReader(ctx, keys, int64(size))
	defer r.Close()
	got := sha256.New()
	buf := make([]byte, 1<<20)
	mismatches := 0
	for i := range blocks {
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatalf("read MiB %d: %v", i, err)
		}
		got.Write(buf)
		if sha256.Sum256(buf) != want[i] {
			mismatches++
		}
	}
	read := time.Since(began)
	t.Logf("read back in %s (%.0f MiB/s): %d of %d MiB mismatched; sha256 %x", read.Round(time.Millisecond), float64(blocks)/read.Seconds(), mismatches, blocks, got.Sum(nil)[:8])
	if mismatches != 0 || !bytes.Equal(got.Sum(nil), whole.Sum(nil)) {
		t.Fatalf("%d MiB mismatched", mismatches)
	}

	// The restarted node serves every key of its partitions (it held them
	// before the kill, or caught up from the primary).
	addr := topo.Nodes[victim].Addr
	var mine []*metapb.ExtentKey
	for _, k := range keys {
		for _, p := range topo.Partitions {
			if p.Id == k.PartitionId && slices.Contains(p.Replicas, victim) {
				mine = append(mine, k)
			}
		}
	}
	// A restarted follower leaves an extent written in the last
	// AlignQuietPeriod (10 s) to the chain and aligns it at a later pass;
	// on two loaded cores a pass copying what it lacks can take tens of
	// seconds, so the bound is generous: the check is that it catches up.
	deadline := time.Now().Add(60 * time.Second)
	var conn *dataproto.Conn
	for _, k := range mine {
		staleRetries := 0
		for {
			// err is this attempt's alone: a healthy connection is kept,
			// and an error left from the last attempt must not stand in
			// for the request this one sends.
			err = nil
			if conn == nil || conn.Err() != nil {
				conn, err = dataproto.Dial(ctx, addr, dataproto.ConnOptions{TLS: conf})
			}
			if err == nil {
				n := min(k.Size, 1<<20)
				_, _, err = conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{
					Op: dataproto.OpRead, Partition: k.PartitionId, Extent: k.ExtentId, Offset: int64(k.ExtentOffset + k.Size - n),
					Arg: n, Size: int64(k.ExtentOffset + k.Size), Epoch: cl.Topology().Epoch,
				}})
			}
			if err == nil {
				break
			}
			var rerr error
			if dataproto.CodeOf(err) == dataproto.CodeStaleEpoch {
				// The map moved on since this client last read it (each
				// replica found in sync moves it again): read it again,
				// and retry at once a few times, deadline or not (the
				// earlier keys may have used it up).
				if rerr = cl.Refresh(ctx); rerr == nil && staleRetries < 3 {
					staleRetries++
					continue
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("restarted node %d cannot serve key %+v: %v (map epoch %d, last refresh: %v); its log:\n%s",
					victim, k, err, cl.Topology().Epoch, rerr, tail(restartedLog, 40))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if conn != nil {
		conn.Close()
	}
	t.Logf("restarted node %d serves all %d keys on its partitions", victim, len(mine))
	up.stop()
}
