package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"syscall"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
)

// Metadata phases, as mdtest runs them and the CFS paper (Table 3) reports
// them, plus rename.
const (
	PhaseDirCreation  = "DirCreation"
	PhaseDirStat      = "DirStat"
	PhaseDirRemoval   = "DirRemoval"
	PhaseFileCreation = "FileCreation"
	PhaseFileStat     = "FileStat"
	PhaseFileRead     = "FileRead"
	PhaseRename       = "Rename"
	PhaseFileRemoval  = "FileRemoval"
	PhaseTreeCreation = "TreeCreation"
	PhaseTreeRemoval  = "TreeRemoval"
)

var metaPhases = []string{PhaseDirCreation, PhaseDirStat, PhaseDirRemoval, PhaseFileCreation, PhaseFileStat,
	PhaseFileRead, PhaseRename, PhaseFileRemoval, PhaseTreeCreation, PhaseTreeRemoval}

// metaNeeds says which phase must run before another can find its entries.
var metaNeeds = map[string]string{
	PhaseDirStat: PhaseDirCreation, PhaseDirRemoval: PhaseDirCreation,
	PhaseFileStat: PhaseFileCreation, PhaseFileRead: PhaseFileCreation, PhaseRename: PhaseFileCreation,
	PhaseFileRemoval: PhaseFileCreation, PhaseTreeRemoval: PhaseTreeCreation,
}

func init() {
	register(&Kind{
		Name: "metadata",
		Doc: "mdtest-like metadata operations, one phase each: DirCreation (mkdir), DirStat (stat of each directory), " +
			"DirRemoval (rmdir), FileCreation (create, write file_size bytes, close), FileStat, FileRead (open, read, close), " +
			"Rename (within the directory), FileRemoval (unlink), TreeCreation and TreeRemoval (whole trees of tree_fanout^tree_depth " +
			"directories with tree_files files each; one operation is one tree). Each thread works in its own directory unless shared_dir.",
		Keys: []Key{
			{Name: "files", Type: tInt, Default: "1000", Min: 1, Max: 10_000_000, Doc: "directories and files each thread creates"},
			{Name: "file_size", Type: tSize, Default: "0", Max: 64 << 20, Doc: "bytes written into each file at creation and read by FileRead"},
			{Name: "shared_dir", Type: tBool, Default: "false", Doc: "all threads of all workers create in one shared directory (one hot directory, FalconFS §6.5) instead of one each"},
			{Name: "trees", Type: tInt, Default: "4", Min: 1, Max: 100_000, Doc: "trees each thread creates and removes"},
			{Name: "tree_fanout", Type: tInt, Default: "4", Min: 1, Max: 1000, Doc: "subdirectories of each inner tree directory"},
			{Name: "tree_depth", Type: tInt, Default: "2", Min: 0, Max: 10, Doc: "levels of subdirectories below a tree's root"},
			{Name: "tree_files", Type: tInt, Default: "4", Min: 0, Max: 10_000, Doc: "files in each tree directory"},
			{Name: "phases", Type: tList, Default: joinList(metaPhases), Choices: metaPhases, Doc: "the phases to run, in their fixed order"},
		},
		New: newMeta,
	})
}

func joinList(l []string) string {
	s := ""
	for i, x := range l {
		if i > 0 {
			s += ","
		}
		s += x
	}
	return s
}

type metaWL struct {
	spec                   *Spec
	phases                 []string
	files, trees, fileSize int64
	fanout, depth, tfiles  int64
	shared                 bool
}

// metaState is per thread: how many entries each creation phase made, so the
// later phases touch exactly those when a time bound cut creation short.
type metaState struct {
	dirs, files, trees int64
	renamed            bool
}

func newMeta(s *Spec) (Workload, error) {
	w := &metaWL{spec: s, files: s.Int("files"), trees: s.Int("trees"), fileSize: s.Int("file_size"),
		fanout: s.Int("tree_fanout"), depth: s.Int("tree_depth"), tfiles: s.Int("tree_files"), shared: s.Bool("shared_dir")}
	chosen := map[string]bool{}
	for _, p := range s.List("phases") {
		chosen[p] = true
	}
	for _, p := range metaPhases {
		if !chosen[p] {
			continue
		}
		if need, ok := metaNeeds[p]; ok && !chosen[need] {
			return nil, fmt.Errorf("phase %s needs phase %s", p, need)
		}
		w.phases = append(w.phases, p)
	}
	if n := treeSize(w.fanout, w.depth); n*(1+w.tfiles) > 10_000_000 {
		return nil, fmt.Errorf("a tree of fanout %d and depth %d with %d files per directory has more than 10 million entries", w.fanout, w.depth, w.tfiles)
	}
	return w, nil
}

// treeSize is the number of directories of a tree: 1 + f + f^2 + ... + f^d.
func treeSize(f, d int64) int64 {
	n, level := int64(1), int64(1)
	for i := int64(0); i < d; i++ {
		level *= f
		n += level
		if n > 1<<40 {
			return n
		}
	}
	return n
}

func (w *metaWL) Phases() []string { return w.phases }

func (w *metaWL) Expect(p int) int64 {
	switch w.phases[p] {
	case PhaseTreeCreation, PhaseTreeRemoval:
		return w.trees
	}
	return w.files
}

// dir is where thread t creates its entries; name gives entry i of a prefix.
func (w *metaWL) dir(t *Thread) string {
	if w.shared {
		return t.Shared("meta")
	}
	return t.Dir()
}

func (w *metaWL) name(t *Thread, prefix string, i int64) string {
	if w.shared {
		return w.dir(t) + "/" + prefix + "." + strconv.Itoa(t.Global) + "." + strconv.FormatInt(i, 10)
	}
	return w.dir(t) + "/" + prefix + "." + strconv.FormatInt(i, 10)
}

func (w *metaWL) Setup(_ context.Context, t *Thread) error {
	t.State = &metaState{}
	if w.shared {
		if err := t.FS.Mkdir(w.dir(t), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	if w.fileSize > 0 {
		t.Buffer(w.fileSize)
	}
	return nil
}

func (w *metaWL) Run(_ context.Context, t *Thread, p int) error {
	st := t.State.(*metaState)
	f := t.FS
	switch w.phases[p] {
	case PhaseDirCreation:
		m := t.Op("mkdir")
		for i := int64(0); t.More(i, w.files); i++ {
			s := t.Clock()
			err := f.Mkdir(w.name(t, "d", i), 0o755)
			m.Done(s, 0, err)
			if err == nil {
				st.dirs = i + 1
			}
		}
	case PhaseDirStat:
		m := t.Op("stat")
		for i := int64(0); t.More(i, st.dirs); i++ {
			s := t.Clock()
			_, err := f.Stat(w.name(t, "d", i))
			m.Done(s, 0, err)
		}
	case PhaseDirRemoval:
		m := t.Op("rmdir")
		for i := int64(0); t.More(i, st.dirs); i++ {
			s := t.Clock()
			m.Done(s, 0, f.Rmdir(w.name(t, "d", i)))
		}
	case PhaseFileCreation:
		m := t.Op("create")
		data := t.Buffer(w.fileSize)
		for i := int64(0); t.More(i, w.files); i++ {
			s := t.Clock()
			n, err := createFile(f, w.name(t, "f", i), data)
			m.Done(s, n, err)
			if err == nil {
				st.files = i + 1
			}
		}
	case PhaseFileStat:
		m := t.Op("stat")
		for i := int64(0); t.More(i, st.files); i++ {
			s := t.Clock()
			_, err := f.Stat(w.name(t, "f", i))
			m.Done(s, 0, err)
		}
	case PhaseFileRead:
		m := t.Op("read")
		buf := t.Buffer(max(w.fileSize, 1))
		for i := int64(0); t.More(i, st.files); i++ {
			s := t.Clock()
			n, err := readWhole(f, w.name(t, "f", i), buf)
			m.Done(s, n, err)
		}
	case PhaseRename:
		m := t.Op("rename")
		for i := int64(0); t.More(i, st.files); i++ {
			s := t.Clock()
			m.Done(s, 0, f.Rename(w.name(t, "f", i), w.name(t, "r", i)))
		}
		st.renamed = true
	case PhaseFileRemoval:
		m := t.Op("unlink")
		prefix := "f"
		if st.renamed {
			prefix = "r"
		}
		for i := int64(0); t.More(i, st.files); i++ {
			s := t.Clock()
			m.Done(s, 0, f.Unlink(w.name(t, prefix, i)))
		}
	case PhaseTreeCreation:
		m := t.Op("tree")
		for i := int64(0); t.More(i, w.trees); i++ {
			s := t.Clock()
			items, err := w.makeTree(t, w.name(t, "t", i), 0)
			m.Done(s, 0, err)
			m.Items(items)
			if err == nil {
				st.trees = i + 1
			}
		}
	case PhaseTreeRemoval:
		m := t.Op("tree")
		for i := int64(0); t.More(i, st.trees); i++ {
			s := t.Clock()
			items, err := removeTree(f, w.name(t, "t", i), 0)
			m.Done(s, 0, err)
			m.Items(items)
		}
	}
	return nil
}

// makeTree creates directory dir with tree_files files and, above the last
// level, tree_fanout subtrees; it returns the entries created.
func (w *metaWL) makeTree(t *Thread, dir string, level int64) (int64, error) {
	if err := t.FS.Mkdir(dir, 0o755); err != nil {
		return 0, err
	}
	items := int64(1)
	for k := int64(0); k < w.tfiles; k++ {
		if _, err := createFile(t.FS, dir+"/f."+strconv.FormatInt(k, 10), nil); err != nil {
			return items, err
		}
		items++
	}
	if level < w.depth {
		for k := int64(0); k < w.fanout; k++ {
			n, err := w.makeTree(t, dir+"/d."+strconv.FormatInt(k, 10), level+1)
			items += n
			if err != nil {
				return items, err
			}
		}
	}
	return items, nil
}

// removeTree removes a tree by listing and removing, as rm -r does; it returns
// the entries removed. Depth is bounded by the key's maximum.
func removeTree(f fsys.FS, dir string, level int) (int64, error) {
	if level > 64 {
		return 0, fmt.Errorf("tree %s deeper than 64 levels", dir)
	}
	ents, err := f.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var items int64
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		if e.IsDir() {
			n, err := removeTree(f, p, level+1)
			items += n
			if err != nil {
				return items, err
			}
			continue
		}
		if err := f.Unlink(p); err != nil {
			return items, err
		}
		items++
	}
	if err := f.Rmdir(dir); err != nil {
		return items, err
	}
	return items + 1, nil
}

// createFile creates name exclusively, writes data and closes it.
func createFile(f fsys.FS, name string, data []byte) (int64, error) {
	fh, err := f.OpenFile(name, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	var n int
	if len(data) > 0 {
		n, err = fh.Write(data)
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return int64(n), err
}

// maxFileRead bounds how much readWhole reads from one file, so that a file
// another process keeps appending to cannot hold a thread forever.
const maxFileRead = 1 << 40

// readWhole opens name, reads it to the end with buf-sized reads and closes it.
func readWhole(f fsys.FS, name string, buf []byte) (int64, error) {
	fh, err := f.OpenFile(name, syscall.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	var total int64
	for total < maxFileRead {
		n, err := fh.Read(buf)
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			fh.Close()
			return total, err
		}
	}
	return total, fh.Close()
}
