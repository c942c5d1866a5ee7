package integration

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPageCacheCloseToOpen checks the mount's kept page cache (pkg/fusefs,
// pagecache.go) on two mounts of one volume: a file read again in the same
// mount is served from the kernel's pages (no FUSE read reaches the mount),
// once the kernel dropped them from the mount's file cache (pkg/client,
// filecache.go: no data node read), and every change the other mount
// closed before an open is seen by that open, also when this mount wrote
// the file through a handle that was open across the other mount's change.
func TestPageCacheCloseToOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pc")
	_, a := startMounted(t, dir)
	b := startSecondMount(t, dir)
	maddr := mountMetricsAddr(t, a)
	rng := rand.New(rand.NewPCG(3, 4))
	random := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		return p
	}
	const size = 1 << 20
	want := random(size)
	fa, fb := filepath.Join(a, "f"), filepath.Join(b, "f")
	must(t, os.WriteFile(fa, want, 0o644))
	check := func(step, path string) {
		t.Helper()
		got, err := os.ReadFile(path)
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %s reads %d bytes, equal prefix %d of %d", step, path, len(got), commonPrefix(got, want), len(want))
		}
	}
	// overwrite writes p at off through a new handle of path and closes it.
	overwrite := func(path string, off int, p []byte) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		must(t, err)
		_, err = f.WriteAt(p, int64(off))
		must(t, err)
		must(t, f.Close())
		copy(want[off:], p)
	}

	// Read twice in mount a: the second read comes from the kernel's pages.
	// Unless the mount lost its change feed in between (a feed answer late
	// by half the staleness bound, on a loaded host): it then rightly
	// makes the kernel drop every name it holds, and Linux evicts the
	// inode of a dropped name no open file holds, pages and all. Only
	// then is the pair read again.
	for try := 1; ; try++ {
		check("first read", fa)
		lost0, _ := scrapeSum(t, maddr, "cairn_fuse_feed_losses_total", true)
		read0 := metricValue(t, maddr, "cairn_fuse_read_bytes_total")
		check("second read", fa)
		d := metricValue(t, maddr, "cairn_fuse_read_bytes_total") - read0
		if d == 0 {
			break
		}
		if lost, _ := scrapeSum(t, maddr, "cairn_fuse_feed_losses_total", true); lost == lost0 || try == 5 {
			t.Errorf("a second read of an unchanged file reached the mount: %.0f bytes read through FUSE (try %d; feed losses %.0f before, %.0f after)", d, try, lost0, lost)
			break
		}
		t.Logf("the mount lost its change feed between the reads (try %d): reading again", try)
	}

	// The kernel drops the pages: the next read reaches the mount, which
	// keeps the file whole (it is 1 MiB, the file cache's bound), so the
	// read after another drop asks no data node.
	evict := func(path string) {
		t.Helper()
		f, err := os.Open(path)
		must(t, err)
		defer f.Close()
		must(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
	}
	evict(fa)
	check("after the kernel dropped the pages", fa)
	fetched0 := metricValue(t, maddr, "cairn_client_data_received_bytes_total")
	hits0 := metricValue(t, maddr, "cairn_client_file_cache_hits_total")
	evict(fa)
	check("again after the kernel dropped the pages", fa)
	if d := metricValue(t, maddr, "cairn_client_data_received_bytes_total") - fetched0; d != 0 {
		t.Errorf("a read of an unchanged file the mount keeps fetched %.0f bytes from data nodes", d)
	}
	if metricValue(t, maddr, "cairn_client_file_cache_hits_total") == hits0 {
		t.Error("a read of an unchanged file the mount keeps was not served from its file cache")
	}

	// The other mount overwrites in place (same size) and closes: a's next
	// open must see it although a has every page of the file cached, and
	// the file in its file cache.
	overwrite(fb, 300<<10, random(4096))
	check("after b's overwrite", fa)
	evict(fa)
	check("after b's overwrite, the kernel's pages dropped", fa)

	// a writes through a handle opened before b's next change; b's bytes
	// must not be hidden by a's pages once a's handle closes and a opens
	// the file again.
	h, err := os.OpenFile(fa, os.O_RDWR, 0)
	must(t, err)
	overwrite(fb, 100<<10, random(4096))
	mine := random(4096)
	_, err = h.WriteAt(mine, 700<<10)
	must(t, err)
	must(t, h.Close())
	copy(want[700<<10:], mine)
	check("after a's write over b's change", fa)
	evict(fa)
	check("after a's write over b's change, the kernel's pages dropped", fa)
	check("the same, from b", fb)

	// a's own write alone keeps its pages current: the next reads in a
	// read a's bytes, and b sees them too.
	overwrite(fa, 900<<10, random(4096))
	check("after a's own write", fa)
	check("a's write, from b", fb)
}

// TestWriteDropsCapabilities: a write drops a file's capabilities
// (security.capability), also when the mount remembers that the file had
// none a moment before (pkg/fusefs, xattrcache.go) and the capability was
// set through the same mount in between.
func TestWriteDropsCapabilities(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "caps")
	_, a := startMounted(t, dir)
	p := filepath.Join(a, "prog")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o755)
	must(t, err)
	defer f.Close()
	_, err = f.Write([]byte("first")) // the mount learns: no capabilities
	must(t, err)
	// VFS_CAP_REVISION_2 with CAP_NET_BIND_SERVICE permitted.
	caps := []byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	must(t, unix.Setxattr(p, "security.capability", caps, 0))
	if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); err != nil {
		t.Fatalf("capability not set: %v", err)
	}
	_, err = f.Write([]byte("second"))
	must(t, err)
	if n, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); err != unix.ENODATA {
		t.Fatalf("after a write the file still has capabilities (%d bytes, %v)", n, err)
	}
}

// TestPageCacheOldHandleDoesNotRefill: a handle of mount a opened before
// mount b's overwrite reads after a later open of mount a saw the
// overwrite and dropped the kernel's pages. What that read returns fills
// the kernel's pages, which every handle shares: the later handle must
// still read what b wrote, not the older bytes the first handle's view
// (and the mount's file cache of that Version) holds. A nemesis run found
// this as a stale read on a client host with a slow link.
func TestPageCacheOldHandleDoesNotRefill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pco")
	_, a := startMounted(t, dir)
	b := startSecondMount(t, dir)
	old := bytes.Repeat([]byte("old-"), 64<<10/4)
	fa, fb := filepath.Join(a, "f"), filepath.Join(b, "f")
	must(t, os.WriteFile(fa, old, 0o644))
	d, err := os.Open(fa)
	must(t, err)
	// The kernel drops the pages the write left, so that the read below
	// reaches the mount and fills its file cache.
	must(t, unix.Fadvise(int(d.Fd()), 0, 0, unix.FADV_DONTNEED))
	must(t, d.Close())
	got, err := os.ReadFile(fa) // the kernel's pages and the file cache hold old
	must(t, err)
	if !bytes.Equal(got, old) {
		t.Fatal("first read differs")
	}
	h1, err := os.Open(fa) // opened at the old Version
	must(t, err)
	defer h1.Close()

	fresh := bytes.Repeat([]byte("new-"), len(old)/4)
	w, err := os.OpenFile(fb, os.O_WRONLY, 0)
	must(t, err)
	_, err = w.WriteAt(fresh, 0)
	must(t, err)
	must(t, w.Close())

	h2, err := os.Open(fa) // sees the overwrite: the pages go
	must(t, err)
	defer h2.Close()
	buf := make([]byte, len(old))
	if _, err := h1.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, old) && !bytes.Equal(buf, fresh) {
		t.Fatalf("the old handle read neither version: %q...", buf[:16])
	}
	if _, err := h2.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, fresh) {
		t.Fatalf("an open after the other mount's close reads %q..., want %q...", buf[:16], fresh[:16])
	}
}

// TestPageCacheConcurrentOpens: after mount b overwrites a file that mount
// a has cached, several processes' opens at once through a must all read
// b's bytes. The first open to see the new Version used to record it
// before the kernel had dropped the pages (the reply without
// FOPEN_KEEP_CACHE drops them only when the opening process runs again),
// and a second open whose reply kept the pages could read the old bytes
// first (a nemesis run: two reads on one host at once, the old value and
// the new).
func TestPageCacheConcurrentOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pcc")
	_, a := startMounted(t, dir)
	b := startSecondMount(t, dir)
	const size, readers, rounds = 64 << 10, 6, 150
	fa, fb := filepath.Join(a, "f"), filepath.Join(b, "f")
	block := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }
	must(t, os.WriteFile(fa, block(0), 0o644))
	stale := 0
	for i := 1; i <= rounds; i++ {
		// a caches the current bytes, b overwrites them and closes.
		if got, err := os.ReadFile(fa); err != nil || len(got) != size {
			t.Fatalf("round %d: read through a: %v, %d bytes", i, err, len(got))
		}
		f, err := os.OpenFile(fb, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(block(i), 0)
		must(t, err)
		must(t, f.Close())
		var wg sync.WaitGroup
		got := make([][]byte, readers)
		errs := make([]error, readers)
		for r := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[r], errs[r] = os.ReadFile(fa)
			}()
		}
		wg.Wait()
		for r := range readers {
			switch {
			case errs[r] != nil:
				t.Fatalf("round %d: reader %d: %v", i, r, errs[r])
			case !bytes.Equal(got[r], block(i)):
				stale++
				t.Errorf("round %d: reader %d opened after b's close and read byte %d, want %d", i, r, got[r][0], byte(i))
			}
		}
		if stale > 5 {
			t.FailNow()
		}
	}
}
