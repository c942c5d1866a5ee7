package extentstore

import (
	"context"
	"reflect"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

func seedRecords() [][]byte {
	recs := []*extentRecord{
		{id: 1, create: true, kind: KindLarge},
		{id: 7, create: true, kind: KindSmall, hasState: true, size: 1300, runs: []crcRun{{0, []uint32{1, 2, 3}}}},
		{id: 7, hasState: true, size: 2000, runs: []crcRun{{1, []uint32{9}}, {2, []uint32{4, 5}}}, punches: []span{{10, 20}, {100, 612}}},
		{id: 9, hasState: true, size: 50, runs: []crcRun{{0, []uint32{8}}}, overwrites: []*overwriteOp{{off: 3, data: []byte("hello")}, {off: 1, data: []byte("hi")}}},
		{id: 9, delete: true},
	}
	var out [][]byte
	for _, r := range recs {
		out = append(out, encodeExtentRecord(nil, r))
	}
	out = append(out, encodeHeader(header{version: formatVersion, blockSize: 512, reserved: 3}), encodeReserve(99), encodeSnapshotEnd(2, 5))
	return out
}

// FuzzDecodeRecord feeds arbitrary bytes to the frame and record decoders
// and to replay's state machine: no input may panic, and whatever decodes
// must encode back to the same record.
func FuzzDecodeRecord(f *testing.F) {
	for _, b := range seedRecords() {
		f.Add(appendFrame(nil, b))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body := data
		if b, _, err := decodeFrame(data); err == nil {
			body = b
		}
		if len(body) == 0 {
			return
		}
		switch body[0] {
		case recHeader:
			_, _ = decodeHeader(body)
		case recReserve:
			_, _ = decodeUvarints(body, recReserve, 1)
		case recSnapshotEnd:
			_, _ = decodeUvarints(body, recSnapshotEnd, 2)
		case recExtent:
			rec, err := decodeExtentRecord(body)
			if err != nil {
				return
			}
			again, err := decodeExtentRecord(encodeExtentRecord(nil, rec))
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v", err)
			}
			for k := range rec.overwrites {
				rec.overwrites[k].bodyOff, again.overwrites[k].bodyOff = 0, 0
			}
			if !reflect.DeepEqual(normalize(rec), normalize(again)) {
				t.Fatalf("round trip: %+v != %+v", rec, again)
			}
			rp := &replayed{bs: 512, exts: map[uint64]*replayedExtent{}}
			_ = rp.apply(rec, true, 0)
			_ = rp.apply(rec, true, 0)
		}
	})
}

// normalize makes empty slices nil so DeepEqual compares content.
func normalize(r *extentRecord) *extentRecord {
	c := *r
	if len(c.runs) == 0 {
		c.runs = nil
	}
	for i := range c.runs {
		if len(c.runs[i].crcs) == 0 {
			c.runs[i].crcs = nil
		}
	}
	if len(c.punches) == 0 {
		c.punches = nil
	}
	return &c
}

// FuzzOpen opens a store whose metadata log is the fuzzer's: Open must fail
// cleanly or produce a store that reads and scrubs without panicking.
func FuzzOpen(f *testing.F) {
	valid := func(extra ...[]byte) []byte {
		b := appendFrame(nil, encodeHeader(header{version: formatVersion, blockSize: 512, reserved: 1}))
		b = appendFrame(b, encodeSnapshotEnd(0, 1))
		for _, r := range extra {
			b = appendFrame(b, r)
		}
		return b
	}
	seeds := seedRecords()
	f.Add(valid())
	f.Add(valid(seeds[0]))
	f.Add(valid(seeds[1], seeds[2]))
	f.Add(valid(seeds[1], seeds[2], seeds[3][:len(seeds[3])-2]))
	f.Fuzz(func(t *testing.T, meta []byte) {
		mem := diskfs.NewMem()
		if err := mem.MkdirAll("/dp"); err != nil {
			t.Fatal(err)
		}
		mf, _ := mem.Create("/dp/META")
		mf.WriteAt(meta, 0)
		mf.Sync()
		mf.Close()
		mem.SyncDir("/dp")
		// Refuse huge files: the fuzzer may describe extents of terabytes.
		fs := diskfs.Inject(mem, diskfs.InjectorFunc(func(op diskfs.Op) error {
			if op.Kind == diskfs.OpTruncate && op.Off > 4<<20 {
				return syscall.EFBIG
			}
			return nil
		}))
		s, err := Open("/dp", smallOpts(fs))
		if err != nil {
			return
		}
		defer s.Close()
		for _, info := range s.Extents() {
			p := make([]byte, 1024)
			_, _ = s.ReadAt(info.ID, p, info.Size/2)
		}
		_, _ = s.Scrub(context.Background(), ScrubOptions{MaxBad: 10})
	})
}
