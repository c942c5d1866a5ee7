package integration

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

var posixSeed = flag.Uint64("posix.seed", 0, "seed of TestPosixRandomOps (0: a new one)")

// runBounded runs name args in dir, bounded by limit, and fails the test with
// its output unless it exits 0.
func runBounded(t *testing.T, limit time.Duration, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no result after %v\n%s", name, strings.Join(args, " "), limit, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// errnoOf reduces an error to its errno (0 for none, -1 when there is none).
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.Errno(^uint(0) >> 1)
}

// fileState is what the randomized test compares for one name.
type fileState struct {
	errno syscall.Errno
	kind  uint32 // S_IFMT bits
	perm  uint32
	size  int64 // regular files only
	nlink uint64
	data  []byte // regular files only
}

func (s fileState) String() string {
	if s.errno != 0 {
		return "errno " + s.errno.Error()
	}
	return fmt.Sprintf("type %o perm %o size %d nlink %d data sha %x", s.kind, s.perm, s.size, s.nlink, shortSum(s.data))
}

func shortSum(b []byte) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

func stateOf(p string) fileState {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fileState{errno: errnoOf(err)}
	}
	s := fileState{kind: st.Mode & syscall.S_IFMT, perm: st.Mode & 0o7777, nlink: uint64(st.Nlink)}
	if s.kind == syscall.S_IFREG {
		s.size = st.Size
		b, err := os.ReadFile(p)
		if err != nil {
			s.errno = errnoOf(err)
		}
		s.data = b
	}
	return s
}

func sameState(a, b fileState) bool {
	return a.errno == b.errno && a.kind == b.kind && a.perm == b.perm && a.size == b.size &&
		a.nlink == b.nlink && bytes.Equal(a.data, b.data)
}

// treeOf lists every name under root with its state.
func treeOf(t *testing.T, root string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." {
			m[rel] = stateOf(p)
		}
		return nil
	})
	must(t, err)
	return m
}

// TestPosixRandomOps applies one random sequence of file operations through
// the mount and on a local directory and wants the same result (errno) from
// each, the same state of the names involved after every step, and the same
// tree at the end. Replay with: go test -run TestPosixRandomOps -args -posix.seed=N
func TestPosixRandomOps(t *testing.T) {
	seed := *posixSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test -run TestPosixRandomOps ./test/integration -args -posix.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	dir := filepath.Join(t.TempDir(), "pr")
	_, mp := startMounted(t, dir)
	t.Cleanup(func() {
		logTailOnFailure(t, filepath.Join(dir, "mount", "cairn.log"))
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*", "cairn.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, "WARN") || strings.Contains(line, "ERROR") || strings.Contains(line, "error") {
						t.Logf("%s: %s", filepath.Base(filepath.Dir(l)), line)
					}
				}
			}
		}
	})
	roots := [2]string{filepath.Join(mp, "rand"), filepath.Join(t.TempDir(), "rand")}
	for _, r := range roots {
		must(t, os.Mkdir(r, 0o755))
	}

	names := []string{"a", "b", "c", "d"}
	randPath := func() string {
		n := 1 + rng.IntN(3)
		if rng.IntN(2) == 0 {
			n = 1
		}
		parts := make([]string, n)
		for i := range parts {
			parts[i] = names[rng.IntN(len(names))]
		}
		return filepath.Join(parts...)
	}
	perms := []uint32{0o600, 0o644, 0o755, 0o700, 0o444, 0o640}

	deadline := time.Now().Add(25 * time.Second)
	steps := 0
	var history []string // the operations so far, for a failure report
	defer func() {
		if t.Failed() {
			t.Logf("last operations:\n%s", strings.Join(history[max(0, len(history)-25):], "\n"))
			if f := os.Getenv("POSIX_HISTORY"); f != "" {
				_ = os.WriteFile(f, []byte(strings.Join(history, "\n")+"\n"), 0o644)
			}
		}
	}()
	for step := 0; step < 2000 && time.Now().Before(deadline); step++ {
		steps++
		p1, p2 := randPath(), randPath()
		var desc string
		var op func(root string) (syscall.Errno, []byte)
		switch k := rng.IntN(12); k {
		case 0, 1: // create (O_CREAT, sometimes O_EXCL or O_TRUNC)
			flags := syscall.O_CREAT | syscall.O_WRONLY
			switch rng.IntN(3) {
			case 1:
				flags |= syscall.O_EXCL
			case 2:
				flags |= syscall.O_TRUNC
			}
			perm := perms[rng.IntN(len(perms))]
			desc = fmt.Sprintf("open(%s, %#x, %o)", p1, flags, perm)
			op = func(root string) (syscall.Errno, []byte) {
				fd, err := syscall.Open(filepath.Join(root, p1), flags|syscall.O_CLOEXEC, perm)
				if err != nil {
					return errnoOf(err), nil
				}
				return errnoOf(syscall.Close(fd)), nil
			}
		case 2, 3: // write at a random offset
			off := int64(rng.IntN(300 << 10))
			if rng.IntN(3) == 0 {
				off = int64(rng.IntN(8 << 10))
			}
			buf := make([]byte, 1+rng.IntN(96<<10))
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
			desc = fmt.Sprintf("pwrite(%s, %d bytes, off %d)", p1, len(buf), off)
			op = func(root string) (syscall.Errno, []byte) {
				fd, err := syscall.Open(filepath.Join(root, p1), syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
				if err != nil {
					return errnoOf(err), nil
				}
				_, err = syscall.Pwrite(fd, buf, off)
				if cerr := syscall.Close(fd); err == nil {
					err = cerr
				}
				return errnoOf(err), nil
			}
		case 4: // truncate up or down
			size := int64(rng.IntN(400 << 10))
			desc = fmt.Sprintf("truncate(%s, %d)", p1, size)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Truncate(filepath.Join(root, p1), size)), nil
			}
		case 5:
			desc = fmt.Sprintf("rename(%s, %s)", p1, p2)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Rename(filepath.Join(root, p1), filepath.Join(root, p2))), nil
			}
		case 6:
			desc = fmt.Sprintf("link(%s, %s)", p1, p2)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Link(filepath.Join(root, p1), filepath.Join(root, p2))), nil
			}
		case 7:
			desc = fmt.Sprintf("unlink(%s)", p1)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Unlink(filepath.Join(root, p1))), nil
			}
		case 8:
			perm := perms[rng.IntN(len(perms))] | 0o700
			desc = fmt.Sprintf("mkdir(%s, %o)", p1, perm)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Mkdir(filepath.Join(root, p1), perm)), nil
			}
		case 9:
			desc = fmt.Sprintf("rmdir(%s)", p1)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Rmdir(filepath.Join(root, p1))), nil
			}
		case 10:
			perm := perms[rng.IntN(len(perms))]
			desc = fmt.Sprintf("chmod(%s, %o)", p1, perm)
			op = func(root string) (syscall.Errno, []byte) {
				return errnoOf(syscall.Chmod(filepath.Join(root, p1), perm)), nil
			}
		default: // read a range
			off := int64(rng.IntN(400 << 10))
			n := 1 + rng.IntN(128<<10)
			desc = fmt.Sprintf("pread(%s, %d bytes, off %d)", p1, n, off)
			op = func(root string) (syscall.Errno, []byte) {
				fd, err := syscall.Open(filepath.Join(root, p1), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
				if err != nil {
					return errnoOf(err), nil
				}
				defer syscall.Close(fd)
				buf := make([]byte, n)
				got := 0
				for got < n {
					m, err := syscall.Pread(fd, buf[got:], off+int64(got))
					if err != nil {
						return errnoOf(err), buf[:got]
					}
					if m == 0 {
						break
					}
					got += m
				}
				return 0, buf[:got]
			}
		}
		e0, b0 := op(roots[0])
		e1, b1 := op(roots[1])
		history = append(history, fmt.Sprintf("%d: %s = %v", step, desc, e1))
		if e0 != e1 {
			t.Fatalf("step %d (seed %d): %s: mount errno %d (%v), local errno %d (%v)", step, seed, desc, e0, e0, e1, e1)
		}
		if !bytes.Equal(b0, b1) {
			t.Fatalf("step %d (seed %d): %s: mount read %d bytes, local %d, contents differ", step, seed, desc, len(b0), len(b1))
		}
		for _, p := range []string{p1, p2, filepath.Dir(p1), filepath.Dir(p2)} {
			s0, s1 := stateOf(filepath.Join(roots[0], p)), stateOf(filepath.Join(roots[1], p))
			if s0.kind == syscall.S_IFDIR {
				// A directory's nlink counts its subdirectories on ext4 but
				// not on every file system; its type and mode must agree.
				s0.nlink, s1.nlink = 0, 0
			}
			if !sameState(s0, s1) {
				if s0.errno == syscall.EIO {
					// Say whether the error lasts (for the bug report).
					time.Sleep(200 * time.Millisecond)
					again := stateOf(filepath.Join(roots[0], p))
					t.Logf("%s again after 200 ms: %v (same as local: %v)", p, again, sameState(again, s1))
				}
				t.Fatalf("step %d (seed %d): after %s: %s differs:\n mount: %v\n local: %v", step, seed, desc, p, s0, s1)
			}
		}
	}
	m0, m1 := treeOf(t, roots[0]), treeOf(t, roots[1])
	keys0 := slices.Sorted(mapKeys(m0))
	keys1 := slices.Sorted(mapKeys(m1))
	if !slices.Equal(keys0, keys1) {
		t.Fatalf("seed %d: trees differ:\n mount: %v\n local: %v", seed, keys0, keys1)
	}
	for _, k := range keys0 {
		s0, s1 := m0[k], m1[k]
		if s0.kind == syscall.S_IFDIR {
			s0.nlink, s1.nlink = 0, 0
		}
		if !sameState(s0, s1) {
			t.Fatalf("seed %d: at the end %s differs:\n mount: %v\n local: %v", seed, k, s0, s1)
		}
	}
	t.Logf("%d steps, %d names at the end", steps, len(keys0))
}

// logTailOnFailure logs the end of a process's log when the test failed.
func logTailOnFailure(t *testing.T, path string) {
	if !t.Failed() {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("last lines of %s:\n%s", path, strings.Join(lines[max(0, len(lines)-40):], "\n"))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// startSecondMount runs `cairn mount` of volume default of the cairn up
// cluster in dir on a new directory and returns it; cleanup unmounts it.
func startSecondMount(t *testing.T, dir string) string {
	t.Helper()
	second := filepath.Join(t.TempDir(), "second")
	must(t, os.Mkdir(second, 0o755))
	logf, err := os.CreateTemp(t.TempDir(), "mount")
	must(t, err)
	defer logf.Close()
	cmd := exec.Command(cairnBin, "mount", "--data-dir", dir, "default", second)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	exited := make(chan struct{})
	var state *os.ProcessState // how it exited, once exited is closed
	go func() {
		state, _ = cmd.Process.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		for i := 0; i < 5; i++ {
			if ok, _ := localcluster.IsMounted(second); !ok {
				return
			}
			if err := syscall.Unmount(second, syscall.MNT_DETACH); err != nil {
				t.Logf("unmount %s: %v", second, err)
			}
		}
	})
	for i := 0; i < 400; i++ {
		out, _ := os.ReadFile(logf.Name())
		if bytes.Contains(out, []byte("mounted volume")) {
			return second
		}
		select {
		case <-exited:
			out, _ = os.ReadFile(logf.Name()) // all it wrote before it exited
			t.Fatalf("cairn mount exited (%v):\n%s", state, out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	out, _ := os.ReadFile(logf.Name())
	t.Fatalf("cairn mount did not mount %s:\n%s", second, out)
	return ""
}

// TestPosixTwoMounts mounts one volume twice (cairn up's mount and a second
// cairn mount): what one writes and closes the other reads exactly
// (close-to-open), in both directions and over rewrites of one file, and a
// directory created in one is listed in the other.
func TestPosixTwoMounts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tm")
	_, a := startMounted(t, dir)
	b := startSecondMount(t, dir)
	mounts := [2]string{a, b}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 8; round++ {
		w, r := mounts[round%2], mounts[1-round%2]
		// A new file of a size that crosses packet and block boundaries, and
		// a rewrite of one shared file with a different size each round.
		size := []int{0, 1, 4095, 4096, 128 << 10, 1<<20 + 17, 3 << 20, 300}[round]
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		for _, name := range []string{fmt.Sprintf("new%d", round), "shared"} {
			must(t, os.WriteFile(filepath.Join(w, name), data, 0o644))
			got, err := os.ReadFile(filepath.Join(r, name))
			must(t, err)
			if !bytes.Equal(got, data) {
				t.Fatalf("round %d: %s written via %s (%d bytes), read via %s: %d bytes, equal prefix %d",
					round, name, w, len(data), r, len(got), commonPrefix(got, data))
			}
		}
		d := fmt.Sprintf("dir%d", round)
		must(t, os.MkdirAll(filepath.Join(w, d, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(w, d, "sub", "f"), []byte(d), 0o644))
		if !slices.Contains(listDir(t, r), d) {
			t.Fatalf("round %d: %s created via %s is not listed via %s: %v", round, d, w, r, listDir(t, r))
		}
		if got := listDir(t, filepath.Join(r, d)); !slices.Equal(got, []string{"sub"}) {
			t.Fatalf("round %d: listing of %s via %s: %v", round, d, r, got)
		}
		got, err := os.ReadFile(filepath.Join(r, d, "sub", "f"))
		if err != nil || string(got) != d {
			t.Fatalf("round %d: %s/sub/f via %s: %q, %v", round, d, r, got, err)
		}
	}
	// Removal seen from the other side once the entry cache expires (1 s).
	must(t, os.RemoveAll(filepath.Join(a, "dir0")))
	if slices.Contains(listDir(t, b), "dir0") {
		t.Fatalf("dir0 removed via %s still listed via %s", a, b)
	}
}

// TestPosixTwoMountsStaleNames renames and removes through one mount names
// that the other mount changed within the kernel's entry timeout, so that
// the first mount's kernel entries and the name hints it hands to the
// rename and rmdir (docs/design.md, "Name hints for renames") are stale:
// each operation must act on what the names hold now, with the errno a
// rename(2) or rmdir(2) of a local file system gives.
func TestPosixTwoMountsStaleNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sn")
	_, a := startMounted(t, dir)
	b := startSecondMount(t, dir)
	ino := func(p string) uint64 {
		t.Helper()
		st, err := os.Lstat(p)
		must(t, err)
		return st.Sys().(*syscall.Stat_t).Ino
	}
	for round := range 4 {
		x, y, z := fmt.Sprintf("x%d", round), fmt.Sprintf("y%d", round), fmt.Sprintf("z%d", round)
		must(t, os.WriteFile(filepath.Join(a, x), []byte("old"), 0o644))
		old := ino(filepath.Join(a, x)) // mount a looked x up
		// Through b: x moves away and a new x takes its place.
		must(t, os.Rename(filepath.Join(b, x), filepath.Join(b, y)))
		must(t, os.WriteFile(filepath.Join(b, x), []byte("new"), 0o644))
		cur := ino(filepath.Join(b, x))
		// Through a, whose entry and hint for x still name the old inode.
		must(t, os.Rename(filepath.Join(a, x), filepath.Join(a, z)))
		if got := ino(filepath.Join(b, z)); got != cur {
			t.Fatalf("round %d: rename through the stale mount moved inode %d, want the current %d (the old one was %d)", round, got, cur, old)
		}
		if got := ino(filepath.Join(b, y)); got != old {
			t.Fatalf("round %d: %s holds %d, want %d untouched", round, y, got, old)
		}
		// A name b removed: ENOENT through a, and nothing created.
		must(t, os.WriteFile(filepath.Join(a, "gone"), nil, 0o644))
		_ = ino(filepath.Join(a, "gone"))
		must(t, os.Remove(filepath.Join(b, "gone")))
		if err := os.Rename(filepath.Join(a, "gone"), filepath.Join(a, "never")); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("round %d: rename of a name removed through the other mount: %v, want ENOENT", round, err)
		}
		if _, err := os.Lstat(filepath.Join(b, "never")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("round %d: a failed rename left its new name: %v", round, err)
		}
		// A directory b replaced with one that has a file in it: rmdir
		// through a says ENOTEMPTY and removes nothing; once b empties
		// it, rmdir through a removes the directory the name holds now.
		d := fmt.Sprintf("d%d", round)
		must(t, os.Mkdir(filepath.Join(a, d), 0o755))
		_ = ino(filepath.Join(a, d))
		must(t, os.Remove(filepath.Join(b, d)))
		must(t, os.Mkdir(filepath.Join(b, d), 0o755))
		must(t, os.WriteFile(filepath.Join(b, d, "f"), nil, 0o644))
		if err := syscall.Rmdir(filepath.Join(a, d)); err != syscall.ENOTEMPTY {
			t.Fatalf("round %d: rmdir of a replaced, non-empty directory: %v, want ENOTEMPTY", round, err)
		}
		must(t, os.Remove(filepath.Join(b, d, "f")))
		must(t, syscall.Rmdir(filepath.Join(a, d)))
		// Listed through b (a listing asks the servers; b's kernel still
		// holds its own entry for d for the entry timeout).
		if slices.Contains(listDir(t, b), d) {
			t.Fatalf("round %d: %s still listed after rmdir through the stale mount", round, d)
		}
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestPosixGitAndTar clones a git repository onto the mount and checks it
// with git fsck --full, and extracts a tar archive of this repository's pkg/
// on the mount and compares it with the original with diff -r.
func TestPosixGitAndTar(t *testing.T) {
	for _, tool := range []string{"git", "tar", "diff"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	repoRoot, err := filepath.Abs("../..")
	must(t, err)
	dir := filepath.Join(t.TempDir(), "gt")
	_, mp := startMounted(t, dir)

	// The repository to clone: this one when it is a git checkout, else a
	// small one made here.
	src := repoRoot
	if exec.Command("git", "-C", repoRoot, "rev-parse", "--git-dir").Run() != nil {
		src = filepath.Join(t.TempDir(), "src")
		must(t, os.Mkdir(src, 0o755))
		runBounded(t, 10*time.Second, src, "git", "init", "-q")
		for i := 0; i < 5; i++ {
			must(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1)), 0o644))
			runBounded(t, 10*time.Second, src, "git", "add", ".")
			runBounded(t, 10*time.Second, src, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", fmt.Sprint(i))
		}
	}
	start := time.Now()
	// A file:// URL makes git send a pack, as a clone from a server
	// does, rather than copy the source's object files one by one. The
	// checkout leaves out the fuzz corpora (thousands of tiny files that
	// grow with every fuzzing run), so the test's size stays put.
	runBounded(t, 60*time.Second, mp, "git", "clone", "-q", "--no-checkout", "file://"+src, "clone")
	runBounded(t, 10*time.Second, filepath.Join(mp, "clone"), "git", "sparse-checkout", "set", "--no-cone", "/*", "!testdata/fuzz/")
	runBounded(t, 60*time.Second, filepath.Join(mp, "clone"), "git", "checkout", "-q")
	runBounded(t, 60*time.Second, filepath.Join(mp, "clone"), "git", "fsck", "--full", "--strict")
	runBounded(t, 30*time.Second, filepath.Join(mp, "clone"), "git", "status", "--porcelain")
	t.Logf("git clone + fsck of %s: %v", src, time.Since(start))

	// The reference is the archive extracted on the local disk: the source
	// tree may change while the test runs.
	start = time.Now()
	archive := filepath.Join(t.TempDir(), "pkg.tar")
	runBounded(t, 30*time.Second, repoRoot, "tar", "-cf", archive, "--exclude=testdata/fuzz", "pkg")
	local := t.TempDir()
	runBounded(t, 30*time.Second, local, "tar", "-xf", archive)
	must(t, os.Mkdir(filepath.Join(mp, "tree"), 0o755))
	runBounded(t, 60*time.Second, filepath.Join(mp, "tree"), "tar", "-xf", archive)
	runBounded(t, 60*time.Second, mp, "diff", "-r", filepath.Join(local, "pkg"), filepath.Join(mp, "tree", "pkg"))
	// tar restored the modes and modification times: compare them too.
	var diffs []string
	files := 0
	must(t, filepath.WalkDir(filepath.Join(local, "pkg"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(local, p)
		a, err := os.Lstat(p)
		if err != nil {
			return err
		}
		b, err := os.Lstat(filepath.Join(mp, "tree", rel))
		if err != nil {
			return err
		}
		if a.Mode() != b.Mode() || (!a.IsDir() && (a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime()))) {
			diffs = append(diffs, fmt.Sprintf("%s: %v %d %v vs %v %d %v", rel, a.Mode(), a.Size(), a.ModTime(), b.Mode(), b.Size(), b.ModTime()))
		}
		return nil
	}))
	if len(diffs) > 0 {
		t.Fatalf("extracted tree differs in attributes:\n%s", strings.Join(diffs, "\n"))
	}
	t.Logf("tar -xf + diff -r of pkg/ (%d entries): %v", files, time.Since(start))
}

// fioGlobal is the [global] section of the fio jobs of these tests: psync
// writes of 4 KiB to 1 MiB blocks, fsync at close, the page cache dropped
// before each pass, a crc32c stamped in every block and checked after the
// writes.
const fioGlobal = `[global]
ioengine=psync
bsrange=4k-1m
fsync_on_close=1
invalidate=1
verify=crc32c
verify_fatal=1
do_verify=1
group_reporting=0
`

// fioJob writes with sequential and random patterns, blocks of 4 KiB to
// 1 MiB, two jobs each, then reads everything back and checks the crc32c
// stamped in every block.
const fioJob = fioGlobal + `size=48m
numjobs=2

[seq]
rw=write

[rand]
rw=randwrite
bssplit=4k/30:64k/30:256k/20:1m/20

[rand-small]
rw=randwrite
bs=4k
size=4m
`

// needFio returns fio's path, or skips t when fio is not installed.
func needFio(t *testing.T) string {
	t.Helper()
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Skip("fio is not installed (apt-get install fio; make deps installs it)")
	}
	return fio
}

// fioWork makes directory fio under mnt for fio's files and writes jobText
// to a job file outside it.
func fioWork(t *testing.T, mnt, jobText string) (work, job string) {
	t.Helper()
	work = filepath.Join(mnt, "fio")
	must(t, os.Mkdir(work, 0o755))
	job = filepath.Join(t.TempDir(), "job.fio")
	must(t, os.WriteFile(job, []byte(jobText), 0o644))
	return work, job
}

// TestPosixFio runs fio with verify=crc32c on the mount: sequential and
// random writes with 4 KiB to 1 MiB blocks in several jobs, and wants no
// verification error.
func TestPosixFio(t *testing.T) {
	fio := needFio(t)
	dir := filepath.Join(t.TempDir(), "fi")
	_, mp := startMounted(t, dir)
	work, job := fioWork(t, mp, fioJob)
	start := time.Now()
	out := runBounded(t, 90*time.Second, work, fio, "--directory="+work, job)
	checkFio(t, out, 6)
	t.Logf("fio with verify=crc32c: %v", time.Since(start))
}
