package dataclient_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// du returns what `du -sk` reports for dir, in bytes.
func du(t testing.TB, dir string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		t.Fatalf("du %s: %v", dir, err)
	}
	kb, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	if err != nil {
		t.Fatalf("du output %q: %v", out, err)
	}
	return kb << 10
}

// Writing many 4 KiB files and deleting them gives the space back: the
// small-file extents are punched (fallocate PUNCH_HOLE), so du of the data
// node's directory returns to within 5% of where it started. The starting
// point holds one 64 MiB file, so that 5% is a margin of a few MiB, not of
// a few KiB of an empty directory; the test also logs the absolute sizes.
// 100,000 files with CAIRN_LONG=1 (or -short off and CAIRN_FILES=n), 20,000
// otherwise.
func TestSmallFilesFreeSpace(t *testing.T) {
	if _, err := exec.LookPath("du"); err != nil {
		t.Skip("no du")
	}
	files := 20000
	if os.Getenv("CAIRN_LONG") != "" {
		files = 100000
	}
	if s := os.Getenv("CAIRN_FILES"); s != "" {
		files, _ = strconv.Atoi(s)
	}
	opts := nodeOptions()
	opts.Store = extentstore.Options{CompactBytes: 1 << 20, OpenSmallExtents: 16}
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 1, Partitions: [][]uint64{{1}, {1}, {1}, {1}}, Options: opts})
	cl := newClient(t, c, dataclient.Options{})
	dir := c.Node(1).Dir
	writeFile(t, cl, randBytes(64<<20, 20), 20)
	start := du(t, dir)

	ctx := context.Background()
	keys := make([]*metapb.ExtentKey, files)
	payload := randBytes(4096, 21)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	began := time.Now()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= files {
					return
				}
				k, err := cl.WriteSmall(ctx, 0, payload)
				if err != nil {
					failed.Store(err)
					return
				}
				keys[i] = k
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	wrote := time.Since(began)
	peak := du(t, dir)
	began = time.Now()
	next.Store(0)
	const batch = 256
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(batch)) - batch
				if i >= files {
					return
				}
				if _, err := cl.Free(ctx, keys[i:min(i+batch, files)]); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	freed := time.Since(began)
	end := du(t, dir)
	t.Logf("%d files of 4 KiB: written in %s (%.0f files/s), freed in %s; du: start %s, peak %s, end %s (%+.2f%%)",
		files, wrote.Round(time.Millisecond), float64(files)/wrote.Seconds(), freed.Round(time.Millisecond),
		mib(start), mib(peak), mib(end), 100*float64(end-start)/float64(start))
	if peak < start+int64(files)*4096*9/10 {
		t.Fatalf("peak %s: the files did not take space", mib(peak))
	}
	if float64(end) > 1.05*float64(start) {
		t.Fatalf("du after deleting: %s, start %s: more than 5%% above", mib(end), mib(start))
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
