package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
)

// The basic data workloads of DFS-Perf §5.2: sequential write (also the data
// generator), sequential read, random read, random write, and skip-read (skip a
// random length forward, read a block, repeat).

var ioKeys = []Key{
	{Name: "files", Type: tInt, Default: "4", Min: 1, Max: 1_000_000, Doc: "files per thread"},
	{Name: "file_size", Type: tDist, Default: "16MiB", Min: 1, Max: 1 << 40, Doc: "size of each file (fixed, uniform(MIN,MAX) or choice(A,B,...))"},
	{Name: "block_size", Type: tSize, Default: "1MiB", Min: 1, Max: 256 << 20, Doc: "bytes per read or write call"},
}

var writeKeys = []Key{
	{Name: "fsync", Type: tBool, Default: "false", Doc: "fsync each file at the end of the phase's writes to it (timed as the fsync operation)"},
}

var readKeys = []Key{
	{Name: "drop_cache", Type: tBool, Default: "false", Doc: "evict the files from the client's page cache after setup (fdatasync + fadvise DONTNEED), so reads reach the file system"},
}

var randomKeys = []Key{
	{Name: "ops", Type: tInt, Default: "1000", Min: 1, Max: 1 << 40, Doc: "random operations per thread"},
	{Name: "direct", Type: tBool, Default: "false", Doc: "open the files for the measured reads or writes with O_DIRECT (past the client's page cache; block_size must be a multiple of 4096; the phase fails if the target refuses O_DIRECT, as tmpfs does; the cairn: and cairn-cached: targets ignore it)"},
}

var sharedKeys = []Key{
	{Name: "shared", Type: tBool, Default: "false", Doc: "every thread reads the same files (files of file_size, written once in setup by the run's first thread, in the directory all threads share): many readers of one file, as a database or a model's weights are read"},
}

// directAlign is what O_DIRECT asks of buffers, offsets and lengths: the
// logical block size of a 4Kn disk, which 512-byte-sector disks accept too.
const directAlign = 4096

func init() {
	keys := func(extra ...[]Key) []Key {
		out := append([]Key{}, ioKeys...)
		for _, e := range extra {
			out = append(out, e...)
		}
		return out
	}
	register(&Kind{Name: "seq-write", Doc: "each thread writes its files sequentially in block_size calls (creating them)",
		Keys: keys(writeKeys), New: func(s *Spec) (Workload, error) { return newIO(s, "seq-write") }})
	register(&Kind{Name: "seq-read", Doc: "each thread reads its files (written during setup) sequentially to the end",
		Keys: keys(readKeys), New: func(s *Spec) (Workload, error) { return newIO(s, "seq-read") }})
	register(&Kind{Name: "random-read", Doc: "each thread reads block_size at block-aligned random offsets of random files among its own (or, with shared, among the files every thread reads)",
		Keys: keys(readKeys, randomKeys, sharedKeys), New: func(s *Spec) (Workload, error) { return newIO(s, "random-read") }})
	register(&Kind{Name: "random-write", Doc: "each thread overwrites block_size at block-aligned random offsets of random files among its own",
		Keys: keys(writeKeys, randomKeys), New: func(s *Spec) (Workload, error) { return newIO(s, "random-write") }})
	register(&Kind{Name: "skip-read", Doc: "each thread walks through each of its files: skip a random length (skip_size) forward, read block_size, repeat to the end (DFS-Perf's random read)",
		Keys: keys(readKeys, []Key{{Name: "skip_size", Type: tDist, Default: "uniform(0,4MiB)", Min: 0, Max: 1 << 40, Doc: "length skipped before each read"}}),
		New:  func(s *Spec) (Workload, error) { return newIO(s, "skip-read") }})
}

type ioWL struct {
	mode      string
	files     int64
	size      Dist
	block     int64
	fsync     bool
	dropCache bool
	ops       int64
	skip      Dist
	direct    bool // random-read, random-write: O_DIRECT opens
	shared    bool // random-read: every thread reads the same files
}

// ioState is per thread: the size of each of its files and, with direct,
// the block buffer aligned for O_DIRECT.
type ioState struct {
	sizes   []int64
	aligned []byte
}

func newIO(s *Spec, mode string) (Workload, error) {
	w := &ioWL{mode: mode, files: s.Int("files"), size: s.Dist("file_size"), block: s.Int("block_size"),
		fsync: s.Bool("fsync"), dropCache: s.Bool("drop_cache"), ops: s.Int("ops"), skip: s.Dist("skip_size"),
		direct: s.Bool("direct")}
	if mode == "random-read" {
		w.shared = s.Bool("shared")
	}
	if (mode == "random-read" || mode == "random-write") && w.block > w.size.Lo {
		return nil, fmt.Errorf("block_size %s is larger than the smallest file (%s)", FormatSize(w.block), FormatSize(w.size.Lo))
	}
	if w.direct && w.block%directAlign != 0 {
		return nil, fmt.Errorf("direct=true needs a block_size that is a multiple of %d (O_DIRECT alignment), got %s", directAlign, FormatSize(w.block))
	}
	return w, nil
}

// alignedCopy returns a copy of b in memory that starts at a multiple of
// directAlign, as O_DIRECT wants: one extra directAlign bytes are allocated
// and the slice starts at the first aligned address (Go does not move heap
// objects, so the alignment holds for the slice's life).
func alignedCopy(b []byte) []byte {
	raw := make([]byte, len(b)+directAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % directAlign); r != 0 {
		off = directAlign - r
	}
	a := raw[off : off+len(b) : off+len(b)]
	copy(a, b)
	return a
}

func (w *ioWL) Phases() []string {
	if w.mode == "seq-write" || w.mode == "random-write" {
		return []string{"write"}
	}
	return []string{"read"}
}

func (w *ioWL) Expect(int) int64 {
	switch w.mode {
	case "random-read", "random-write":
		return w.ops
	case "skip-read":
		return 0
	}
	perFile := (int64(w.size.Mean()) + w.block - 1) / w.block
	return w.files * perFile
}

func fileName(t *Thread, i int64) string { return t.Path("f." + strconv.FormatInt(i, 10)) }

// name is file i of thread t: its own, or with shared every thread's.
func (w *ioWL) name(t *Thread, i int64) string {
	if w.shared {
		return t.Shared("io", "f."+strconv.FormatInt(i, 10))
	}
	return fileName(t, i)
}

// sharedSize is the size of shared file i, the same in every thread.
func (w *ioWL) sharedSize(i int64) int64 {
	return w.size.Sample(rand.New(rand.NewPCG(uint64(i), 0x5ea5ed)))
}

func (w *ioWL) Setup(ctx context.Context, t *Thread) error {
	st := &ioState{sizes: make([]int64, w.files)}
	t.State = st
	for i := range st.sizes {
		if w.shared {
			st.sizes[i] = w.sharedSize(int64(i))
		} else {
			st.sizes[i] = w.size.Sample(t.Rand)
		}
	}
	buf := t.Buffer(w.block)
	if w.direct {
		st.aligned = alignedCopy(buf)
	}
	if w.mode == "seq-write" || w.shared && t.Global != 0 {
		return nil
	}
	if w.shared {
		if err := fsys.MkdirAll(t.FS, t.Shared("io"), 0o755); err != nil {
			return err
		}
	}
	for i := int64(0); i < w.files; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := writeSized(t, w.name(t, i), st.sizes[i], t.Buffer(w.block)); err != nil {
			return err
		}
		if w.dropCache {
			if err := dropCache(t.FS, w.name(t, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeSized writes size bytes to a new file in len(block) calls.
func writeSized(t *Thread, name string, size int64, block []byte) error {
	fh, err := t.FS.OpenFile(name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for off := int64(0); off < size; off += int64(len(block)) {
		n := min(int64(len(block)), size-off)
		if _, err := fh.Write(t.Unique(block[:n])); err != nil {
			fh.Close()
			return err
		}
	}
	return fh.Close()
}

func dropCache(f fsys.FS, name string) error {
	if d, ok := f.(fsys.CacheDropper); ok {
		return d.DropCache(name)
	}
	return nil
}

func (w *ioWL) Run(_ context.Context, t *Thread, _ int) error {
	st := t.State.(*ioState)
	buf := t.Buffer(w.block)
	switch w.mode {
	case "seq-write":
		m, fm := t.Op("write"), t.Op("fsync")
		for i := int64(0); t.More(i, w.files); i++ {
			fh, err := t.FS.OpenFile(fileName(t, i), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			size := st.sizes[i]
			for off, k := int64(0), int64(0); off < size && t.More(k, 1<<62); off, k = off+w.block, k+1 {
				n := min(w.block, size-off)
				t.Unique(buf[:n])
				s := t.Clock()
				wn, err := fh.Write(buf[:n])
				m.Done(s, int64(wn), err)
				if err != nil {
					break
				}
			}
			if w.fsync {
				s := t.Clock()
				fm.Done(s, 0, fh.Sync())
			}
			if err := fh.Close(); err != nil {
				t.Stop(err)
			}
		}
	case "seq-read":
		m := t.Op("read")
		for i := int64(0); t.More(i, w.files); i++ {
			fh, err := t.FS.OpenFile(fileName(t, i), syscall.O_RDONLY, 0)
			if err != nil {
				return err
			}
			for k := int64(0); t.More(k, 1<<62); k++ {
				s := t.Clock()
				n, err := fh.Read(buf)
				if err == io.EOF {
					break
				}
				m.Done(s, int64(n), err)
				if err != nil {
					break
				}
			}
			fh.Close()
		}
	case "random-read", "random-write":
		write := w.mode == "random-write"
		flags := syscall.O_RDONLY
		name := "read"
		if write {
			flags, name = syscall.O_WRONLY, "write"
		}
		if w.direct {
			flags |= syscall.O_DIRECT
			buf = st.aligned
		}
		fhs := make([]fsys.File, w.files)
		defer func() {
			for _, fh := range fhs {
				if fh != nil {
					fh.Close()
				}
			}
		}()
		for i := range fhs {
			fh, err := t.FS.OpenFile(w.name(t, int64(i)), flags, 0)
			if err != nil {
				if w.direct && errors.Is(err, syscall.EINVAL) {
					return fmt.Errorf("direct=true: %s refuses O_DIRECT: %w", t.FS, err)
				}
				return err
			}
			fhs[i] = fh
		}
		m := t.Op(name)
		for k := int64(0); t.More(k, w.ops); k++ {
			i := t.Rand.Int64N(w.files)
			off := t.Rand.Int64N(st.sizes[i]/w.block) * w.block
			if write {
				t.Unique(buf)
			}
			s := t.Clock()
			var n int
			var err error
			if write {
				n, err = fhs[i].WriteAt(buf, off)
			} else {
				n, err = fhs[i].ReadAt(buf, off)
				if err == io.EOF {
					err = nil
				}
			}
			m.Done(s, int64(n), err)
			if w.direct && errors.Is(err, syscall.EINVAL) {
				// Every further call would fail the same way.
				t.Stop(fmt.Errorf("direct=true: %s of %d bytes at offset %d with O_DIRECT: %w (the target refuses direct I/O of this alignment)",
					name, len(buf), off, err))
			}
		}
		if write && w.fsync {
			fm := t.Op("fsync")
			for _, fh := range fhs {
				s := t.Clock()
				fm.Done(s, 0, fh.Sync())
			}
		}
	case "skip-read":
		m := t.Op("read")
		for i := int64(0); t.More(i, w.files); i++ {
			fh, err := t.FS.OpenFile(fileName(t, i), syscall.O_RDONLY, 0)
			if err != nil {
				return err
			}
			size := st.sizes[i]
			off := int64(0)
			for k := int64(0); t.More(k, 1<<62); k++ {
				off += w.skip.Sample(t.Rand)
				if off >= size {
					break
				}
				s := t.Clock()
				n, err := fh.ReadAt(buf[:min(w.block, size-off)], off)
				if err == io.EOF {
					err = nil
				}
				m.Done(s, int64(n), err)
				off += w.block
			}
			fh.Close()
		}
	}
	return nil
}
