package diskcache

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

const dir = "/cache"

// space is a file system's free space as a test sets it.
type space struct{ free, total atomic.Int64 }

func (s *space) get(string) (int64, int64, error) { return s.free.Load(), s.total.Load(), nil }

func plenty() *space {
	s := &space{}
	s.free.Store(1 << 40)
	s.total.Store(1 << 41)
	return s
}

func open(t *testing.T, fs diskfs.FS, limit int64, sp *space, tune ...func(*Options)) *Cache {
	t.Helper()
	o := Options{Dir: dir, Limit: limit, FS: fs, Space: sp.get}
	for _, f := range tune {
		f(&o)
	}
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func block(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// key names block blk of inode ino; blocks lie 1 MiB apart, so that the
// tests' blocks of any size up to that never overlap.
func key(ino uint64, blk int64) Key { return Key{Ino: ino, Gen: "10-5.7-5.7", Off: blk << 20} }

// path is the file of k's version.
func path(k Key) string { return filepath.Join(dir, verKey{k.Ino, k.Gen}.name()) }

// settle waits until the writer has nothing queued.
func settle(t *testing.T, c *Cache) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		idle := len(c.queue) == 0 && len(c.pending) == 0 && len(c.work) == 0 && !c.busy
		c.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not settle")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReadRanges(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 1<<20, plenty())
	data := block(1, 128<<10+1000) // a partial last piece
	k := key(7, 3)
	if c.Read(k, make([]byte, 10), 0) {
		t.Fatal("a block never put was read")
	}
	c.Put(k, data, 0)
	settle(t, c)
	for _, tc := range []struct {
		name    string
		off, n  int64
		present bool
	}{
		{"whole", 0, int64(len(data)), true},
		{"one aligned piece, checked in place", 8192, 4096, true},
		{"inside one piece", 5000, 100, true},
		{"across pieces", 4000, 9000, true},
		{"the partial last piece", int64(len(data)) - 500, 500, true},
		{"empty", 50, 0, true},
		{"past the end", int64(len(data)) - 10, 20, false},
		{"negative offset", -1, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := make([]byte, tc.n)
			ok := c.Read(k, p, tc.off)
			if ok != tc.present {
				t.Fatalf("read %d at %d: %v, want %v", tc.n, tc.off, ok, tc.present)
			}
			if ok && !bytes.Equal(p, data[tc.off:tc.off+tc.n]) {
				t.Fatal("wrong bytes")
			}
		})
	}
	if s := c.Stats(); s.Blocks != 1 || s.Bytes != int64(len(data)) || s.Written != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestChangedFileIsAMiss: a cache file changed or cut on disk makes a
// miss and leaves the index, never a read of other bytes. (A removed file
// whose descriptor the cache holds open still reads right, as on Linux.)
func TestChangedFileIsAMiss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(fs diskfs.FS, path string) error
	}{
		{"one byte flipped", func(fs diskfs.FS, path string) error {
			f, err := fs.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			b := []byte{0}
			f.ReadAt(b, 20000)
			b[0] ^= 0x40
			_, err = f.WriteAt(b, 20000)
			return err
		}},
		{"cut short", func(fs diskfs.FS, path string) error {
			f, err := fs.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(10000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := diskfs.NewMem()
			c := open(t, fs, 1<<20, plenty())
			data := block(2, 64<<10)
			k := key(9, 0)
			c.Put(k, data, 0)
			settle(t, c)
			if err := tc.damage(fs, path(k)); err != nil {
				t.Fatal(err)
			}
			p := make([]byte, 4096)
			if !c.Read(k, p, 0) || !bytes.Equal(p, data[:4096]) { // the first piece is intact
				t.Fatal("the intact first piece was not read")
			}
			if c.Read(k, make([]byte, 4096), 16384+2048) {
				t.Fatal("a damaged piece was read")
			}
			if c.Has(k) {
				t.Fatal("a damaged block stayed in the index")
			}
			if c.Stats().Corrupt != 1 {
				t.Fatalf("stats %+v", c.Stats())
			}
		})
	}
}

func TestEvictsLeastRecentlyRead(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 3*1000, plenty())
	for i := int64(0); i < 3; i++ {
		c.Put(key(1, i), block(uint64(i), 1000), 0)
	}
	settle(t, c)
	c.Read(key(1, 0), make([]byte, 10), 0) // block 0 is now the most recent
	c.Put(key(1, 3), block(3, 1000), 0)
	settle(t, c)
	for i, want := range []bool{true, false, true, true} {
		if got := c.Has(key(1, int64(i))); got != want {
			t.Fatalf("block %d kept: %v, want %v", i, got, want)
		}
	}
	if got := fileBytes(t, fs, path(key(1, 1)), key(1, 1).Off, 1000); !bytes.Equal(got, make([]byte, 1000)) {
		t.Fatal("the evicted block's bytes are still on disk")
	}
	if s := c.Stats(); s.Bytes != 3000 || s.Blocks != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFreeSpaceFloor(t *testing.T) {
	fs := diskfs.NewMem()
	sp := &space{}
	sp.total.Store(100 << 20)
	sp.free.Store(10<<20 + 500) // the 10% floor, plus 500 bytes
	c := open(t, fs, 1<<30, sp)
	c.Put(key(1, 0), block(1, 400), 0)
	c.Put(key(1, 1), block(2, 400), 0) // fits only if block 0 goes
	settle(t, c)
	if c.Has(key(1, 0)) || !c.Has(key(1, 1)) {
		t.Fatalf("with room for one block: kept 0 %v, 1 %v", c.Has(key(1, 0)), c.Has(key(1, 1)))
	}
	sp.free.Store(10 << 20) // someone else filled the disk to the floor
	c.mu.Lock()
	c.freeAt = time.Time{}
	c.mu.Unlock()
	c.Put(key(2, 0), block(3, 401), 0) // larger than all the cache holds
	settle(t, c)
	if c.Has(key(2, 0)) {
		t.Fatal("a block was written below the free-space floor")
	}
	if s := c.Stats(); s.Dropped != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestWriteErrorsAreNotTheCallers: ENOSPC and EIO from the disk drop the
// block and never reach Put or Read; after ENOSPC the writer pauses.
func TestWriteErrorsAreNotTheCallers(t *testing.T) {
	for _, e := range []error{syscall.ENOSPC, syscall.EIO, &diskfs.ShortWrite{N: 100, Err: syscall.ENOSPC}} {
		t.Run(e.Error(), func(t *testing.T) {
			mem := diskfs.NewMem()
			rule := &diskfs.Rule{Ops: diskfs.OpWrite, Times: 1, Err: e}
			c := open(t, diskfs.Inject(mem, rule), 1<<20, plenty())
			c.Put(key(1, 0), block(1, 5000), 0)
			settle(t, c)
			if c.Has(key(1, 0)) || c.Read(key(1, 0), make([]byte, 10), 0) {
				t.Fatal("a block whose write failed is kept")
			}
			if _, err := mem.Stat(path(key(1, 0))); err == nil {
				t.Fatal("the failed write's file is left on disk")
			}
			c.Put(key(1, 1), block(2, 5000), 0)
			settle(t, c)
			full := errors.Is(e, syscall.ENOSPC)
			if c.Has(key(1, 1)) == full {
				t.Fatalf("after %v the next block kept: %v", e, c.Has(key(1, 1)))
			}
			if s := c.Stats(); s.WriteErrors != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

func TestDropIno(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 1<<20, plenty())
	for i := int64(0); i < 4; i++ {
		c.Put(key(5, i), block(uint64(i), 100), 0)
	}
	c.Put(key(6, 0), block(9, 100), 0)
	settle(t, c)
	c.DropIno(5)
	settle(t, c)
	for i := int64(0); i < 4; i++ {
		if c.Has(key(5, i)) {
			t.Fatalf("block %d of a dropped inode kept", i)
		}
		if _, err := fs.Stat(path(key(5, i))); err == nil {
			t.Fatalf("block %d of a dropped inode is still on disk", i)
		}
	}
	if !c.Has(key(6, 0)) {
		t.Fatal("another inode's block was dropped")
	}
	if s := c.Stats(); s.Bytes != 100 || s.Blocks != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOpenEmptiesAndLocks(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 1<<20, plenty())
	c.Put(key(1, 0), block(1, 100), 0)
	settle(t, c)
	if _, err := Open(Options{Dir: dir, Limit: 1 << 20, FS: fs, Space: plenty().get}); !errors.Is(err, diskfs.ErrLocked) {
		t.Fatalf("a second cache in the same directory: %v", err)
	}
	// A killed client leaves its files: the next Open removes them.
	c.Close()
	stale := path(key(1, 0))
	fs.MkdirAll(filepath.Dir(stale))
	f, _ := fs.Create(stale)
	f.WriteAt(block(1, 100), 0)
	f.Close()
	c2 := open(t, fs, 1<<20, plenty())
	if c2.Has(key(1, 0)) || c2.Read(key(1, 0), make([]byte, 10), 0) {
		t.Fatal("a block of an earlier run was served")
	}
	if _, err := fs.Stat(stale); err == nil {
		t.Fatal("an earlier run's block is still on disk")
	}
	c2.Put(key(2, 0), block(2, 100), 0)
	settle(t, c2)
	c2.Close()
	if _, err := fs.Stat(dir); err == nil {
		t.Fatal("Close left the cache's directory")
	}
}

func TestRemoveStale(t *testing.T) {
	fs := diskfs.NewMem()
	live, err := Open(Options{Dir: "/base/live", Limit: 1 << 20, FS: fs, Space: plenty().get})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	for _, name := range []string{"/base/killed/LOCK", "/base/killed/07/7_1.2.3_0", "/base/other/file"} {
		fs.MkdirAll(filepath.Dir(name))
		f, _ := fs.Create(name)
		f.Close()
	}
	n, err := RemoveStale(fs, "/base")
	if err != nil || n != 1 {
		t.Fatalf("RemoveStale: %d, %v; want 1", n, err)
	}
	for name, want := range map[string]bool{"/base/live/LOCK": true, "/base/killed": false, "/base/other/file": true} {
		if _, err := fs.Stat(name); (err == nil) != want {
			t.Fatalf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
	if n, err := RemoveStale(fs, "/nowhere"); n != 0 || err != nil {
		t.Fatalf("a missing parent: %d, %v", n, err)
	}
}

func TestPutLeavesOut(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 1000, plenty(), func(o *Options) { o.QueueBytes = 1500 })
	c.Put(Key{Ino: 1, Gen: "../x", Off: 0}, block(1, 10), 0)
	c.Put(Key{Ino: 1, Gen: "", Off: 0}, block(1, 10), 0)
	c.Put(key(1, 9), block(1, 1001), 0) // larger than the cache
	settle(t, c)
	if s := c.Stats(); s.Blocks != 0 || s.Written != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Hold the writer so that the queue fills.
	c.mu.Lock()
	v := c.versionLocked(verKey{2, key(2, 0).Gen})
	v.writes++
	c.queue = append(c.queue, job{key: key(2, 0), v: v, data: block(1, 1000)})
	c.queued += 1000
	c.pending[key(2, 0)] = false
	c.mu.Unlock()
	c.Put(key(2, 1), block(2, 600), 0) // 1600 > 1500 queued bytes
	if s := c.Stats(); s.Dropped == 0 {
		t.Fatalf("a block beyond the queue's bound was queued: %+v", s)
	}
	c.signal()
	settle(t, c)
}

// TestPutAfterDropIno: bytes fetched before a DropIno of their inode are
// not kept, even when their Put comes after it.
func TestPutAfterDropIno(t *testing.T) {
	c := open(t, diskfs.NewMem(), 1<<20, plenty())
	before := c.Mark()
	c.DropIno(3) // a change of inode 3 while its old bytes were fetched
	c.Put(key(3, 0), block(1, 100), before)
	c.Put(key(4, 0), block(2, 100), before) // another inode: kept
	after := c.Mark()
	c.Put(key(3, 1), block(3, 100), after) // fetched after the change: kept
	settle(t, c)
	if c.Has(key(3, 0)) || !c.Has(key(4, 0)) || !c.Has(key(3, 1)) {
		t.Fatalf("kept: stale %v, other inode %v, fresh %v", c.Has(key(3, 0)), c.Has(key(4, 0)), c.Has(key(3, 1)))
	}
	// Past maxDropped inodes the cache refuses every earlier mark.
	old := c.Mark()
	for i := uint64(0); i <= maxDropped; i++ {
		c.DropIno(1000 + i)
	}
	c.Put(key(5, 0), block(4, 100), old)
	c.Put(key(6, 0), block(5, 100), c.Mark())
	settle(t, c)
	if c.Has(key(5, 0)) || !c.Has(key(6, 0)) {
		t.Fatalf("after the forgetting: stale mark kept %v, fresh mark kept %v", c.Has(key(5, 0)), c.Has(key(6, 0)))
	}
}

// TestOpenFiles: reads keep at most maxOpen files open; a file kept open
// and then changed on disk is still caught by its CRCs; blocks that leave
// the index close their files.
func TestOpenFiles(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 1<<30, plenty())
	n := maxOpen + 20
	for i := 0; i < n; i++ {
		c.Put(key(uint64(i), 0), block(uint64(i), 5000), 0)
	}
	settle(t, c)
	p := make([]byte, 100)
	for i := 0; i < n; i++ {
		if !c.Read(key(uint64(i), 0), p, 0) {
			t.Fatalf("block %d not read", i)
		}
	}
	if got := c.fds.Len(); got != maxOpen {
		t.Fatalf("%d files open, want %d", got, maxOpen)
	}
	// Damage a block whose file is open: the kept descriptor reads the
	// damage and the CRC catches it.
	k := key(uint64(n-1), 0)
	f, _ := fs.Open(path(k))
	f.WriteAt([]byte("xxxx"), 10)
	f.Close()
	if c.Read(k, p, 0) {
		t.Fatal("a damaged block was read through its open file")
	}
	for i := 0; i < n; i++ {
		c.DropIno(uint64(i))
	}
	settle(t, c)
	if c.fds.Len() != 0 {
		t.Fatalf("%d files open after every block left", c.fds.Len())
	}
}

func fileBytes(t *testing.T, fs diskfs.FS, name string, off int64, n int) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	f.ReadAt(b, off)
	return b
}

// TestOneFilePerVersion: the blocks of one version share one sparse file
// and one descriptor; an evicted block leaves a hole and its neighbours
// readable; a new version is a file of its own.
func TestOneFilePerVersion(t *testing.T) {
	fs := diskfs.NewMem()
	c := open(t, fs, 3*4096, plenty())
	for i := int64(0); i < 3; i++ {
		c.Put(Key{Ino: 8, Gen: "v1", Off: i * 4096}, block(uint64(i), 4096), 0)
	}
	settle(t, c)
	p := make([]byte, 4096)
	for i := int64(0); i < 3; i++ {
		if !c.Read(Key{Ino: 8, Gen: "v1", Off: i * 4096}, p, 0) || !bytes.Equal(p, block(uint64(i), 4096)) {
			t.Fatalf("block %d", i)
		}
	}
	if c.fds.Len() != 1 {
		t.Fatalf("%d files open for one version", c.fds.Len())
	}
	names, _ := fs.ReadDir(filepath.Join(dir, "08"))
	if len(names) != 1 {
		t.Fatalf("files of one version: %v", names)
	}
	// Block 0 is the least recently read: a block of version v2 evicts it.
	c.Read(Key{Ino: 8, Gen: "v1", Off: 4096}, p, 0)
	c.Read(Key{Ino: 8, Gen: "v1", Off: 8192}, p, 0)
	c.Put(Key{Ino: 8, Gen: "v2", Off: 0}, block(9, 4096), 0)
	settle(t, c)
	name := path(Key{Ino: 8, Gen: "v1"})
	if got := fileBytes(t, fs, name, 0, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("the evicted block was not punched out")
	}
	if !c.Read(Key{Ino: 8, Gen: "v1", Off: 8192}, p, 0) || !bytes.Equal(p, block(2, 4096)) {
		t.Fatal("a neighbour of the punched block")
	}
	if !c.Read(Key{Ino: 8, Gen: "v2", Off: 0}, p, 0) || !bytes.Equal(p, block(9, 4096)) {
		t.Fatal("the new version's block")
	}
	if names, _ := fs.ReadDir(filepath.Join(dir, "08")); len(names) != 2 {
		t.Fatalf("files of two versions: %v", names)
	}
	// Its last block gone, a version's file goes.
	c.DropIno(8)
	settle(t, c)
	if names, _ := fs.ReadDir(filepath.Join(dir, "08")); len(names) != 0 {
		t.Fatalf("files left after DropIno: %v", names)
	}
}
