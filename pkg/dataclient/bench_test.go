package dataclient_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// benchBytes is the file size of the sequential benchmark (CAIRN_BENCH_MIB
// overrides it).
func benchBytes() int {
	if s := os.Getenv("CAIRN_BENCH_MIB"); s != "" {
		var n int
		fmt.Sscan(s, &n)
		if n > 0 {
			return n << 20
		}
	}
	return 256 << 20
}

// BenchmarkSequentialVsLocal measures, in one run, one dataclient writing
// and then reading a file through a 3-replica partition on 3 in-process
// data nodes (loopback TCP, real disks), against writing the same bytes to
// three local files (fsynced, as Cairn acknowledges only durable bytes)
// and reading the three back. Reported: MB/s of each (the best iteration of
// each, since the machine is shared and neighbours only ever slow a run
// down), and Cairn's throughput as a fraction of the local one
// (write_ratio, read_ratio). Both reads come from the page cache, as they
// would right after writing.
//
//	go test ./pkg/dataclient -run '^$' -bench SequentialVsLocal -benchtime 3x
//
// CAIRN_BENCH_NOSENDFILE=1 makes the data nodes copy read responses through
// user space instead of using sendfile.
func BenchmarkSequentialVsLocal(b *testing.B) {
	opts := nodeOptions()
	opts.Server.DisableSendfile = os.Getenv("CAIRN_BENCH_NOSENDFILE") != ""
	c := datanodetest.Start(b, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: opts})
	cl := newClient(b, c, dataclient.Options{})
	size := benchBytes()
	data := randBytes(size, 99)
	dir := b.TempDir()
	var cw, lw, cr, lr time.Duration // best of the iterations
	best := func(d *time.Duration, since time.Time) {
		if t := time.Since(since); *d == 0 || t < *d {
			*d = t
		}
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		w := cl.NewWriter(context.Background(), 0)
		for off := 0; off < size; off += 1 << 20 {
			if _, err := w.Write(data[off:min(off+1<<20, size)]); err != nil {
				b.Fatal(err)
			}
		}
		keys, err := w.Close()
		if err != nil {
			b.Fatal(err)
		}
		best(&cw, start)

		start = time.Now()
		paths := make([]string, 3)
		for r := range 3 {
			paths[r] = filepath.Join(dir, fmt.Sprintf("copy%d-%d", r, i))
			writeLocal(b, paths[r], data)
		}
		best(&lw, start)

		start = time.Now()
		r := cl.NewReader(context.Background(), keys, int64(size))
		n, err := io.CopyBuffer(io.Discard, r, make([]byte, 1<<20))
		r.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("read %d: %v", n, err)
		}
		best(&cr, start)

		start = time.Now()
		for _, p := range paths {
			readLocal(b, p, size)
		}
		best(&lr, start)

		b.StopTimer()
		if _, err := cl.Free(context.Background(), keys); err != nil {
			b.Fatal(err)
		}
		for _, p := range paths {
			os.Remove(p)
		}
		b.StartTimer()
	}
	mbps := func(d time.Duration) float64 { return float64(size) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(cw), "cairn_write_MB/s")
	b.ReportMetric(mbps(lw), "local3x_write_MB/s")
	b.ReportMetric(mbps(cr), "cairn_read_MB/s")
	b.ReportMetric(mbps(lr), "local3x_read_MB/s")
	b.ReportMetric(lw.Seconds()/cw.Seconds(), "write_ratio")
	b.ReportMetric(lr.Seconds()/cr.Seconds(), "read_ratio")
}

func writeLocal(b *testing.B, path string, data []byte) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	for off := 0; off < len(data); off += 128 << 10 {
		if _, err := f.Write(data[off:min(off+128<<10, len(data))]); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
}

func readLocal(b *testing.B, path string, size int) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n, err := io.CopyBuffer(io.Discard, f, make([]byte, 1<<20))
	if err != nil || n != int64(size) {
		b.Fatalf("read %d: %v", n, err)
	}
}

// BenchmarkSmallFiles measures small files created and written per second:
// dataclient.WriteSmall into a 3-replica partition on 3 in-process data
// nodes (each acknowledged once durable on all three), against creating,
// writing and fsyncing the same files three times in a local directory,
// both with 16 writers. Reported: files/s of each and Cairn's fraction of
// the local rate (ratio).
//
//	go test ./pkg/dataclient -run '^$' -bench SmallFiles -benchtime 20000x
func BenchmarkSmallFiles(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			c := datanodetest.Start(b, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}, Options: nodeOptions()})
			cl := newClient(b, c, dataclient.Options{})
			data := randBytes(size, 7)
			dir := b.TempDir()
			const writers = 16
			keys := make([]*metapb.ExtentKey, b.N)
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			parallel(b, writers, b.N, func(i int) error {
				k, err := cl.WriteSmall(context.Background(), 0, data)
				keys[i] = k
				return err
			})
			cairn := time.Since(start)
			start = time.Now()
			parallel(b, writers, b.N, func(i int) error {
				for r := range 3 {
					f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%d-%d", i, r)))
					if err != nil {
						return err
					}
					if _, err := f.Write(data); err != nil {
						return err
					}
					if err := f.Sync(); err != nil {
						return err
					}
					f.Close()
				}
				return nil
			})
			local := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/cairn.Seconds(), "cairn_files/s")
			b.ReportMetric(float64(b.N)/local.Seconds(), "local3x_files/s")
			b.ReportMetric(local.Seconds()/cairn.Seconds(), "ratio")
		})
	}
}

// parallel runs f(0..n-1) on workers goroutines.
func parallel(b *testing.B, workers, n int, f func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}
