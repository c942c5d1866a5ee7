package metapartition

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// fileName returns the i-th of a set of distinct, realistic 13-19 byte
// names ("frame_1x9kq2.jpg"), in an order unrelated to i.
func fileName(i int) string {
	prefixes := [...]string{"img", "data", "part", "log", "frame", "chunk", "model", "shard"}
	exts := [...]string{"jpg", "txt", "bin", "json", "png", "npy"}
	h := uint32(i)*2654435761 + 0x9e3779b9 // a bijection on uint32: names stay distinct
	return prefixes[h%8] + "_" + strconv.FormatUint(uint64(h), 36) + "." + exts[(h>>8)%6]
}

// createBatches encodes n file creations (inode, dentry under 1, one
// extent), perBatch Txns per batch, starting with file number first.
func createBatches(tb testing.TB, first, n, perBatch int) [][]byte {
	tb.Helper()
	var out [][]byte
	b := &metapb.Batch{NowNs: 1}
	for i := first; i < first+n; i++ {
		b.Txns = append(b.Txns, tx(createInode(reg, 0o644), createDentry(1, fileName(i), 0, reg),
			appendExtents(0, 4096, &metapb.ExtentKey{PartitionId: uint64(1 + i%50), ExtentId: uint64(i), Size: 4096})))
		if len(b.Txns) == perBatch || i == first+n-1 {
			data, err := proto.Marshal(b)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, data)
			b = &metapb.Batch{NowNs: int64(i)}
		}
	}
	return out
}

func applyAll(tb testing.TB, p *Partition, batches [][]byte) {
	for _, data := range batches {
		res, err := p.Apply(1, data)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range res.([]*metapb.TxnResult) {
			if r.Errno != 0 {
				tb.Fatalf("create failed: %s", r.Message)
			}
		}
	}
}

// BenchmarkApplyCreate measures creates (inode + dentry + one extent) per
// second through Apply, decode included, with one Txn per batch and with
// 64 Txns merged into one batch. Encoding is done outside the timer.
func BenchmarkApplyCreate(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(fmt.Sprintf("txns_per_batch=%d", per), func(b *testing.B) {
			p := newRoot(b)
			const round = 8192
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(round, b.N-done)
				b.StopTimer()
				batches := createBatches(b, done, n, per)
				b.StartTimer()
				applyAll(b, p, batches)
				done += n
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
		})
	}
}

// BenchmarkMemoryPerFile creates 1,000,000 files in one directory (each an
// inode with one extent and a 13-19 byte dentry) and reports the heap they
// take per file, live and after a snapshot round trip (Restore builds the
// trees from sorted input, which leaves their nodes about half full). Run
// with -benchtime=1x.
func BenchmarkMemoryPerFile(b *testing.B) {
	const files = 1_000_000
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for range b.N {
		base := heap()
		build := func() []byte {
			p := newRoot(b)
			for done := 0; done < files; done += 65536 {
				applyAll(b, p, createBatches(b, done, min(65536, files-done), 64))
			}
			live := heap()
			if s := p.Stats(0); s.Dentries != files || s.Inodes != files+1 {
				b.Fatalf("stats %+v", s)
			}
			b.ReportMetric(float64(live-base)/files, "bytes/file")
			data, err := p.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(data))/files, "snapshot-bytes/file")
			return data
		}
		q, _ := New(1, 0)
		if err := q.Restore(build()); err != nil { // the snapshot is garbage after this
			b.Fatal(err)
		}
		restored := heap()
		b.ReportMetric(float64(restored-base)/files, "restored-bytes/file")
		runtime.KeepAlive(q)
	}
}

// BenchmarkSnapshot measures Clone (what Apply waits for) and WriteTo (what
// runs beside it) on 100,000 files.
func BenchmarkSnapshot(b *testing.B) {
	p := newRoot(b)
	applyAll(b, p, createBatches(b, 0, 100_000, 64))
	b.Run("clone", func(b *testing.B) {
		for range b.N {
			_ = p.Clone()
		}
	})
	b.Run("write", func(b *testing.B) {
		f := p.Clone()
		for range b.N {
			var w countingWriter
			if _, err := f.WriteTo(&w); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(w))
		}
	})
}

type countingWriter int

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}
