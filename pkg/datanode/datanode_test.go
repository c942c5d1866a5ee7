package datanode_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/diskfs"
)

func testOptions() datanode.Options {
	return datanode.Options{
		AlignDelay:       100 * time.Millisecond,
		AlignInterval:    500 * time.Millisecond,
		AlignQuietPeriod: 200 * time.Millisecond,
	}
}

// three starts 3 nodes hosting partition 1 on [1 2 3].
func three(t *testing.T) *datanodetest.Cluster {
	return datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: testOptions()})
}

// client is a raw protocol client of the cluster's nodes.
type client struct {
	t     *testing.T
	c     *datanodetest.Cluster
	conns map[uint64]*dataproto.Conn
}

func newClient(t *testing.T, c *datanodetest.Cluster) *client {
	cl := &client{t: t, c: c, conns: map[uint64]*dataproto.Conn{}}
	t.Cleanup(func() {
		for _, conn := range cl.conns {
			conn.Close()
		}
	})
	return cl
}

func (cl *client) conn(id uint64) *dataproto.Conn {
	cl.t.Helper()
	if c := cl.conns[id]; c != nil && c.Err() == nil {
		return c
	}
	c, err := dataproto.Dial(context.Background(), cl.c.Node(id).DataAddr, dataproto.ConnOptions{ReadTimeout: 5 * time.Second})
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.conns[id] = c
	return c
}

func (cl *client) do(id uint64, h dataproto.Header, payload []byte) (dataproto.Header, []byte, error) {
	cl.t.Helper()
	if h.Epoch == 0 {
		h.Epoch = cl.c.Epoch()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.conn(id).Do(ctx, &dataproto.Request{Header: h, Payload: payload})
}

func (cl *client) must(id uint64, h dataproto.Header, payload []byte) (dataproto.Header, []byte) {
	cl.t.Helper()
	rh, p, err := cl.do(id, h, payload)
	if err != nil {
		cl.t.Fatalf("%v on node %d: %v", h.Op, id, err)
	}
	return rh, p
}

func (cl *client) create(part uint64) uint64 {
	cl.t.Helper()
	h, _ := cl.must(1, dataproto.Header{Op: dataproto.OpCreateExtent, Partition: part}, nil)
	return h.Extent
}

// appendAll streams data to extent ext of partition 1 in packets, pipelined,
// and checks every acknowledgement.
func (cl *client) appendAll(ext uint64, data []byte, packet int) {
	cl.t.Helper()
	conn := cl.conn(1)
	var calls []*dataproto.Call
	for off := 0; off < len(data); off += packet {
		end := min(off+packet, len(data))
		call, err := conn.Start(context.Background(), &dataproto.Request{
			Header:  dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Offset: int64(off), Epoch: cl.c.Epoch()},
			Payload: data[off:end],
		})
		if err != nil {
			cl.t.Fatal(err)
		}
		calls = append(calls, call)
	}
	for i, call := range calls {
		h, _, err := call.Wait(context.Background())
		if err != nil {
			cl.t.Fatalf("packet %d: %v", i, err)
		}
		if want := uint64(min((i+1)*packet, len(data))); h.Arg != want {
			cl.t.Fatalf("packet %d acknowledged up to %d, want %d", i, h.Arg, want)
		}
	}
}

func (cl *client) read(id, ext uint64, off, n, committed int64) ([]byte, error) {
	_, p, err := cl.do(id, dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: ext, Offset: off, Arg: uint64(n), Size: committed}, nil)
	return p, err
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// eventually retries f until it returns nil or the time is up.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Appends go down the chain; each is acknowledged once every replica holds
// it; every replica then serves the bytes (with sendfile).
func TestChainAppendAndRead(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	data := randBytes(3<<20+777, 1)
	cl.appendAll(ext, data, 128<<10)
	for id := uint64(1); id <= 3; id++ {
		for off := int64(0); off < int64(len(data)); off += 1 << 20 {
			n := min(int64(1<<20), int64(len(data))-off)
			got, err := cl.read(id, ext, off, n, int64(len(data)))
			if err != nil {
				t.Fatalf("node %d read at %d: %v", id, off, err)
			}
			if !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("node %d read at %d: wrong bytes", id, off)
			}
		}
		// The server counts after sendfile returns, which may be after the
		// client has the bytes.
		eventually(t, 5*time.Second, func() error {
			if st := c.Node(id).Host.ServerStats(); st.SendfileBytes < int64(len(data)) {
				return fmt.Errorf("node %d sent %d bytes with sendfile, want all %d", id, st.SendfileBytes, len(data))
			}
			return nil
		})
	}
	// Every replica has the same block checksums.
	var first []byte
	for id := uint64(1); id <= 3; id++ {
		_, crcs := cl.must(id, dataproto.Header{Op: dataproto.OpChecksums, Partition: 1, Extent: ext, Flags: dataproto.FlagForwarded}, nil)
		if first == nil {
			first = crcs
		} else if !bytes.Equal(first, crcs) {
			t.Fatalf("node %d checksums differ from node 1's", id)
		}
	}
}

// TestFollowersDropWrittenPages checks that the followers of a write
// chain do not keep what they wrote in their page cache (reads go to the
// head), while the head does.
func TestFollowersDropWrittenPages(t *testing.T) {
	c := three(t)
	if !diskfs.CachesPages(c.Node(1).Dir) {
		t.Skip("tmpfs: its page cache is its storage")
	}
	cl := newClient(t, c)
	ext := cl.create(1)
	data := randBytes(4<<20, 7)
	cl.appendAll(ext, data, 512<<10)
	path := func(id uint64) string { return filepath.Join(c.Node(id).Dir, "dp-1", fmt.Sprintf("ext-%d", ext)) }
	if n, pages, err := diskfs.Resident(path(1)); err != nil || n < pages/2 {
		t.Fatalf("the head keeps %d of %d pages (%v), want most", n, pages, err)
	}
	for _, id := range []uint64{2, 3} {
		eventually(t, 5*time.Second, func() error {
			n, pages, err := diskfs.Resident(path(id))
			if err != nil || n > 2 {
				return fmt.Errorf("follower %d keeps %d of %d pages (%v)", id, n, pages, err)
			}
			return nil
		})
	}
}

func TestRequestChecks(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	cl.appendAll(ext, randBytes(1000, 2), 1000)
	tests := []struct {
		name    string
		node    uint64
		h       dataproto.Header
		payload []byte
		want    dataproto.Code
	}{
		{"write to a follower", 2, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Offset: 1000}, []byte("x"), dataproto.CodeNotPrimary},
		{"unknown partition", 1, dataproto.Header{Op: dataproto.OpRead, Partition: 9, Extent: ext, Arg: 1, Size: 1}, nil, dataproto.CodeUnknownPartition},
		{"stale epoch", 1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Offset: 1000, Epoch: 0}, []byte("x"), dataproto.CodeStaleEpoch},
		{"append at the wrong offset", 1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Offset: 10}, []byte("x"), dataproto.CodeOffsetMismatch},
		{"append to an unknown extent", 1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: 999, Offset: 0}, []byte("x"), dataproto.CodeNotFound},
		{"read past the committed size named", 2, dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: ext, Offset: 900, Arg: 200, Size: 1000}, nil, dataproto.CodeOutOfRange},
		{"read past what the replica holds", 3, dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: ext, Offset: 900, Arg: 200, Size: 5000}, nil, dataproto.CodeNotHeld},
		{"read of nothing", 3, dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: ext, Size: 5000}, nil, dataproto.CodeBadRequest},
		{"overwrite past committed", 1, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext, Offset: 999}, []byte("xy"), dataproto.CodeOutOfRange},
		{"free a key in the middle of a large extent frees nothing", 1, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: ext, Offset: 5, Arg: 5}, nil, dataproto.CodeOK},
		{"the extent is still there", 3, dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: ext, Offset: 0, Arg: 1000, Size: 1000}, nil, dataproto.CodeOK},
		{"a last reference frees it whole", 1, dataproto.Header{Op: dataproto.OpFree, Flags: dataproto.FlagWhole, Partition: 1, Extent: ext, Offset: 5, Arg: 5}, nil, dataproto.CodeOK},
		{"the extent is gone from every replica", 3, dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: ext, Offset: 0, Arg: 1000, Size: 1000}, nil, dataproto.CodeNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			if h.Epoch == 0 && tc.want != dataproto.CodeStaleEpoch {
				h.Epoch = c.Epoch()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rh, _, err := cl.conn(tc.node).Do(ctx, &dataproto.Request{Header: h, Payload: tc.payload})
			if code := dataproto.CodeOf(err); code != tc.want {
				t.Fatalf("got %v (%v), want %v", code, err, tc.want)
			}
			var pe *dataproto.Error
			errors.As(err, &pe)
			switch tc.want {
			case dataproto.CodeStaleEpoch:
				if pe.Header.Epoch != c.Epoch() {
					t.Errorf("stale epoch answer carries epoch %d, want %d", pe.Header.Epoch, c.Epoch())
				}
			case dataproto.CodeOffsetMismatch:
				if pe.Header.Size != 1000 {
					t.Errorf("offset mismatch answer carries size %d, want 1000", pe.Header.Size)
				}
			case dataproto.CodeNotHeld:
				if pe.Header.Size != 1000 {
					t.Errorf("not-held answer carries size %d, want 1000", pe.Header.Size)
				}
			}
			_ = rh
		})
	}
}

// A packet whose payload does not match its CRC is refused and nothing is
// appended anywhere.
func TestBadCRCRejected(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	payload := randBytes(4096, 3)
	h := dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Epoch: c.Epoch(), PayloadCRC: dataproto.Checksum(payload) ^ 1}
	_, _, err := cl.conn(1).Do(context.Background(), &dataproto.Request{Header: h, Payload: payload, KeepCRC: true})
	if dataproto.CodeOf(err) != dataproto.CodeBadCRC {
		t.Fatalf("got %v, want bad crc", err)
	}
	for id := uint64(1); id <= 3; id++ {
		_, list := cl.must(id, dataproto.Header{Op: dataproto.OpListExtents, Partition: 1, Flags: dataproto.FlagForwarded}, nil)
		es, _ := dataproto.DecodeExtentEntries(list)
		if len(es) != 1 || es[0].Size != 0 {
			t.Fatalf("node %d: extents %+v after a corrupt packet", id, es)
		}
	}
	// The connection goes on: a good packet is accepted.
	cl.appendAll(ext, payload, 4096)
}

// A follower that is gone makes writes fail fast with CodeReplicaFailed.
func TestDeadFollowerFailsWrite(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	cl.appendAll(ext, randBytes(1<<20, 4), 128<<10)
	c.Stop(3)
	start := time.Now()
	_, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Offset: 1 << 20}, []byte("more"))
	if dataproto.CodeOf(err) != dataproto.CodeReplicaFailed {
		t.Fatalf("got %v, want replica failed", err)
	}
	// The primary names the replica that did not answer, for the writer
	// to avoid (node 2 forwarded to node 3, and passed its name back).
	var pe *dataproto.Error
	if errors.As(err, &pe); pe.Header.Arg != 3 {
		t.Fatalf("replica failed names node %d, want 3", pe.Header.Arg)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("failure took %s", d)
	}
	// Acknowledged bytes are still readable from the survivors.
	if _, err := cl.read(2, ext, 0, 1<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// Small files are packed into a shared small extent on every replica; a
// freed one reads as zeros.
func TestSmallFiles(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	type small struct {
		ext  uint64
		off  int64
		data []byte
	}
	var files []small
	for i := range 20 {
		data := randBytes(1000+i*997, uint64(10+i))
		h := cl.mustH(dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1}, data)
		files = append(files, small{h.Extent, h.Offset, data})
	}
	if files[0].ext != files[1].ext || files[1].off != int64(len(files[0].data)) {
		t.Fatalf("small files not packed: %+v %+v", files[0].ext, files[1])
	}
	for id := uint64(1); id <= 3; id++ {
		for _, f := range files {
			got, err := cl.read(id, f.ext, f.off, int64(len(f.data)), f.off+int64(len(f.data)))
			if err != nil || !bytes.Equal(got, f.data) {
				t.Fatalf("node %d small file at %d: %v", id, f.off, err)
			}
		}
	}
	f := files[3]
	cl.must(1, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: f.ext, Offset: f.off, Arg: uint64(len(f.data))}, nil)
	for id := uint64(1); id <= 3; id++ {
		got, err := cl.read(id, f.ext, f.off, int64(len(f.data)), f.off+int64(len(f.data)))
		if err != nil || !bytes.Equal(got, make([]byte, len(f.data))) {
			t.Fatalf("node %d freed file: %v", id, err)
		}
		g := files[4]
		got, err = cl.read(id, g.ext, g.off, int64(len(g.data)), g.off+int64(len(g.data)))
		if err != nil || !bytes.Equal(got, g.data) {
			t.Fatalf("node %d neighbour of a freed file: %v", id, err)
		}
	}
	// Freeing again is fine (the collector retries).
	cl.must(1, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: f.ext, Offset: f.off, Arg: uint64(len(f.data))}, nil)
}

func (cl *client) mustH(h dataproto.Header, payload []byte) dataproto.Header {
	cl.t.Helper()
	rh, _ := cl.must(1, h, payload)
	return rh
}

// Overwrites go through Raft: a follower sends the writer to the leader,
// and every replica ends up with the new bytes.
func TestOverwriteThroughRaft(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	data := randBytes(512<<10, 5)
	cl.appendAll(ext, data, 128<<10)
	patch := bytes.Repeat([]byte("overwritten!"), 1000)
	const at = 100000
	var leader uint64
	eventually(t, 10*time.Second, func() error {
		for id := uint64(1); id <= 3; id++ {
			_, _, err := cl.do(id, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext, Offset: at}, patch)
			var pe *dataproto.Error
			switch {
			case err == nil:
				leader = id
				return nil
			case errors.As(err, &pe) && pe.Code == dataproto.CodeNotLeader:
				if pe.Header.Arg != 0 && pe.Header.Arg != id {
					if _, _, err := cl.do(pe.Header.Arg, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext, Offset: at}, patch); err == nil {
						leader = pe.Header.Arg
						return nil
					}
				}
			}
		}
		return errors.New("no replica took the overwrite")
	})
	t.Logf("raft leader of partition 1: node %d", leader)
	want := append([]byte(nil), data...)
	copy(want[at:], patch)
	for id := uint64(1); id <= 3; id++ {
		eventually(t, 5*time.Second, func() error {
			got, err := cl.read(id, ext, 0, int64(len(want)), int64(len(want)))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("node %d does not have the overwrite yet", id)
			}
			return nil
		})
	}
}

// A read that any replica serves right after an overwrite was
// acknowledged sees it: a follower confirms it applied everything
// committed first (a read barrier), as it may learn of the commit only
// with the leader's next message.
func TestFollowerReadSeesAcknowledgedOverwrite(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	cl.appendAll(ext, make([]byte, 4096), 4096)
	var leader uint64
	overwrite := func(v byte) error {
		patch := bytes.Repeat([]byte{v}, 4096)
		for _, id := range []uint64{leader, 1, 2, 3} {
			if id == 0 {
				continue
			}
			_, _, err := cl.do(id, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext}, patch)
			if err == nil {
				leader = id
				return nil
			}
		}
		return errors.New("no replica took the overwrite")
	}
	eventually(t, 10*time.Second, func() error { return overwrite(1) })
	for v := byte(2); v < 40; v++ {
		// Leadership may move meanwhile (to the primary): retry.
		eventually(t, 5*time.Second, func() error { return overwrite(v) })
		for id := uint64(1); id <= 3; id++ {
			got, err := cl.read(id, ext, 0, 4096, 4096)
			if err != nil {
				t.Fatalf("read from node %d after overwrite %d: %v", id, v, err)
			}
			if got[0] != v || got[4095] != v {
				t.Fatalf("node %d (leader %d) served %d after overwrite %d was acknowledged", id, leader, got[0], v)
			}
		}
	}
}

// TestRetriedOverwriteAppliesOnce: an overwrite sent again under its id
// after another overwrite of the same bytes (a client that did not get
// its answer retries) leaves the later bytes on every replica; without the
// id it would bring back the bytes the later overwrite replaced. An
// overwrite without an id still applies each time it is sent.
func TestRetriedOverwriteAppliesOnce(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	cl.appendAll(ext, make([]byte, 4096), 4096)
	overwrite := func(id uint64, b []byte) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			for node := uint64(1); node <= 3; node++ {
				if _, _, err := cl.do(node, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext, Arg: id}, b); err == nil {
					return nil
				}
			}
			return errors.New("no replica took the overwrite")
		})
	}
	everywhere := func(want []byte, what string) {
		t.Helper()
		for node := uint64(1); node <= 3; node++ {
			got, err := cl.read(node, ext, 0, 4096, 4096)
			if err != nil {
				t.Fatalf("%s: read from node %d: %v", what, node, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: node %d serves other bytes", what, node)
			}
		}
	}
	a, b := randBytes(4096, 1), randBytes(4096, 2)
	overwrite(77, a)
	overwrite(78, b)
	overwrite(77, a) // the retry
	everywhere(b, "a retry after a later overwrite")
	overwrite(0, a)
	overwrite(0, b)
	overwrite(0, a)
	everywhere(a, "overwrites without ids")
}

// A replica whose group lost its quorum cannot know whether the others
// committed an overwrite without it: it refuses reads (the reader tries
// elsewhere) rather than serve what it applied, and serves again once the
// group has a quorum.
func TestReplicaWithoutQuorumRefusesReads(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	data := randBytes(8192, 9)
	cl.appendAll(ext, data, 8192)
	eventually(t, 10*time.Second, func() error {
		_, err := cl.read(1, ext, 0, 8192, 8192)
		return err
	})
	c.Stop(2)
	c.Stop(3)
	eventually(t, 10*time.Second, func() error {
		_, err := cl.read(1, ext, 0, 8192, 8192)
		if dataproto.CodeOf(err) != dataproto.CodeNotHeld {
			return fmt.Errorf("read without a quorum: %v, want CodeNotHeld", err)
		}
		return nil
	})
	c.Restart(2)
	eventually(t, 15*time.Second, func() error {
		got, err := cl.read(1, ext, 0, 8192, 8192)
		if err == nil && !bytes.Equal(got, data) {
			t.Fatal("node 1 served other bytes after the quorum came back")
		}
		return err
	})
}

// A follower that was away catches up on return: the extents freed while
// it was away are deleted, the bytes appended without it are copied from
// the primary, and a follower whose store was lost entirely is refilled.
func TestFollowerAlignsOnReturn(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	freed := cl.create(1)
	cl.appendAll(freed, randBytes(300<<10, 6), 100<<10)
	kept := cl.create(1)
	keptData := randBytes(1<<20, 7)
	cl.appendAll(kept, keptData[:512<<10], 128<<10)

	c.Stop(3)
	// Without node 3 these fail, but nodes 1 and 2 apply them.
	if _, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: freed}, nil); dataproto.CodeOf(err) != dataproto.CodeReplicaFailed {
		t.Fatalf("free without node 3: %v", err)
	}
	if _, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: kept, Offset: 512 << 10}, keptData[512<<10:]); dataproto.CodeOf(err) != dataproto.CodeReplicaFailed {
		t.Fatalf("append without node 3: %v", err)
	}
	c.Restart(3)
	eventually(t, 10*time.Second, func() error {
		return sameExtents(cl, 1, 3)
	})
	readKept := func(node uint64) {
		t.Helper()
		// A read confirms it with the group's leader, which the restart
		// may still be electing: asked again until one answers.
		eventually(t, 10*time.Second, func() error {
			got, err := cl.read(node, kept, 0, 1<<20, 1<<20)
			if err == nil && !bytes.Equal(got, keptData) {
				t.Fatalf("node %d read other bytes than were written", node)
			}
			return err
		})
	}
	readKept(3)

	// Lose node 2's store: it is refilled from the primary.
	c.Stop(2)
	if err := os.RemoveAll(filepath.Join(c.Node(2).Dir, "dp-1")); err != nil {
		t.Fatal(err)
	}
	c.Restart(2)
	eventually(t, 10*time.Second, func() error {
		return sameExtents(cl, 1, 2)
	})
	readKept(2)
	if v := metric(t, c.Node(2).Registry, "cairn_data_aligned_bytes_total"); v < 1<<20 {
		t.Errorf("node 2 reports %v aligned bytes", v)
	}
}

// metric returns the value of a counter or gauge without labels (or the sum
// over its label sets).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// sameExtents compares the extent lists (ids and committed sizes) of two
// nodes.
func sameExtents(cl *client, a, b uint64) error {
	list := func(id uint64) ([]dataproto.ExtentEntry, error) {
		_, p, err := cl.do(id, dataproto.Header{Op: dataproto.OpListExtents, Partition: 1, Flags: dataproto.FlagForwarded}, nil)
		if err != nil {
			return nil, err
		}
		return dataproto.DecodeExtentEntries(p)
	}
	la, err := list(a)
	if err != nil {
		return err
	}
	lb, err := list(b)
	if err != nil {
		return err
	}
	if len(la) != len(lb) {
		return fmt.Errorf("node %d has %d extents, node %d %d", a, len(la), b, len(lb))
	}
	for i := range la {
		if la[i].ID != lb[i].ID || la[i].Committed != lb[i].Committed {
			return fmt.Errorf("extent %d: node %d %+v, node %d %+v", la[i].ID, a, la[i], b, lb[i])
		}
	}
	return nil
}

// Corrupt blocks are repaired from a healthy replica: one found by a read
// on node 2 (the reader finds the bytes wrong against the CRC the node
// sent, asks again with FlagVerify, the node finds the block bad, and the
// next read after the repair succeeds), one found by node 3's background
// scrubber (no read touches it).
func TestBadBlocksRepaired(t *testing.T) {
	opts := testOptions()
	opts.ScrubInterval = 400 * time.Millisecond
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: opts})
	cl := newClient(t, c)
	ext := cl.create(1)
	data := randBytes(1<<20, 8)
	cl.appendAll(ext, data, 128<<10)
	corrupt := func(node uint64, off int64) {
		path := filepath.Join(c.Node(node).Dir, "dp-1", fmt.Sprintf("ext-%d", ext))
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("garbage!"), off); err != nil {
			t.Fatal(err)
		}
	}
	// Node 2 follows: its reads pass a read barrier, quick once the group
	// has settled on a leader (else the scrubber may repair the block
	// while the read waits).
	eventually(t, 10*time.Second, func() error {
		_, err := cl.read(2, ext, 0, 128<<10, 1<<20)
		return err
	})
	corrupt(2, 200<<10) // block 1 (128 KiB blocks)
	if _, err := cl.read(2, ext, 128<<10, 128<<10, 1<<20); !errors.Is(err, dataproto.ErrPayloadCRC) {
		t.Fatalf("read of a corrupt block: %v, want a payload CRC mismatch", err)
	}
	verified := dataproto.Header{Op: dataproto.OpRead, Flags: dataproto.FlagVerify, Partition: 1, Extent: ext, Offset: 128 << 10, Arg: 128 << 10, Size: 1 << 20}
	if _, _, err := cl.do(2, verified, nil); dataproto.CodeOf(err) != dataproto.CodeCorrupt {
		t.Fatalf("verified read of a corrupt block: %v", err)
	}
	eventually(t, 10*time.Second, func() error {
		got, err := cl.read(2, ext, 0, 1<<20, 1<<20)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return errors.New("repaired extent has wrong bytes")
		}
		return nil
	})
	corrupt(3, 900<<10) // block 7
	eventually(t, 10*time.Second, func() error {
		if v := metric(t, c.Node(3).Registry, "cairn_data_repaired_blocks_total"); v < 1 {
			return fmt.Errorf("node 3 repaired %v blocks", v)
		}
		return nil
	})
	got, err := cl.read(3, ext, 0, 1<<20, 1<<20)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after scrub: %v", err)
	}
}

// The report carries the space the partition occupies on disk, which
// drops when data is freed.
func TestReportUsage(t *testing.T) {
	opts := testOptions()
	opts.UsageTTL = time.Nanosecond
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: opts})
	cl := newClient(t, c)
	ext := cl.create(1)
	cl.appendAll(ext, randBytes(4<<20, 9), 1<<20)
	used := func(id uint64) uint64 {
		r := c.Node(id).Host.Report()
		if len(r) != 1 || r[0].Id != 1 {
			t.Fatalf("report %v", r)
		}
		return r[0].UsedBytes
	}
	for id := uint64(1); id <= 3; id++ {
		if u := used(id); u < 4<<20 {
			t.Fatalf("node %d reports %d bytes used", id, u)
		}
	}
	cl.must(1, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: ext}, nil)
	for id := uint64(1); id <= 3; id++ {
		if u := used(id); u > 1<<20 {
			t.Fatalf("node %d reports %d bytes used after the free", id, u)
		}
	}
}

// fillableThird starts 3 nodes hosting partition 1 on [1 2 3], node 3's
// disk able to fill: full (disabled at start) fails its extent writes with
// ENOSPC, and room is what its statfs says (true: room, false: full).
func fillableThird(t *testing.T, tune ...func(*datanode.Options, *diskfs.Rule)) (*datanodetest.Cluster, *diskfs.Rule, *atomic.Bool) {
	full := &diskfs.Rule{Ops: diskfs.OpWrite, PathContains: "ext-", Err: syscall.ENOSPC}
	full.Disable()
	room := new(atomic.Bool)
	room.Store(true)
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes: 3, Partitions: [][]uint64{{1, 2, 3}},
		NodeOptions: func(id uint64) datanode.Options {
			o := testOptions()
			if id == 3 {
				for _, f := range tune {
					f(&o, full)
				}
				o.Store.FS = diskfs.Inject(diskfs.OS, full)
				o.FreeSpace = func(string) (uint64, uint64, error) {
					if room.Load() {
						return 50, 100, nil
					}
					return 1, 100, nil
				}
			}
			return o
		},
	})
	return c, full, room
}

// TestFullReplicaResumes: a follower whose disk fills up refuses new data
// and reports itself read-only while its disk stays full; once a tenth of
// the disk is free again it takes data by itself (no restart), and the
// chain accepts appends through it.
func TestFullReplicaResumes(t *testing.T) {
	c, full, room := fillableThird(t)
	cl := newClient(t, c)
	readOnly := func() bool {
		r := c.Node(3).Host.Report()
		return len(r) == 1 && r[0].ReadOnly
	}
	room.Store(false)
	full.Enable()
	ext := cl.create(1)
	if _, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext}, randBytes(4096, 1)); err == nil {
		t.Fatal("an append through a follower whose disk is full succeeded")
	}
	if !readOnly() {
		t.Fatal("the full follower does not report itself read-only")
	}
	time.Sleep(2 * time.Second) // several maintenance passes with the disk still full
	if !readOnly() || metric(t, c.Node(3).Registry, "cairn_data_store_reopens_total") != 0 {
		t.Fatal("the follower reopened its store to take data while its disk was still full")
	}
	full.Disable()
	room.Store(true)
	eventually(t, 10*time.Second, func() error {
		if readOnly() {
			return errors.New("still read-only with room on the disk")
		}
		return nil
	})
	eventually(t, 10*time.Second, func() error {
		ext := cl.create(1)
		_, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext}, randBytes(4096, 2))
		return err
	})
}

// A replica that comes back stale reports itself in sync only after the
// head of the chain has learned the replica set that puts it back in the
// chain. Until then the head acknowledges appends without it, so a pass
// that found nothing missing proves nothing: node 3 holds everything node 1
// listed, but must not report in sync at the new epoch while node 1 still
// lists at the old one. Once nodes 1 and 2 learn the new set, node 3 copies
// what it lacks and reports in sync.
func TestStaleReplicaWaitsForHeadsEpoch(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	ext := cl.create(1)
	data := randBytes(768<<10, 9)
	cl.appendAll(ext, data[:256<<10], 128<<10)

	// Node 3 down (partition epoch 2): nodes 1 and 2 take writes alone.
	c.Stop(3)
	part := func(epoch uint64, down, stale []uint64) []*pb.Partition {
		return []*pb.Partition{{Id: 1, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{1, 2, 3}, Down: down, Stale: stale, Epoch: epoch}}
	}
	c.SetEpoch(2)
	c.SetPartitions(part(2, []uint64{3}, nil))
	must(t, c.AssignNode(1))
	must(t, c.AssignNode(2))
	appendAt := func(off, end int) {
		t.Helper()
		cl.must(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext, Offset: int64(off)}, data[off:end])
	}
	appendAt(256<<10, 512<<10)

	// Node 3 returns and learns epoch 3 (back in the chain, stale) first.
	c.SetEpoch(3)
	c.SetPartitions(part(3, nil, []uint64{3}))
	c.Restart(3)
	inSync := func() uint64 {
		for _, r := range c.Node(3).Host.Report() {
			if r.Id == 1 {
				return r.InSyncEpoch
			}
		}
		return 0
	}
	eventually(t, 10*time.Second, func() error { return sameExtents(cl, 1, 3) })
	// Node 1, still at epoch 2, acknowledges an append node 3 never sees.
	appendAt(512<<10, 640<<10)
	for range 10 { // several of node 3's passes
		if e := inSync(); e != 0 {
			t.Fatalf("node 3 reports itself in sync at epoch %d while the head lists at epoch 2", e)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Nodes 1 and 2 learn epoch 3: node 3 catches up and reports it.
	must(t, c.AssignNode(1))
	must(t, c.AssignNode(2))
	eventually(t, 10*time.Second, func() error {
		if e := inSync(); e != 3 {
			return fmt.Errorf("node 3 reports in sync at epoch %d", e)
		}
		return nil
	})
	if got, err := cl.read(3, ext, 0, 640<<10, 640<<10); err != nil || !bytes.Equal(got, data[:640<<10]) {
		t.Fatalf("node 3 after reporting in sync: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A primary that takes over appends small files only to extents it created
// itself. The replica it replaced may hold bytes nobody acknowledged (a
// small file whose chain failed) in an extent both had, or in one under an
// id the new primary's counter has not passed; had the new primary
// appended there, that replica, aligning by size when it returns, would
// keep its own bytes at offsets where the new primary acknowledged others,
// and serve them.
func TestNewPrimaryWritesWhereTheOldOneDidNot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // a small file on all three replicas before the failure
	}{
		{"an extent both had", true},
		{"an id only the old primary used", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := three(t)
			cl := newClient(t, c)
			part := func(epoch uint64, replicas, down, stale []uint64) []*pb.Partition {
				return []*pb.Partition{{Id: 1, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: replicas, Down: down, Stale: stale, Epoch: epoch}}
			}
			if tc.first {
				cl.mustH(dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1}, randBytes(3000, 20))
			}
			// Node 2 stops before the map says so: node 1 appends a small
			// file that goes no further, and fails it.
			c.Stop(2)
			if _, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1}, randBytes(64<<10, 21)); err == nil {
				t.Fatal("a small write down a chain with a stopped replica was acknowledged")
			}
			// Epoch 2: node 1 down; node 2 heads the chain [2 3].
			c.Stop(1)
			c.SetEpoch(2)
			c.SetPartitions(part(2, []uint64{2, 3, 1}, []uint64{1}, []uint64{1}))
			c.Restart(2)
			must(t, c.AssignNode(3))
			s2 := randBytes(16<<10, 22)
			h, _ := cl.must(2, dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1}, s2)
			// Epoch 3: node 1 back, stale; it aligns from node 2.
			c.SetEpoch(3)
			c.SetPartitions(part(3, []uint64{2, 3, 1}, nil, []uint64{1}))
			c.Restart(1)
			must(t, c.AssignNode(2))
			must(t, c.AssignNode(3))
			eventually(t, 10*time.Second, func() error {
				for _, r := range c.Node(1).Host.Report() {
					if r.Id == 1 && r.InSyncEpoch == 3 {
						return nil
					}
				}
				return errors.New("node 1 has not caught up")
			})
			for id := uint64(1); id <= 3; id++ {
				got, err := cl.read(id, h.Extent, h.Offset, int64(len(s2)), h.Offset+int64(len(s2)))
				if err != nil || !bytes.Equal(got, s2) {
					t.Fatalf("node %d: the small file node 2 acknowledged at extent %d offset %d reads back %v (err %v)",
						id, h.Extent, h.Offset, describe(got, s2), err)
				}
			}
		})
	}
}

// describe says how got differs from want.
func describe(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	n := 0
	for i := range got {
		if got[i] != want[i] {
			n++
		}
	}
	return fmt.Sprintf("with %d of %d bytes different", n, len(want))
}

// TestFullReplicaServesNoOverwrittenBytes: a replica whose disk was full
// when an overwrite committed never serves the bytes it replaced, and once
// its disk has room again it reopens its store and serves the new ones.
// Before, the overwrite failed the store, the reopen's redo failed on the
// full disk, and the replica kept a closed store (every read and
// alignment "store closed") until its node restarted. (The simulation,
// test/sim, led here from stale register reads after a full disk.)
func TestFullReplicaServesNoOverwrittenBytes(t *testing.T) {
	c, full, room := fillableThird(t)
	checkFullReplicaOverwrite(t, c, full, room)
}

// TestFullReplicaComparesExtentsBeingAppended is
// TestFullReplicaServesNoOverwrittenBytes with the extent appended to
// within the full replica's quiet period (a small-file extent takes the
// next file's bytes all the time), and the full disk refusing the store's
// metadata log as well, so that the overwrite is not in its journal
// either. Alignment leaves such an extent's tail to the chain; it used to
// skip the extent whole and clear its mark all the same, and the replica
// then served the bytes the overwrite replaced (found by the simulation,
// test/sim, after a full disk).
func TestFullReplicaComparesExtentsBeingAppended(t *testing.T) {
	c, full, room := fillableThird(t, func(o *datanode.Options, full *diskfs.Rule) {
		o.AlignQuietPeriod = time.Minute
		full.PathContains = "" // every write of the store, its metadata log too
	})
	checkFullReplicaOverwrite(t, c, full, room)
}

// TestFullReplicaRefusesAReadBeforeItsFailedOverwrite: node 3's disk
// takes 300 ms to refuse the overwrite's bytes, so a read sent to node 3
// right after the overwrite was acknowledged arrives before node 3 has
// applied it. The read's barrier waits for that apply, which marks the
// extent for repair; the read must then be refused (or see the new
// bytes), never serve the old ones. The mark used to be looked at before
// the barrier, and such a read served the bytes the overwrite replaced.
func TestFullReplicaRefusesAReadBeforeItsFailedOverwrite(t *testing.T) {
	var full atomic.Bool
	slowFull := diskfs.InjectorFunc(func(op diskfs.Op) error {
		if !full.Load() || op.Kind != diskfs.OpWrite {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
		return syscall.ENOSPC
	})
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes: 3, Partitions: [][]uint64{{1, 2, 3}},
		NodeOptions: func(id uint64) datanode.Options {
			o := testOptions()
			if id == 3 {
				o.AlignQuietPeriod = time.Minute
				o.Store.FS = diskfs.Inject(diskfs.OS, slowFull)
			}
			return o
		},
	})
	cl := newClient(t, c)
	ext := cl.create(1)
	old, fresh := randBytes(4096, 1), randBytes(4096, 2)
	cl.must(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext}, old)
	eventually(t, 10*time.Second, func() error {
		if got, err := cl.read(3, ext, 0, 4096, 4096); err != nil || !bytes.Equal(got, old) {
			return fmt.Errorf("node 3 before the overwrite: %v", err)
		}
		return nil
	})
	full.Store(true)
	eventually(t, 10*time.Second, func() error {
		_, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext}, fresh)
		return err
	})
	got, err := cl.read(3, ext, 0, 4096, 4096)
	if err == nil && bytes.Equal(got, old) {
		t.Fatal("the full replica served the bytes the overwrite replaced")
	}
	if err == nil && !bytes.Equal(got, fresh) {
		t.Fatalf("the full replica served %s", describe(got, fresh))
	}
	full.Store(false)
}

// checkFullReplicaOverwrite appends a block to a new extent, overwrites it
// while node 3's disk is full, and checks that node 3 never serves the old
// bytes and serves the new ones once its disk has room.
func checkFullReplicaOverwrite(t *testing.T, c *datanodetest.Cluster, full *diskfs.Rule, room *atomic.Bool) {
	t.Helper()
	cl := newClient(t, c)
	ext := cl.create(1)
	old, fresh := randBytes(4096, 1), randBytes(4096, 2)
	cl.must(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext}, old)
	overwriteWhileFull(t, cl, full, room, ext, 0, old, fresh)
}

// TestFullReplicaRepairsAFileBesideAFreedOne: two small files share a
// block of a small-file extent; the first is freed (a hole on every
// replica), then the second is overwritten while node 3's disk is full.
// Once its disk has room, node 3 must copy the second file's new bytes
// although the block holds a hole. It used to skip a block touching a
// hole whole, clear the extent's mark all the same, and serve the bytes
// the overwrite replaced (found by the simulation, test/sim, seed 1009).
func TestFullReplicaRepairsAFileBesideAFreedOne(t *testing.T) {
	c, full, room := fillableThird(t, func(o *datanode.Options, full *diskfs.Rule) {
		full.PathContains = "" // the store's metadata log too
	})
	cl := newClient(t, c)
	gone, old, fresh := randBytes(1000, 1), randBytes(1000, 2), randBytes(1000, 3)
	f1 := cl.mustH(dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1}, gone)
	f2 := cl.mustH(dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1}, old)
	if f1.Extent != f2.Extent || f2.Offset != f1.Offset+int64(len(gone)) {
		t.Fatalf("small files not packed side by side: %+v %+v", f1, f2)
	}
	cl.must(1, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: f1.Extent, Offset: f1.Offset, Arg: uint64(len(gone))}, nil)
	eventually(t, 10*time.Second, func() error {
		got, err := cl.read(3, f1.Extent, f1.Offset, int64(len(gone)), f2.Offset+int64(len(old)))
		if err != nil || !bytes.Equal(got, make([]byte, len(gone))) {
			return fmt.Errorf("node 3 still holds the freed file: %v", err)
		}
		return nil
	})
	overwriteWhileFull(t, cl, full, room, f2.Extent, f2.Offset, old, fresh)
}

// overwriteWhileFull overwrites old, at off of extent ext, with fresh
// while node 3's disk is full, and checks that node 3 never serves the
// old bytes and serves the new ones once its disk has room.
func overwriteWhileFull(t *testing.T, cl *client, full *diskfs.Rule, room *atomic.Bool, ext uint64, off int64, old, fresh []byte) {
	t.Helper()
	n := int64(len(old))
	room.Store(false)
	full.Enable()
	eventually(t, 10*time.Second, func() error {
		_, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext, Offset: off}, fresh)
		return err
	})
	var lastErr error
	check := func(when string) (served bool) {
		t.Helper()
		got, err := cl.read(3, ext, off, n, off+n)
		if err != nil {
			lastErr = err
			return false
		}
		if bytes.Equal(got, old) {
			t.Fatalf("%s: the full replica served the bytes the overwrite replaced", when)
		}
		if !bytes.Equal(got, fresh) {
			t.Fatalf("%s: the full replica served bytes of neither write", when)
		}
		return true
	}
	for range 10 {
		check("disk full")
		time.Sleep(100 * time.Millisecond)
	}
	full.Disable()
	room.Store(true)
	deadline := time.Now().Add(40 * time.Second)
	for !check("room again") {
		if time.Now().After(deadline) {
			t.Fatalf("the replica serves nothing 40 s after its disk had room again: %v", lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
