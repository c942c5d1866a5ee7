package dataclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/metapb"
)

type testChunk struct {
	fp   chunker.Fingerprint
	data []byte
	loc  dataclient.ChunkLocation
}

// writeChunks stores chunks of the given sizes and checks their locations.
func writeChunks(t *testing.T, cl *dataclient.Client, seed uint64, sizes ...int) []testChunk {
	t.Helper()
	var out []testChunk
	for i, n := range sizes {
		data := randBytes(n, seed+uint64(i))
		fp := chunker.Sum(chunker.FastCDC1, data)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		loc, err := cl.WriteChunk(ctx, fp, data)
		cancel()
		if err != nil {
			t.Fatalf("write chunk %d: %v", i, err)
		}
		if loc.Size != uint64(n) || loc.ExtentID == 0 {
			t.Fatalf("chunk %d of %d bytes stored at %v", i, n, loc)
		}
		out = append(out, testChunk{fp, data, loc})
	}
	return out
}

func readChunk(cl *dataclient.Client, ch testChunk) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cl.ReadChunk(ctx, ch.loc, ch.fp)
}

// corruptOnDisk overwrites bytes of chunk ch's stored copy on node id,
// under the extent store (its block checksums no longer match).
func corruptOnDisk(t *testing.T, c *datanodetest.Cluster, id uint64, ch testChunk, at uint64) {
	t.Helper()
	path := filepath.Join(c.Node(id).Dir, fmt.Sprintf("dp-%d", ch.loc.PartitionID), fmt.Sprintf("ext-%d", ch.loc.ExtentID))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("not the chunk"), int64(ch.loc.Offset+at)); err != nil {
		t.Fatal(err)
	}
}

// waitOnDisk waits until node id's copy of ch holds want at offset at.
func waitOnDisk(t *testing.T, c *datanodetest.Cluster, id uint64, ch testChunk, at uint64, want []byte) {
	t.Helper()
	path := filepath.Join(c.Node(id).Dir, fmt.Sprintf("dp-%d", ch.loc.PartitionID), fmt.Sprintf("ext-%d", ch.loc.ExtentID))
	got := make([]byte, len(want))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.ReadAt(got, int64(ch.loc.Offset+at))
		f.Close()
		if err == nil && bytes.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d never applied the write: %q, %v", id, got, err)
		}
	}
}

func TestWriteAndReadChunks(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	chunks := writeChunks(t, cl, 1, 65536, dataproto.MaxChunk, 262147, 64)
	for i, ch := range chunks {
		got, err := readChunk(cl, ch)
		if err != nil || !bytes.Equal(got, ch.data) {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	ctx := context.Background()
	tests := []struct {
		name string
		fp   chunker.Fingerprint
		data []byte
		want error
	}{
		{"above MaxChunk", chunker.Sum(chunker.FastCDC1, make([]byte, dataproto.MaxChunk+1)), make([]byte, dataproto.MaxChunk+1), dataclient.ErrChunkTooLarge},
		{"empty", chunker.Sum(chunker.FastCDC1, nil), nil, dataclient.ErrChunkTooLarge},
		{"bytes that do not match", chunks[0].fp, chunks[1].data, dataclient.ErrFingerprintMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := cl.Stats().WriteFailures
			_, err := cl.WriteChunk(ctx, tc.fp, tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if n := cl.Stats().WriteFailures - before; n != 0 {
				t.Fatalf("the write was retried elsewhere %d times", n)
			}
		})
	}
	if _, err := cl.WriteChunk(ctx, chunker.Fingerprint{}, []byte("x")); err == nil {
		t.Fatal("zero fingerprint accepted")
	}
	// A wrong fingerprint on read is never answered with the bytes.
	if got, err := cl.ReadChunk(ctx, chunks[0].loc, chunks[1].fp); !errors.Is(err, dataclient.ErrChunkCorrupt) || got != nil {
		t.Fatalf("read with another chunk's fingerprint: %d bytes, %v", len(got), err)
	}
}

// A partition that fails a chunk write is left for another.
func TestWriteChunkFailsOver(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 4, Partitions: [][]uint64{{1, 2, 3}, {2, 3, 4}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{ExcludeFor: time.Minute})
	c.Stop(1) // partition 1's primary; the client still believes it alive
	for i := 0; i < 50 && cl.Stats().WriteFailures == 0; i++ {
		for _, ch := range writeChunks(t, cl, uint64(10+i), 5000) {
			if ch.loc.PartitionID != 2 {
				t.Fatalf("chunk stored on partition %d, whose primary is down", ch.loc.PartitionID)
			}
			if got, err := readChunk(cl, ch); err != nil || !bytes.Equal(got, ch.data) {
				t.Fatalf("read back: %v", err)
			}
		}
	}
	if cl.Stats().WriteFailures == 0 {
		t.Fatal("no write ever tried partition 1")
	}
}

// Stored bytes that fail the store's checksum on one replica are read from
// another; when every replica's copy is corrupt ReadChunk fails with
// ErrChunkCorrupt naming the chunk.
func TestReadChunkCorruption(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	chunks := writeChunks(t, cl, 20, 300000, 300000, 300000)

	corruptOnDisk(t, c, 1, chunks[0], 10) // node 1 is read first
	before := cl.Stats().ReadFailovers
	if got, err := readChunk(cl, chunks[0]); err != nil || !bytes.Equal(got, chunks[0].data) {
		t.Fatalf("chunk corrupt on one replica: %v", err)
	}
	if cl.Stats().ReadFailovers == before {
		t.Fatal("the corrupt replica was not passed over")
	}

	for id := uint64(1); id <= 3; id++ {
		corruptOnDisk(t, c, id, chunks[1], 150000)
	}
	got, err := readChunk(cl, chunks[1])
	if !errors.Is(err, dataclient.ErrChunkCorrupt) || got != nil {
		t.Fatalf("chunk corrupt everywhere: %d bytes, %v", len(got), err)
	}
	if !strings.Contains(err.Error(), chunks[1].fp.String()) {
		t.Fatalf("error does not name the chunk: %v", err)
	}
}

// Bytes replaced through Raft pass every replica's store checksums; only
// the fingerprint tells, and ReadChunk fails with ErrChunkCorrupt.
func TestReadChunkWrongBytes(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	chunks := writeChunks(t, cl, 40, 300000, 300000)
	ch := chunks[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.Overwrite(ctx, ch.loc.PartitionID, ch.loc.ExtentID, int64(ch.loc.Offset)+1000, []byte("misdirected write")); err != nil {
		t.Fatal(err)
	}
	// The overwrite is acknowledged once a quorum applied it; a lagging
	// replica still holds the right bytes and would (correctly) serve them.
	for id := uint64(1); id <= 3; id++ {
		waitOnDisk(t, c, id, ch, 1000, []byte("misdirected write"))
	}
	if got, err := readChunk(cl, ch); !errors.Is(err, dataclient.ErrChunkCorrupt) || got != nil {
		t.Fatalf("chunk with wrong bytes everywhere: %d bytes, %v", len(got), err)
	}
	if got, err := readChunk(cl, chunks[0]); err != nil || !bytes.Equal(got, chunks[0].data) {
		t.Fatalf("untouched chunk: %v", err)
	}
}

// A chunk freed with Free (its location as an extent key) is punched out of
// the shared extent: the chunks around it read intact, and the freed one is
// reported corrupt rather than returned as zeros.
func TestFreeChunk(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	chunks := writeChunks(t, cl, 30, 90001, 200003, 70001)
	if chunks[1].loc.ExtentID != chunks[0].loc.ExtentID || chunks[2].loc.Offset != chunks[1].loc.Offset+chunks[1].loc.Size {
		t.Fatalf("chunks not packed: %v %v %v", chunks[0].loc, chunks[1].loc, chunks[2].loc)
	}
	ctx := context.Background()
	if failed, err := cl.Free(ctx, []*metapb.ExtentKey{chunks[1].loc.ExtentKey(0)}); err != nil || len(failed) != 0 {
		t.Fatalf("free: %v %v", failed, err)
	}
	for id := uint64(1); id <= 3; id++ {
		waitOnDisk(t, c, id, chunks[1], 8192, make([]byte, 64))
	}
	for _, i := range []int{0, 2} {
		if got, err := readChunk(cl, chunks[i]); err != nil || !bytes.Equal(got, chunks[i].data) {
			t.Fatalf("neighbour %d of a freed chunk: %v", i, err)
		}
	}
	if got, err := readChunk(cl, chunks[1]); !errors.Is(err, dataclient.ErrChunkCorrupt) || got != nil {
		t.Fatalf("freed chunk: %d bytes, %v", len(got), err)
	}
}
