package datanode_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/dataproto"
)

type storedChunk struct {
	ext  uint64
	off  int64
	data []byte
}

func chunkPayload(fp chunker.Fingerprint, data []byte) []byte { return append(fp[:], data...) }

// extentSizes lists node id's extents of partition 1 by id.
func (cl *client) extentSizes(id uint64) map[uint64]int64 {
	cl.t.Helper()
	_, list := cl.must(id, dataproto.Header{Op: dataproto.OpListExtents, Partition: 1, Flags: dataproto.FlagForwarded}, nil)
	es, err := dataproto.DecodeExtentEntries(list)
	if err != nil {
		cl.t.Fatal(err)
	}
	out := map[uint64]int64{}
	for _, e := range es {
		out[e.ID] = e.Size
	}
	return out
}

func (cl *client) checkChunk(id uint64, c storedChunk) error {
	got, err := cl.read(id, c.ext, c.off, int64(len(c.data)), c.off+int64(len(c.data)))
	if err != nil {
		return fmt.Errorf("node %d: chunk at %d/%d: %w", id, c.ext, c.off, err)
	}
	if !bytes.Equal(got, c.data) {
		return fmt.Errorf("node %d: chunk at %d/%d: wrong bytes", id, c.ext, c.off)
	}
	return nil
}

// Chunks are verified, packed into one shared small extent on every
// replica of the chain, and read back from each; chunks larger than the
// small-file threshold (stored in pieces) and of the largest size a frame
// carries included.
func TestChunksStoredAlongTheChain(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	var chunks []storedChunk
	for i, n := range []int{70001, 300007, dataproto.MaxChunk, 4099} {
		data := randBytes(n, uint64(100+i))
		h := cl.mustH(dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(chunker.Sum(chunker.FastCDC1, data), data))
		if h.Kind != 2 || h.Arg != uint64(h.Offset)+uint64(n) {
			t.Fatalf("chunk %d answered %+v", i, h)
		}
		chunks = append(chunks, storedChunk{h.Extent, h.Offset, data})
	}
	for i := 1; i < len(chunks); i++ {
		prev := chunks[i-1]
		if chunks[i].ext != prev.ext || chunks[i].off != prev.off+int64(len(prev.data)) {
			t.Fatalf("chunks not packed: %d at %d/%d after %d bytes at %d/%d", i, chunks[i].ext, chunks[i].off, len(prev.data), prev.ext, prev.off)
		}
	}
	for id := uint64(1); id <= 3; id++ {
		for _, ch := range chunks {
			if err := cl.checkChunk(id, ch); err != nil {
				t.Fatal(err)
			}
		}
	}
	total := 0.0
	for _, ch := range chunks {
		total += float64(len(ch.data))
	}
	eventually(t, 5*time.Second, func() error {
		for id := uint64(1); id <= 3; id++ {
			reg := c.Node(id).Registry
			writes := metric(t, reg, "cairn_data_chunk_writes_total")
			bytes := metric(t, reg, "cairn_data_chunk_bytes_total")
			if writes != float64(len(chunks)) || bytes != total {
				return fmt.Errorf("node %d counted %v chunks of %v bytes, want %d of %v", id, writes, bytes, len(chunks), total)
			}
		}
		return nil
	})
}

// A chunk whose bytes do not hash to its fingerprint is refused by the
// primary before anything is stored or forwarded; a forwarded one that
// does not match is refused by the replica. Malformed chunk writes are bad
// requests.
func TestChunkFingerprintChecked(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	data := randBytes(200000, 7)
	fp := chunker.Sum(chunker.FastCDC1, data)
	h := cl.mustH(dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(fp, data))
	ext, end := h.Extent, int64(h.Arg)
	before := map[uint64]map[uint64]int64{}
	for id := uint64(1); id <= 3; id++ {
		before[id] = cl.extentSizes(id)
		if before[id][ext] != end {
			t.Fatalf("node %d holds %d bytes of extent %d, want %d", id, before[id][ext], ext, end)
		}
	}
	wrong := bytes.Clone(data)
	wrong[123456] ^= 0x40
	unknown := fp
	unknown[0] = 99
	tests := []struct {
		name    string
		node    uint64
		h       dataproto.Header
		payload []byte
		want    dataproto.Code
	}{
		{"bytes changed after fingerprinting", 1, dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(fp, wrong), dataproto.CodeFingerprintMismatch},
		{"fingerprint of other bytes", 1, dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(chunker.Sum(chunker.FastCDC1, []byte("x")), data), dataproto.CodeFingerprintMismatch},
		{"corrupted forward without a CRC", 2, dataproto.Header{Op: dataproto.OpWriteChunk, Flags: dataproto.FlagForwarded | dataproto.FlagCreate | dataproto.FlagNoCRC, Kind: 2, Partition: 1, Extent: ext, Offset: end}, chunkPayload(fp, wrong), dataproto.CodeFingerprintMismatch},
		{"unknown algorithm", 1, dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(unknown, data), dataproto.CodeBadRequest},
		{"no chunk bytes", 1, dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, fp[:], dataproto.CodeBadRequest},
		{"forward without an extent", 2, dataproto.Header{Op: dataproto.OpWriteChunk, Flags: dataproto.FlagForwarded | dataproto.FlagCreate, Partition: 1}, chunkPayload(fp, data), dataproto.CodeBadRequest},
		{"client chunk write to a follower", 2, dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(fp, data), dataproto.CodeNotPrimary},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := cl.do(tc.node, tc.h, tc.payload)
			if code := dataproto.CodeOf(err); code != tc.want {
				t.Fatalf("got %v (%v), want %v", code, err, tc.want)
			}
		})
	}
	for id := uint64(1); id <= 3; id++ {
		after := cl.extentSizes(id)
		if fmt.Sprint(after) != fmt.Sprint(before[id]) {
			t.Fatalf("node %d: extents %v after refused chunks, were %v", id, after, before[id])
		}
	}
	if v := metric(t, c.Node(1).Registry, "cairn_data_chunk_fingerprint_mismatches_total"); v != 2 {
		t.Errorf("node 1 counted %v fingerprint mismatches, want 2", v)
	}
	if v := metric(t, c.Node(2).Registry, "cairn_data_chunk_fingerprint_mismatches_total"); v != 1 {
		t.Errorf("node 2 counted %v fingerprint mismatches, want 1", v)
	}
	// The connection and the extent go on: a good chunk lands right after.
	h = cl.mustH(dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(fp, data))
	if h.Extent != ext || h.Offset != end {
		t.Fatalf("next chunk at %d/%d, want %d/%d", h.Extent, h.Offset, ext, end)
	}
}

// Freeing a chunk between two others punches exactly its range on every
// replica (it reads as zeros); the neighbours, which share blocks with it,
// read intact.
func TestFreeChunkKeepsNeighbours(t *testing.T) {
	c := three(t)
	cl := newClient(t, c)
	var chunks []storedChunk
	// Odd sizes, so the freed range starts and ends inside blocks that
	// hold neighbour bytes.
	for i, n := range []int{100003, 400009, 150001} {
		data := randBytes(n, uint64(200+i))
		h := cl.mustH(dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1}, chunkPayload(chunker.Sum(chunker.FastCDC1, data), data))
		chunks = append(chunks, storedChunk{h.Extent, h.Offset, data})
	}
	mid := chunks[1]
	free := dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: mid.ext, Offset: mid.off, Arg: uint64(len(mid.data))}
	cl.must(1, free, nil)
	for id := uint64(1); id <= 3; id++ {
		for _, ch := range []storedChunk{chunks[0], chunks[2]} {
			if err := cl.checkChunk(id, ch); err != nil {
				t.Fatalf("neighbour of a freed chunk: %v", err)
			}
		}
		got, err := cl.read(id, mid.ext, mid.off, int64(len(mid.data)), mid.off+int64(len(mid.data)))
		if err != nil || !bytes.Equal(got, make([]byte, len(mid.data))) {
			t.Fatalf("node %d: freed chunk still has bytes (%v)", id, err)
		}
	}
	_, list := cl.must(3, dataproto.Header{Op: dataproto.OpListExtents, Partition: 1, Flags: dataproto.FlagForwarded}, nil)
	es, _ := dataproto.DecodeExtentEntries(list)
	if len(es) != 1 || es[0].Punched != int64(len(mid.data)) {
		t.Fatalf("node 3 extents after the free: %+v", es)
	}
	cl.must(1, free, nil) // the collector may retry
}
