package extentstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fdatasync is what the store's Sync does to an extent file.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// The throughput benchmarks run the store and a raw file side by side in
// one run, on the same disk, with the same bytes and the same fsync points,
// alternating chunk by chunk so that drift in the machine's load hits both
// alike. ns/op and MB/s are the store's; raw_MB/s is the raw file's and
// ratio is store/raw throughput (1.0 = no overhead).

const (
	benchPacket = 128 << 10 // the data path's packet size
	benchChunk  = 8 << 20   // one op: 64 packets, then an fsync
	benchRoll   = 128 << 20 // a new extent (and raw file) every 128 MiB
)

func benchData() []byte {
	return randBytes(rand.New(rand.NewPCG(1, 1)), benchChunk)
}

func report(b *testing.B, store, raw time.Duration, bytes int64) {
	storeMBps := float64(bytes) / store.Seconds() / 1e6
	rawMBps := float64(bytes) / raw.Seconds() / 1e6
	b.ReportMetric(rawMBps, "raw_MB/s")
	b.ReportMetric(storeMBps/rawMBps, "ratio")
}

// BenchmarkSequentialWrite: appends of 128 KiB packets to large extents,
// Sync after every 8 MiB, versus WriteAt + fdatasync of the same bytes on a
// plain file.
func BenchmarkSequentialWrite(b *testing.B) {
	dir := b.TempDir()
	s := mustOpen(b, filepath.Join(dir, "dp"), Options{Logger: quiet})
	defer s.Close()
	data := benchData()
	var (
		id         uint64
		size       int64
		raw        *os.File
		rawSize    int64
		storeT     time.Duration
		rawT       time.Duration
		rawFiles   int
		rollExtent = func() {
			if id != 0 {
				s.DeleteExtent(id) // bound the disk used
			}
			var err error
			if id, err = s.NewExtent(KindLarge); err != nil {
				b.Fatal(err)
			}
			size = 0
		}
		rollRaw = func() {
			if raw != nil {
				raw.Close()
				os.Remove(raw.Name())
			}
			rawFiles++
			var err error
			if raw, err = os.Create(filepath.Join(dir, fmt.Sprintf("raw-%d", rawFiles))); err != nil {
				b.Fatal(err)
			}
			rawSize = 0
		}
	)
	rollExtent()
	rollRaw()
	defer func() { raw.Close() }()
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for range b.N {
		if size+benchChunk > benchRoll {
			b.StopTimer()
			rollExtent()
			rollRaw()
			b.StartTimer()
		}
		t0 := time.Now()
		for off := 0; off < benchChunk; off += benchPacket {
			var err error
			if size, err = s.Append(id, size, data[off:off+benchPacket]); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Sync(); err != nil {
			b.Fatal(err)
		}
		storeT += time.Since(t0)

		b.StopTimer()
		t0 = time.Now()
		for off := 0; off < benchChunk; off += benchPacket {
			if _, err := raw.WriteAt(data[off:off+benchPacket], rawSize); err != nil {
				b.Fatal(err)
			}
			rawSize += benchPacket
		}
		if err := fdatasync(raw); err != nil {
			b.Fatal(err)
		}
		rawT += time.Since(t0)
		b.StartTimer()
	}
	b.StopTimer()
	report(b, storeT, rawT, int64(b.N)*benchChunk)
}

// BenchmarkSequentialRead: 128 KiB reads through ReadAt (every block CRC
// checked) versus plain ReadAt of a file with the same bytes; both from the
// page cache, so this measures the store's CPU cost.
func BenchmarkSequentialRead(b *testing.B) {
	dir := b.TempDir()
	s := mustOpen(b, filepath.Join(dir, "dp"), Options{Logger: quiet})
	defer s.Close()
	data := benchData()
	const total = 64 << 20
	id, _ := s.NewExtent(KindLarge)
	raw, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	for off := int64(0); off < total; off += benchChunk {
		for p := 0; p < benchChunk; p += benchPacket {
			if _, err := s.Append(id, off+int64(p), data[p:p+benchPacket]); err != nil {
				b.Fatal(err)
			}
		}
		raw.WriteAt(data, off)
	}
	s.Sync()
	raw.Sync()
	buf := make([]byte, benchPacket)
	var storeT, rawT time.Duration
	var pos int64
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		for p := 0; p < benchChunk; p += benchPacket {
			if _, err := s.ReadAt(id, buf, pos+int64(p)); err != nil {
				b.Fatal(err)
			}
		}
		storeT += time.Since(t0)
		b.StopTimer()
		t0 = time.Now()
		for p := 0; p < benchChunk; p += benchPacket {
			if _, err := raw.ReadAt(buf, pos+int64(p)); err != nil {
				b.Fatal(err)
			}
		}
		rawT += time.Since(t0)
		pos = (pos + benchChunk) % total
		b.StartTimer()
	}
	b.StopTimer()
	report(b, storeT, rawT, int64(b.N)*benchChunk)
}

// BenchmarkSmallFileWrite: small files (4 KiB, 64 KiB), each leased,
// appended, synced (the ack point) and released: one writer (an fsync pair
// per file) and 16 concurrent writers (group commit shares the fsyncs).
// files/s is the rate; raw_files/s (one writer only) is WriteAt + fdatasync
// of the same bytes appended to one plain file.
func BenchmarkSmallFileWrite(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		for _, writers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%dKiB/writers=%d", size>>10, writers), func(b *testing.B) {
				dir := b.TempDir()
				s := mustOpen(b, filepath.Join(dir, "dp"), Options{Logger: quiet})
				defer s.Close()
				data := randBytes(rand.New(rand.NewPCG(2, 2)), size)
				ctx := context.Background()
				b.SetBytes(int64(size))
				b.ResetTimer()
				t0 := time.Now()
				var wg sync.WaitGroup
				per := (b.N + writers - 1) / writers
				for w := range writers {
					n := min(per, b.N-w*per)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							l, err := s.LeaseSmall(ctx)
							if err != nil {
								b.Error(err)
								return
							}
							info, _ := s.Stat(l.Extent())
							if _, err := s.Append(l.Extent(), info.Size, data); err != nil {
								b.Error(err)
								return
							}
							if err := s.Sync(); err != nil {
								b.Error(err)
								return
							}
							l.Release()
						}
					}()
				}
				wg.Wait()
				el := time.Since(t0)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "files/s")
				if writers == 1 {
					raw, _ := os.Create(filepath.Join(dir, "raw"))
					defer raw.Close()
					t0 := time.Now()
					for i := range b.N {
						raw.WriteAt(data, int64(i*size))
						fdatasync(raw)
					}
					rawRate := float64(b.N) / time.Since(t0).Seconds()
					b.ReportMetric(rawRate, "raw_files/s")
					b.ReportMetric(float64(b.N)/el.Seconds()/rawRate, "ratio")
				}
			})
		}
	}
}
