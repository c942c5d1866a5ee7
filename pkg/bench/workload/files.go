package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
)

// Small files (FalconFS §6.3, CFS §4.4), the deep-learning traversal of a
// large tree (FalconFS §6.4) with bursts (§6.5), and insert / overwrite /
// delete in the middle of large files (VarFS §IV).

func init() {
	register(&Kind{
		Name: "small-files",
		Doc:  "for each size: write-SIZE creates files of that size (open, write, close each), then read-SIZE reads them back (open, read, close)",
		Keys: []Key{
			{Name: "sizes", Type: tSizes, Default: "1KiB,4KiB,16KiB,64KiB,256KiB,1MiB", Min: 0, Max: 64 << 20, Doc: "file sizes, one write and one read phase each"},
			{Name: "files", Type: tInt, Default: "256", Min: 1, Max: 10_000_000, Doc: "files per thread and size"},
			{Name: "fsync", Type: tBool, Default: "false", Doc: "fsync each file before closing it"},
			{Name: "drop_cache", Type: tBool, Default: "false", Doc: "evict each size's files from the page cache between its write and read phases"},
		},
		New: newSmall,
	})
	register(&Kind{
		Name: "dl-traversal",
		Doc: "deep-learning training input: a tree of fanout^depth leaf directories with files_per_dir files each (built by all threads together during setup), " +
			"read in a random order once per epoch; burst > 1 reads that many files of one directory before moving to another",
		Keys: []Key{
			{Name: "fanout", Type: tInt, Default: "8", Min: 1, Max: 10_000, Doc: "subdirectories of each inner directory"},
			{Name: "depth", Type: tInt, Default: "2", Min: 1, Max: 16, Doc: "levels of directories above the files"},
			{Name: "files_per_dir", Type: tInt, Default: "16", Min: 1, Max: 1_000_000, Doc: "files in each leaf directory"},
			{Name: "file_size", Type: tDist, Default: "uniform(64KiB,112KiB)", Min: 0, Max: 1 << 30, Doc: "size of each file (FalconFS: 64 KiB; MLPerf ResNet-50: 112 KiB)"},
			{Name: "epochs", Type: tInt, Default: "2", Min: 1, Max: 10_000, Doc: "passes over the data set, one phase each"},
			{Name: "shard", Type: tBool, Default: "true", Doc: "each epoch reads every file once across all threads (data-parallel training); false: every thread reads every file"},
			{Name: "burst", Type: tInt, Default: "1", Min: 1, Max: 1_000_000, Doc: "files read from one directory before moving to another (FalconFS §6.5); 1 is a fully random order"},
			{Name: "mode", Type: tEnum, Default: "read", Choices: []string{"read", "write"}, Doc: "read the files, or overwrite them (labeling)"},
			{Name: "drop_cache", Type: tBool, Default: "false", Doc: "evict the files from the page cache after setup"},
			{Name: "tree", Type: tString, Default: "", Doc: "directory below the target's root holding the data set, kept after the run and shared by every run and target that names it " +
				"(setup creates only the leaf directories whose last file is missing, so later runs and other targets on the same file system reuse it; name it after its shape); " +
				"empty: a new tree in the run's workspace, removed afterwards"},
		},
		New: newDL,
	})
	register(&Kind{
		Name: "insert",
		Doc: "VarFS operations on large files: insert (insert_size bytes at a random offset: the tail moves), overwrite (in place at a random offset) " +
			"and delete (remove insert_size bytes at a random offset: the tail moves back); the bytes moved per operation are reported",
		Keys: []Key{
			{Name: "files", Type: tInt, Default: "1", Min: 1, Max: 10_000, Doc: "large files per thread"},
			{Name: "file_size", Type: tSize, Default: "64MiB", Min: 1, Max: 1 << 40, Doc: "initial size of each file"},
			{Name: "insert_size", Type: tDist, Default: "4KiB", Min: 1, Max: 1 << 30, Doc: "bytes inserted, overwritten or deleted per operation"},
			{Name: "block_size", Type: tSize, Default: "1MiB", Min: 4096, Max: 256 << 20, Doc: "bytes per call when moving a tail"},
			{Name: "ops", Type: tInt, Default: "8", Min: 1, Max: 1_000_000, Doc: "operations per thread and phase"},
			{Name: "phases", Type: tList, Default: "insert,overwrite,delete", Choices: []string{"insert", "overwrite", "delete"}, Doc: "the phases to run"},
		},
		New: newInsert,
	})
}

type smallWL struct {
	sizes     []int64
	files     int64
	fsync     bool
	dropCache bool
}

func newSmall(s *Spec) (Workload, error) {
	return &smallWL{sizes: s.Sizes("sizes"), files: s.Int("files"), fsync: s.Bool("fsync"), dropCache: s.Bool("drop_cache")}, nil
}

func (w *smallWL) Phases() []string {
	var out []string
	for _, sz := range w.sizes {
		out = append(out, "write-"+FormatSize(sz), "read-"+FormatSize(sz))
	}
	return out
}

func (w *smallWL) Expect(int) int64 { return w.files }

func (w *smallWL) Setup(_ context.Context, t *Thread) error {
	t.State = make([]int64, len(w.sizes)) // files written per size
	for _, sz := range w.sizes {
		if err := t.FS.Mkdir(t.Path("s"+strconv.FormatInt(sz, 10)), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	var largest int64
	for _, sz := range w.sizes {
		largest = max(largest, sz)
	}
	t.Buffer(max(largest, 1))
	return nil
}

func (w *smallWL) Run(_ context.Context, t *Thread, p int) error {
	written := t.State.([]int64)
	k := p / 2
	sz := w.sizes[k]
	dir := t.Path("s" + strconv.FormatInt(sz, 10))
	name := func(i int64) string { return dir + "/f." + strconv.FormatInt(i, 10) }
	buf := t.Buffer(max(sz, 1))
	if p%2 == 0 {
		m := t.Op("write")
		for i := int64(0); t.More(i, w.files); i++ {
			s := t.Clock()
			n, err := writeSmall(t, name(i), buf[:sz], w.fsync)
			m.Done(s, n, err)
			if err == nil {
				written[k] = i + 1
			}
		}
		if w.dropCache {
			for i := int64(0); i < written[k]; i++ {
				if err := dropCache(t.FS, name(i)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	m := t.Op("read")
	for i := int64(0); t.More(i, written[k]); i++ {
		s := t.Clock()
		n, err := readWhole(t.FS, name(i), buf)
		m.Done(s, n, err)
	}
	return nil
}

func writeSmall(t *Thread, name string, data []byte, fsync bool) (int64, error) {
	fh, err := t.FS.OpenFile(name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := fh.Write(t.Unique(data))
	if err == nil && fsync {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return int64(n), err
}

type dlWL struct {
	fanout, depth, perDir, epochs, burst int64
	size                                 Dist
	shard, write, dropCache              bool
	leaves, files, chunksPerDir          int64
	seed                                 uint64
	tree                                 string // kept tree below the target's root; "" for one in the workspace
}

func newDL(s *Spec) (Workload, error) {
	w := &dlWL{fanout: s.Int("fanout"), depth: s.Int("depth"), perDir: s.Int("files_per_dir"), epochs: s.Int("epochs"),
		burst: s.Int("burst"), size: s.Dist("file_size"), shard: s.Bool("shard"), write: s.Str("mode") == "write",
		dropCache: s.Bool("drop_cache"), seed: uint64(s.Int("seed")), tree: s.Str("tree")}
	if w.tree != "" && (!fs.ValidPath(w.tree) || w.tree == ".") {
		return nil, fmt.Errorf("tree %q: want a relative directory below the target's root, like dl-tree", w.tree)
	}
	w.leaves = 1
	for i := int64(0); i < w.depth; i++ {
		w.leaves *= w.fanout
		if w.leaves > 10_000_000 {
			return nil, fmt.Errorf("fanout %d and depth %d give more than 10 million leaf directories", w.fanout, w.depth)
		}
	}
	w.files = w.leaves * w.perDir
	if w.files > 100_000_000 {
		return nil, fmt.Errorf("%d leaf directories of %d files is more than 100 million files", w.leaves, w.perDir)
	}
	w.chunksPerDir = (w.perDir + w.burst - 1) / w.burst
	return w, nil
}

func (w *dlWL) Phases() []string {
	out := make([]string, w.epochs)
	for i := range out {
		out[i] = "epoch-" + strconv.Itoa(i+1)
	}
	return out
}

// leafDir names leaf directory L: its index written in base fanout, one
// directory level per digit.
func (w *dlWL) leafDir(t *Thread, leaf int64) string {
	parts := make([]string, w.depth)
	for i := w.depth - 1; i >= 0; i-- {
		parts[i] = "d" + strconv.FormatInt(leaf%w.fanout, 10)
		leaf /= w.fanout
	}
	if w.tree != "" {
		return w.tree + "/" + strings.Join(parts, "/")
	}
	return t.Shared("tree", strings.Join(parts, "/"))
}

func (w *dlWL) Expect(int) int64 {
	if w.shard {
		return 0 // depends on the number of threads in the run
	}
	return w.files
}

// Setup builds the tree: global thread g writes the leaf directories whose
// index is g modulo the number of threads, so the tree is built once, in
// parallel, whatever the number of workers. In a kept tree (key tree), a
// leaf whose last file exists with at least the smallest file size is
// complete (files are written in order) and left as it is.
func (w *dlWL) Setup(ctx context.Context, t *Thread) error {
	buf := t.Buffer(max(w.size.Hi, 1))
	for leaf := int64(t.Global); leaf < w.leaves; leaf += int64(t.GlobalThreads) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		dir := w.leafDir(t, leaf)
		file := func(i int64) string { return dir + "/f." + strconv.FormatInt(i, 10) }
		complete := false
		if w.tree != "" {
			st, err := t.FS.Stat(file(w.perDir - 1))
			complete = err == nil && st.Mode().IsRegular() && st.Size() >= w.size.Lo
		}
		if !complete {
			if err := mkdirAll(t, dir); err != nil {
				return err
			}
		}
		for i := int64(0); i < w.perDir; i++ {
			name := file(i)
			if !complete {
				n, err := writeSmall(t, name, buf[:w.size.Sample(t.Rand)], false)
				if err != nil {
					return err
				}
				t.SetupProgress(1, n)
			} else {
				t.SetupProgress(1, 0)
			}
			if w.dropCache {
				if err := dropCache(t.FS, name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// mkdirAll creates dir and its missing parents, tolerating other threads
// creating the same ones concurrently. It tries dir first and walks up only
// when a parent is missing, so that filling a large tree costs one mkdir
// per directory rather than one per level.
func mkdirAll(t *Thread, dir string) error {
	err := t.FS.Mkdir(dir, 0o755)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	i := strings.LastIndexByte(dir, '/')
	if !errors.Is(err, fs.ErrNotExist) || i <= 0 {
		return err
	}
	if err := mkdirAll(t, dir[:i]); err != nil {
		return err
	}
	if err := t.FS.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// Run reads (or writes) the chunks of the epoch's permutation that belong to
// this thread. A chunk is up to burst files of one directory.
func (w *dlWL) Run(_ context.Context, t *Thread, p int) error {
	nChunks := w.leaves * w.chunksPerDir
	key := w.seed*1_000_003 + uint64(p)
	if !w.shard {
		key = key*1_000_003 + uint64(t.Global) + 1
	}
	perm := NewPermutation(uint64(nChunks), key)
	stride, first := int64(1), int64(0)
	if w.shard {
		stride, first = int64(t.GlobalThreads), int64(t.Global)
	}
	m := t.Op(map[bool]string{false: "read", true: "write"}[w.write])
	buf := t.Buffer(max(w.size.Hi, 1))
	var ops int64
	for j := first; j < nChunks && t.More(ops, 1<<62); j += stride {
		c := int64(perm.At(uint64(j)))
		leaf, chunk := c/w.chunksPerDir, c%w.chunksPerDir
		dir := w.leafDir(t, leaf)
		lo, hi := chunk*w.burst, min((chunk+1)*w.burst, w.perDir)
		for i := lo; i < hi && t.More(ops, 1<<62); i++ {
			name := dir + "/f." + strconv.FormatInt(i, 10)
			s := t.Clock()
			var n int64
			var err error
			if w.write {
				n, err = writeSmall(t, name, buf[:w.size.Sample(t.Rand)], false)
			} else {
				n, err = readWhole(t.FS, name, buf)
			}
			m.Done(s, n, err)
			ops++
		}
	}
	return nil
}

type insertWL struct {
	files, size, block, ops int64
	ins                     Dist
	phases                  []string
}

func newInsert(s *Spec) (Workload, error) {
	w := &insertWL{files: s.Int("files"), size: s.Int("file_size"), block: s.Int("block_size"), ops: s.Int("ops"),
		ins: s.Dist("insert_size")}
	chosen := map[string]bool{}
	for _, p := range s.List("phases") {
		chosen[p] = true
	}
	for _, p := range []string{"insert", "overwrite", "delete"} {
		if chosen[p] {
			w.phases = append(w.phases, p)
		}
	}
	if w.ins.Hi > w.size {
		return nil, fmt.Errorf("insert_size up to %s is larger than file_size %s", FormatSize(w.ins.Hi), FormatSize(w.size))
	}
	return w, nil
}

func (w *insertWL) Phases() []string { return w.phases }
func (w *insertWL) Expect(int) int64 { return w.ops }

func (w *insertWL) Setup(ctx context.Context, t *Thread) error {
	sizes := make([]int64, w.files)
	t.State = sizes
	buf := t.Buffer(max(w.block, w.ins.Hi))
	for i := range sizes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := writeSized(t, t.Path("big."+strconv.Itoa(i)), w.size, buf[:w.block]); err != nil {
			return err
		}
		sizes[i] = w.size
	}
	return nil
}

func (w *insertWL) Run(_ context.Context, t *Thread, p int) error {
	sizes := t.State.([]int64)
	phase := w.phases[p]
	m := t.Op(phase)
	buf := t.Buffer(max(w.block, w.ins.Hi))
	move := make([]byte, w.block)
	for k := int64(0); t.More(k, w.ops); k++ {
		i := t.Rand.Int64N(w.files)
		n := w.ins.Sample(t.Rand)
		size := sizes[i]
		s := t.Clock()
		fh, err := t.FS.OpenFile(t.Path("big."+strconv.FormatInt(i, 10)), syscall.O_RDWR, 0)
		if err != nil {
			m.Done(s, 0, err)
			continue
		}
		var moved int64
		switch phase {
		case "overwrite":
			off := t.Rand.Int64N(size - n + 1)
			var wn int
			wn, err = fh.WriteAt(t.Unique(buf[:n]), off)
			moved = int64(wn)
		case "insert":
			off := t.Rand.Int64N(size + 1)
			// Shift [off, size) up by n, last block first so nothing is
			// overwritten before it is read.
			for end := size; end > off && err == nil; end -= w.block {
				start := max(off, end-w.block)
				chunk := move[:end-start]
				if _, err = fh.ReadAt(chunk, start); err == nil || err == io.EOF {
					_, err = fh.WriteAt(chunk, start+n)
				}
				moved += 2 * int64(len(chunk))
			}
			if err == nil {
				var wn int
				wn, err = fh.WriteAt(t.Unique(buf[:n]), off)
				moved += int64(wn)
				sizes[i] = size + n
			}
		case "delete":
			if n > size {
				n = size
			}
			off := t.Rand.Int64N(size - n + 1)
			// Shift [off+n, size) down by n, first block first.
			for start := off + n; start < size && err == nil; start += w.block {
				chunk := move[:min(w.block, size-start)]
				if _, err = fh.ReadAt(chunk, start); err == nil || err == io.EOF {
					_, err = fh.WriteAt(chunk, start-n)
				}
				moved += 2 * int64(len(chunk))
			}
			if err == nil {
				err = fh.Truncate(size - n)
				sizes[i] = size - n
			}
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		m.Done(s, moved, err)
	}
	return nil
}
