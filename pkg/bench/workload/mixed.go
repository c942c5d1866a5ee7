package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"syscall"
	"time"
)

// The composite workloads of DFS-Perf §5.2: mixed read/write at a ratio,
// iterative read/write (each iteration reads the previous one's output), and
// irregular massive access (random files, offsets, sizes and directions). In
// shuffle mode a thread reads other threads' files — on other workers, when
// there are several — instead of its own.

func init() {
	register(&Kind{
		Name: "mixed",
		Doc:  "each operation reads a whole random file of the pool (probability read_ratio) or writes a new file; pools are written during setup",
		Keys: []Key{
			{Name: "files", Type: tInt, Default: "16", Min: 1, Max: 1_000_000, Doc: "files in each thread's pool"},
			{Name: "file_size", Type: tDist, Default: "1MiB", Min: 0, Max: 1 << 40, Doc: "size of pool files and written files"},
			{Name: "block_size", Type: tSize, Default: "1MiB", Min: 1, Max: 256 << 20, Doc: "bytes per read or write call"},
			{Name: "read_ratio", Type: tRatio, Default: "0.5", Doc: "fraction of operations that read (0.7 or 70%)"},
			{Name: "ops", Type: tInt, Default: "200", Min: 1, Max: 1 << 40, Doc: "operations (whole files) per thread"},
			{Name: "shuffle", Type: tBool, Default: "false", Doc: "read from every thread's pool, not only one's own"},
		},
		New: newMixed,
	})
	register(&Kind{
		Name: "iterative",
		Doc: "iteration i reads every file of iteration i-1 and writes its own output (published by rename); " +
			"in shuffle mode a thread reads the output of the next thread (another worker's, when there are several) and waits for it to appear",
		Keys: []Key{
			{Name: "iterations", Type: tInt, Default: "3", Min: 1, Max: 100_000, Doc: "iterations after the initial input"},
			{Name: "files", Type: tInt, Default: "4", Min: 1, Max: 100_000, Doc: "files each thread writes per iteration"},
			{Name: "file_size", Type: tDist, Default: "4MiB", Min: 0, Max: 1 << 40, Doc: "size of each file"},
			{Name: "block_size", Type: tSize, Default: "1MiB", Min: 1, Max: 256 << 20, Doc: "bytes per read or write call"},
			{Name: "shuffle", Type: tBool, Default: "false", Doc: "read another thread's output instead of one's own"},
			{Name: "wait", Type: tDuration, Default: "60s", Doc: "how long a thread waits for another's output in shuffle mode"},
		},
		New: newIterative,
	})
	register(&Kind{
		Name: "massive",
		Doc:  "irregular massive access: each operation opens a random file of the pool, reads or writes a random length at a random offset, and closes it",
		Keys: []Key{
			{Name: "files", Type: tInt, Default: "64", Min: 1, Max: 10_000_000, Doc: "files in each thread's pool"},
			{Name: "file_size", Type: tDist, Default: "1MiB", Min: 1, Max: 1 << 40, Doc: "size of pool files"},
			{Name: "block_size", Type: tSize, Default: "64KiB", Min: 1, Max: 256 << 20, Doc: "largest length of one access (lengths are uniform in [1, block_size])"},
			{Name: "read_ratio", Type: tRatio, Default: "0.7", Doc: "fraction of accesses that read"},
			{Name: "ops", Type: tInt, Default: "2000", Min: 1, Max: 1 << 40, Doc: "accesses per thread"},
			{Name: "shuffle", Type: tBool, Default: "false", Doc: "access every thread's pool, not only one's own"},
		},
		New: newMassive,
	})
}

type poolState struct{ sizes []int64 }

// writePool writes a thread's pool files p.0 .. p.n-1 during setup.
func writePool(ctx context.Context, t *Thread, n int64, size Dist, block int64) error {
	st := &poolState{sizes: make([]int64, n)}
	t.State = st
	buf := t.Buffer(block)
	for i := int64(0); i < n; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st.sizes[i] = size.Sample(t.Rand)
		if err := writeSized(t, t.Path("p."+strconv.FormatInt(i, 10)), st.sizes[i], buf); err != nil {
			return err
		}
	}
	return nil
}

// poolFile picks a random pool file: one's own, or in shuffle mode anyone's.
func poolFile(t *Thread, files int64, shuffle bool) (string, int64) {
	g := t.Global
	if shuffle {
		g = t.Rand.IntN(t.GlobalThreads)
	}
	i := t.Rand.Int64N(files)
	return t.ThreadDir(g) + "/p." + strconv.FormatInt(i, 10), i
}

type mixedWL struct {
	files, block, ops int64
	size              Dist
	ratio             float64
	shuffle           bool
}

func newMixed(s *Spec) (Workload, error) {
	return &mixedWL{files: s.Int("files"), block: s.Int("block_size"), ops: s.Int("ops"), size: s.Dist("file_size"),
		ratio: s.Float("read_ratio"), shuffle: s.Bool("shuffle")}, nil
}

func (w *mixedWL) Phases() []string { return []string{"mixed"} }
func (w *mixedWL) Expect(int) int64 { return w.ops }
func (w *mixedWL) Setup(ctx context.Context, t *Thread) error {
	return writePool(ctx, t, w.files, w.size, w.block)
}

func (w *mixedWL) Run(_ context.Context, t *Thread, _ int) error {
	rm, wm := t.Op("read"), t.Op("write")
	buf := t.Buffer(w.block)
	for k := int64(0); t.More(k, w.ops); k++ {
		if t.Rand.Float64() < w.ratio {
			name, _ := poolFile(t, w.files, w.shuffle)
			s := t.Clock()
			n, err := readWhole(t.FS, name, buf)
			rm.Done(s, n, err)
			continue
		}
		size := w.size.Sample(t.Rand)
		s := t.Clock()
		err := writeSized(t, t.Path("w."+strconv.FormatInt(k, 10)), size, buf)
		if err != nil {
			size = 0
		}
		wm.Done(s, size, err)
	}
	return nil
}

type iterWL struct {
	iters, files, block int64
	size                Dist
	shuffle             bool
	wait                time.Duration
}

func newIterative(s *Spec) (Workload, error) {
	return &iterWL{iters: s.Int("iterations"), files: s.Int("files"), block: s.Int("block_size"),
		size: s.Dist("file_size"), shuffle: s.Bool("shuffle"), wait: s.Duration("wait")}, nil
}

func (w *iterWL) Phases() []string { return []string{"iterate"} }
func (w *iterWL) Expect(int) int64 { return 2 * w.iters * w.files }

func iterFile(dir string, it, i int64) string {
	return dir + "/it" + strconv.FormatInt(it, 10) + "/f." + strconv.FormatInt(i, 10)
}

func (w *iterWL) Setup(ctx context.Context, t *Thread) error {
	if err := t.FS.Mkdir(t.Path("it0"), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	buf := t.Buffer(w.block)
	for i := int64(0); i < w.files; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := writeSized(t, iterFile(t.Dir(), 0, i), w.size.Sample(t.Rand), buf); err != nil {
			return err
		}
	}
	return nil
}

func (w *iterWL) Run(ctx context.Context, t *Thread, _ int) error {
	rm, wm, waitM := t.Op("read"), t.Op("write"), t.Op("wait")
	buf := t.Buffer(w.block)
	src := t.Dir()
	if w.shuffle {
		src = t.ThreadDir((t.Global + 1) % t.GlobalThreads)
	}
	var done int64
	for it := int64(1); it <= w.iters && t.More(done, 1<<62); it++ {
		if err := t.FS.Mkdir(t.Path("it"+strconv.FormatInt(it, 10)), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		for i := int64(0); i < w.files && t.More(done, 1<<62); i++ {
			in := iterFile(src, it-1, i)
			if w.shuffle {
				if waited, err := w.awaitFile(ctx, t, in); err != nil {
					return err
				} else if waited > 0 {
					waitM.Done(t.Clock()-waited, 0, nil)
				}
			}
			s := t.Clock()
			n, err := readWhole(t.FS, in, buf)
			rm.Done(s, n, err)
			done++
		}
		for i := int64(0); i < w.files && t.More(done, 1<<62); i++ {
			out := iterFile(t.Dir(), it, i)
			size := w.size.Sample(t.Rand)
			s := t.Clock()
			err := writeSized(t, out+".tmp", size, buf)
			if err == nil {
				err = t.FS.Rename(out+".tmp", out)
			}
			if err != nil {
				size = 0
			}
			wm.Done(s, size, err)
			done++
		}
	}
	return nil
}

// awaitFile polls for a file another thread publishes, with a growing pause
// (bounded by 50 ms) and the key "wait" as the bound on the whole wait.
func (w *iterWL) awaitFile(ctx context.Context, t *Thread, name string) (time.Duration, error) {
	start := time.Now()
	pause := 100 * time.Microsecond
	for {
		_, err := t.FS.Stat(name)
		if err == nil {
			return time.Since(start), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		if time.Since(start) > w.wait {
			return 0, fmt.Errorf("waited %s for %s from another thread: it never appeared", w.wait, name)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

type massiveWL struct {
	files, block, ops int64
	size              Dist
	ratio             float64
	shuffle           bool
}

func newMassive(s *Spec) (Workload, error) {
	w := &massiveWL{files: s.Int("files"), block: s.Int("block_size"), ops: s.Int("ops"), size: s.Dist("file_size"),
		ratio: s.Float("read_ratio"), shuffle: s.Bool("shuffle")}
	return w, nil
}

func (w *massiveWL) Phases() []string { return []string{"massive"} }
func (w *massiveWL) Expect(int) int64 { return w.ops }
func (w *massiveWL) Setup(ctx context.Context, t *Thread) error {
	if err := writePool(ctx, t, w.files, w.size, w.block); err != nil {
		return err
	}
	// Other threads' file sizes are not known here; accesses stay within the
	// smallest size the distribution allows.
	return nil
}

func (w *massiveWL) Run(_ context.Context, t *Thread, _ int) error {
	rm, wm := t.Op("read"), t.Op("write")
	buf := t.Buffer(w.block)
	for k := int64(0); t.More(k, w.ops); k++ {
		name, i := poolFile(t, w.files, w.shuffle)
		limit := w.size.Lo
		if !w.shuffle {
			limit = t.State.(*poolState).sizes[i]
		}
		n := 1 + t.Rand.Int64N(min(w.block, limit))
		off := t.Rand.Int64N(limit - n + 1)
		read := t.Rand.Float64() < w.ratio
		flags, m := syscall.O_RDONLY, rm
		if !read {
			flags, m = syscall.O_WRONLY, wm
		}
		s := t.Clock()
		fh, err := t.FS.OpenFile(name, flags, 0)
		var moved int
		if err == nil {
			if read {
				moved, err = fh.ReadAt(buf[:n], off)
				if err == io.EOF {
					err = nil
				}
			} else {
				moved, err = fh.WriteAt(t.Unique(buf[:n]), off)
			}
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
		}
		m.Done(s, int64(moved), err)
	}
	return nil
}
