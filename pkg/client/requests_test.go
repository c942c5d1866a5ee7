package client

import (
	"context"
	"fmt"
	"maps"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// TestOneRequestPerNameOp counts the metadata requests of each name
// operation whose name routes to another partition than its parent's home
// (the follow-ups are the partition's): create, create+open, mkdir, mknod,
// symlink, lookup, open and unlink cost one each, closing an unwritten
// file none; an unlink of a file open here leaves the eviction to the last
// close.
func TestOneRequestPerNameOp(t *testing.T) {
	v, ctx, d := startWithDir(t)
	home := v.HomeOf(d.Ino)
	names := map[string]string{}
	for i := 0; len(names) < 8; i++ {
		n := fmt.Sprint("n", i)
		if v.RouteName(d.Ino, n) != home {
			names[fmt.Sprint(len(names))] = n
		}
	}
	name := func(i int) string { return names[fmt.Sprint(i)] }
	cost := func(what string, want int64, fn func() error) {
		t.Helper()
		before := v.Stats().MetaRequests
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := v.Stats().MetaRequests - before; got != want {
			t.Errorf("%s: %d metadata requests, want %d", what, got, want)
		}
	}
	var file *Attr
	cost("create", 1, func() (err error) { file, err = v.Create(ctx, d.Ino, name(0), 0o644, 0, 0); return err })
	var f *File
	cost("create and open", 1, func() (err error) {
		_, f, err = v.CreateFile(ctx, d.Ino, name(1), 0o644, 0, 0, syscall.O_RDWR)
		return err
	})
	cost("flush of an unwritten file", 0, func() error { return f.Flush(ctx) })
	cost("close of an unwritten file", 0, func() error { return f.Close(ctx) })
	cost("mkdir", 1, func() error { _, err := v.Mkdir(ctx, d.Ino, name(2), 0o755, 0, 0); return err })
	cost("mknod", 1, func() error { _, err := v.Mknod(ctx, d.Ino, name(3), syscall.S_IFIFO|0o644, 0, 0, 0); return err })
	cost("symlink", 1, func() error { _, err := v.Symlink(ctx, d.Ino, name(4), "target", 0, 0); return err })
	cost("lookup", 1, func() error {
		a, err := v.LookupChild(ctx, d.Ino, name(0))
		if err == nil && a.Ino != file.Ino {
			err = fmt.Errorf("found inode %d, want %d", a.Ino, file.Ino)
		}
		return err
	})
	cost("lookup of a missing name", 1, func() error {
		if _, err := v.LookupChild(ctx, d.Ino, name(7)); !isErrno(err, syscall.ENOENT) {
			return fmt.Errorf("want ENOENT, got %v", err)
		}
		return nil
	})
	cost("open", 1, func() (err error) { f, err = v.OpenFile(ctx, file.Ino, syscall.O_RDONLY); return err })
	cost("close", 0, func() error { return f.Close(ctx) })
	for i, what := range []string{"unlink", "", "", "unlink of a fifo", "unlink of a symlink"} {
		if what != "" {
			cost(what, 1, func() error { return v.Unlink(ctx, d.Ino, name(i)) })
		}
	}
	if _, err := v.GetAttr(ctx, file.Ino); !isErrno(err, syscall.ENOENT) {
		t.Errorf("unlinked file: %v, want ENOENT", err)
	}
	if a, err := v.GetAttr(ctx, d.Ino); err != nil || a.Nlink != 3 {
		t.Errorf("parent after its subdirectory's mkdir: %+v %v, want nlink 3", a, err)
	}

	// Open here: the unlink does not evict, the last close does.
	open, err := v.Lookup(ctx, d.Ino, name(1))
	if err != nil {
		t.Fatal(err)
	}
	if f, err = v.OpenFile(ctx, open.Ino, syscall.O_RDONLY); err != nil {
		t.Fatal(err)
	}
	cost("unlink of an open file", 1, func() error { return v.Unlink(ctx, d.Ino, name(1)) })
	if a, err := v.GetAttr(ctx, open.Ino); err != nil || a.Nlink != 0 {
		t.Fatalf("open unlinked file: %+v %v", a, err)
	}
	cost("last close of an unlinked file", 1, func() error { return f.Close(ctx) })
	if _, err := v.GetAttr(ctx, open.Ino); !isErrno(err, syscall.ENOENT) {
		t.Errorf("unlinked file after its last close: %v, want ENOENT", err)
	}
	// The SDK's Lookup and Unlink still tell a missing name from a parent
	// that is no directory (one more request, only then).
	if _, err := v.Lookup(ctx, open.Ino, "x"); !isErrno(err, syscall.ENOENT) {
		t.Errorf("lookup in a removed directory: %v", err)
	}
	fifo, err := v.Mknod(ctx, d.Ino, "fifo", syscall.S_IFIFO|0o644, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Lookup(ctx, fifo.Ino, "x"); !isErrno(err, syscall.ENOTDIR) {
		t.Errorf("lookup in a fifo: %v, want ENOTDIR", err)
	}
	if err := v.Unlink(ctx, fifo.Ino, "x"); !isErrno(err, syscall.ENOTDIR) {
		t.Errorf("unlink in a fifo: %v, want ENOTDIR", err)
	}
	if _, err := v.Create(ctx, fifo.Ino, "x", 0o644, 0, 0); !isErrno(err, syscall.ENOTDIR) {
		t.Errorf("create in a fifo: %v, want ENOTDIR", err)
	}
}

// TestOneRequestPerCreateWithLayouts: on a volume that can hold chunked
// files, the partition reads the parent's layout attribute for a create
// (one request); a mkdir below a directory with the attribute copies it
// with a second request.
func TestOneRequestPerCreateWithLayouts(t *testing.T) {
	v, f := startChunkedFake(t, Options{})
	ctx := context.Background()
	cost := func(what string, want int64, fn func() error) {
		t.Helper()
		before := v.Stats().MetaRequests
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := v.Stats().MetaRequests - before; got != want {
			t.Errorf("%s: %d metadata requests, want %d", what, got, want)
		}
	}
	layoutOf := func(ino uint64) metapb.FileLayout {
		t.Helper()
		in, err := v.getInode(ctx, "test", ino)
		if err != nil {
			t.Fatal(err)
		}
		return in.GetLayout()
	}
	var d, plain, sub, g *Attr
	cost("mkdir", 1, func() (err error) { d, err = v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0); return err })
	cost("create", 1, func() (err error) { plain, err = v.Create(ctx, d.Ino, "plain", 0o644, 0, 0); return err })
	if l := layoutOf(plain.Ino); l != metapb.FileLayout_FILE_LAYOUT_CDC {
		t.Errorf("file in a directory without the attribute: %v, want the volume's default (cdc)", l)
	}
	// Another client sets the attribute.
	f.mu.Lock()
	res := f.homeOf(d.Ino).ApplyBatch(&metapb.Batch{NowNs: 1, Txns: []*metapb.Txn{{Ops: []*metapb.Op{{Op: &metapb.Op_SetXattr{SetXattr: &metapb.SetXattr{Ino: d.Ino, Name: LayoutAttr, Value: []byte("extent")}}}}}}})[0]
	f.mu.Unlock()
	if res.Errno != 0 {
		t.Fatal(res.Message)
	}
	cost("create below a directory with the attribute", 1, func() (err error) { g, err = v.Create(ctx, d.Ino, "g", 0o644, 0, 0); return err })
	if l := layoutOf(g.Ino); l != metapb.FileLayout_FILE_LAYOUT_EXTENT {
		t.Errorf("file in an extent directory: %v", l)
	}
	cost("mkdir copying the attribute", 2, func() (err error) { sub, err = v.Mkdir(ctx, d.Ino, "sub", 0o755, 0, 0); return err })
	cost("create in the copy", 1, func() (err error) { g, err = v.Create(ctx, sub.Ino, "g", 0o644, 0, 0); return err })
	if l := layoutOf(g.Ino); l != metapb.FileLayout_FILE_LAYOUT_EXTENT {
		t.Errorf("file in a subdirectory that inherited extent: %v", l)
	}
}

// TestChangingNamesInodes checks what WithChanging reports, which a mount
// relies on to forget only the attributes a change makes stale: rename
// names the moved inode and the one it replaces, an exchange both, rmdir
// the removed directory; none names the parents.
func TestChangingNamesInodes(t *testing.T) {
	v, ctx, d := startWithDir(t)
	mk := func(name string) uint64 {
		t.Helper()
		a, err := v.Create(ctx, d.Ino, name, 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	named := func(fn func(ctx context.Context) error) map[uint64]bool {
		t.Helper()
		got := map[uint64]bool{}
		if err := fn(WithChanging(ctx, func(ino uint64) { got[ino] = true })); err != nil {
			t.Fatal(err)
		}
		return got
	}
	a, b, c := mk("a"), mk("b"), mk("c")
	if got := named(func(ctx context.Context) error { return v.Rename(ctx, d.Ino, "a", RootIno, "a2", 0) }); !maps.Equal(got, map[uint64]bool{a: true}) {
		t.Errorf("rename to a new name named %v, want the moved inode %d", got, a)
	}
	if got := named(func(ctx context.Context) error { return v.Rename(ctx, d.Ino, "b", d.Ino, "c", 0) }); !maps.Equal(got, map[uint64]bool{b: true, c: true}) {
		t.Errorf("rename over a file named %v, want %d and the replaced %d", got, b, c)
	}
	e := mk("e")
	if got := named(func(ctx context.Context) error { return v.Rename(ctx, d.Ino, "c", d.Ino, "e", RenameExchange) }); !maps.Equal(got, map[uint64]bool{b: true, e: true}) {
		t.Errorf("exchange named %v, want %d and %d", got, b, e)
	}
	sub, err := v.Mkdir(ctx, d.Ino, "sub", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := named(func(ctx context.Context) error { return v.Rmdir(ctx, d.Ino, "sub") }); !maps.Equal(got, map[uint64]bool{sub.Ino: true}) {
		t.Errorf("rmdir named %v, want the directory %d", got, sub.Ino)
	}
}

// TestRenameHints: a rename within one directory that the server leaves
// to the client, given what its names hold (a mount's hints), costs its
// Txns only, and hints that are wrong in
// every way still give the result and errno of a rename without them, with
// nothing else changed.
func TestRenameHints(t *testing.T) {
	v, ctx, d := startWithDir(t)
	// Names on one partition that is not the directory's home: a rename
	// among them is one Txn there and the directory's TouchDir at home.
	home := v.HomeOf(d.Ino)
	var part uint64
	var names []string
	for i := 0; len(names) < 12; i++ {
		n := fmt.Sprint("r", i)
		if p := v.RouteName(d.Ino, n); p != home && (part == 0 || p == part) {
			part = p
			names = append(names, n)
		}
	}
	mk := func(name string) *Attr {
		t.Helper()
		a, err := v.Create(ctx, d.Ino, name, 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	found := func(a *Attr) *NameHint { return &NameHint{Ino: a.Ino, Mode: a.Mode} }
	absent := &NameHint{Absent: true}
	holds := func(name string) uint64 {
		t.Helper()
		a, err := v.LookupChild(ctx, d.Ino, name)
		if isErrno(err, syscall.ENOENT) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	rename := func(src, dst *NameHint, from, to string) (int64, error) {
		before := v.Stats().MetaRequests
		err := v.Rename(WithRenameHints(ctx, src, dst), d.Ino, from, d.Ino, to, 0)
		return v.Stats().MetaRequests - before, err
	}

	// The fake answers PATH_OP_RENAME as a node of an earlier version
	// does (EINVAL): each rename costs that request first, then the
	// client's own protocol.
	a := mk(names[0])
	if n, err := rename(nil, nil, names[0], names[1]); err != nil || n != 4 {
		t.Errorf("rename without hints: %d requests, %v; want 4 (the refused rename, two lookups, the Txn, which sends the parent's TouchDir)", n, err)
	}
	if n, err := rename(found(a), absent, names[1], names[2]); err != nil || n != 2 {
		t.Errorf("rename with hints: %d requests, %v; want 2 (the refused rename, the Txn, which sends the parent's TouchDir)", n, err)
	}
	if holds(names[2]) != a.Ino || holds(names[1]) != 0 {
		t.Fatalf("after the hinted rename %s holds %d, %s %d; want %d and nothing", names[2], holds(names[2]), names[1], holds(names[1]), a.Ino)
	}

	// The source is another inode than the hint says.
	b, c := mk(names[3]), mk(names[4])
	if _, err := rename(found(c), absent, names[3], names[5]); err != nil {
		t.Fatalf("rename with a source hint of another inode: %v", err)
	}
	if holds(names[5]) != b.Ino || holds(names[3]) != 0 || holds(names[4]) != c.Ino {
		t.Errorf("stale source hint: moved the wrong inode")
	}
	// The new name exists though the hint says it is free: replaced, as
	// rename(2) does.
	if _, err := rename(found(b), absent, names[5], names[4]); err != nil {
		t.Fatalf("rename over a file hinted free: %v", err)
	}
	if holds(names[4]) != b.Ino || holds(names[5]) != 0 {
		t.Errorf("rename over a file hinted free: %s holds %d, want %d", names[4], holds(names[4]), b.Ino)
	}
	if _, err := v.GetAttr(ctx, c.Ino); !isErrno(err, syscall.ENOENT) {
		t.Errorf("the replaced inode %d: %v, want ENOENT", c.Ino, err)
	}
	// A directory there: EISDIR, as without hints, and nothing moved.
	sub, err := v.Mkdir(ctx, d.Ino, names[6], 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rename(found(b), absent, names[4], names[6]); !isErrno(err, syscall.EISDIR) {
		t.Errorf("file onto a directory hinted free: %v, want EISDIR", err)
	}
	if holds(names[4]) != b.Ino || holds(names[6]) != sub.Ino {
		t.Errorf("a failed rename changed names")
	}
	// The source is gone: ENOENT, and the new name is not left behind.
	if _, err := rename(found(b), absent, names[7], names[8]); !isErrno(err, syscall.ENOENT) {
		t.Errorf("missing source hinted present: %v, want ENOENT", err)
	}
	if holds(names[8]) != 0 {
		t.Errorf("a failed rename left %s", names[8])
	}
	// Hints that make both names one inode, while the new name is free:
	// the rename still happens.
	if _, err := rename(found(b), found(b), names[4], names[9]); err != nil {
		t.Fatalf("rename hinted as onto its own inode: %v", err)
	}
	if holds(names[9]) != b.Ino || holds(names[4]) != 0 {
		t.Errorf("rename hinted as onto its own inode did not move")
	}
}

// TestRmdirHint: an rmdir given the directory its name holds skips its
// lookup, and a stale hint (another directory, one with names in it, a
// name that is gone or holds a file) still gives the errno and result of
// an rmdir without it.
func TestRmdirHint(t *testing.T) {
	v, ctx, d := startWithDir(t)
	mkdir := func(name string) *Attr {
		t.Helper()
		a, err := v.Mkdir(ctx, d.Ino, name, 0o755, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	hint := func(a *Attr) *NameHint { return &NameHint{Ino: a.Ino, Mode: a.Mode} }
	rmdir := func(h *NameHint, name string) (int64, error) {
		before := v.Stats().MetaRequests
		err := v.Rmdir(WithRmdirHint(ctx, h), d.Ino, name)
		return v.Stats().MetaRequests - before, err
	}
	a, b := mkdir("a"), mkdir("b")
	plain, err := rmdir(nil, "a")
	if err != nil {
		t.Fatal(err)
	}
	hinted, err := rmdir(hint(b), "b")
	if err != nil {
		t.Fatal(err)
	}
	if hinted != plain-1 {
		t.Errorf("rmdir with a hint: %d requests, without %d; want one fewer", hinted, plain)
	}

	// The name now holds another directory than the hint says.
	c := mkdir("c")
	if _, err := rmdir(hint(a), "c"); err != nil {
		t.Fatalf("rmdir with a hint of a removed directory: %v", err)
	}
	if _, err := v.GetAttr(ctx, c.Ino); !isErrno(err, syscall.ENOENT) {
		t.Errorf("the directory the name held: %v, want it removed", err)
	}
	// The hinted directory has names in it, the one the name holds none.
	full, empty := mkdir("full"), mkdir("empty")
	if _, err := v.Create(ctx, full.Ino, "x", 0o644, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rmdir(hint(full), "empty"); err != nil {
		t.Fatalf("rmdir of an empty directory hinted as a full one: %v", err)
	}
	if _, err := v.GetAttr(ctx, empty.Ino); !isErrno(err, syscall.ENOENT) {
		t.Errorf("empty directory: %v, want it removed", err)
	}
	if _, err := rmdir(hint(full), "full"); !isErrno(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a full directory: %v, want ENOTEMPTY", err)
	}
	// Gone, or a file: the errnos of a plain rmdir.
	if _, err := rmdir(hint(full), "gone"); !isErrno(err, syscall.ENOENT) {
		t.Errorf("rmdir of a missing name hinted as a directory: %v, want ENOENT", err)
	}
	if _, err := v.Create(ctx, d.Ino, "file", 0o644, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rmdir(hint(full), "file"); !isErrno(err, syscall.ENOTDIR) {
		t.Errorf("rmdir of a file hinted as a directory: %v, want ENOTDIR", err)
	}
	if _, err := v.GetAttr(ctx, full.Ino); err != nil {
		t.Errorf("the hinted directory after the failed rmdirs: %v", err)
	}
	if _, err := v.Create(ctx, full.Ino, "y", 0o644, 0, 0); err != nil {
		t.Errorf("create in the hinted directory after the failed rmdirs: %v (a fence left behind?)", err)
	}
}

// startWithDir starts a volume with data nodes and makes directory "d"
// in its root.
func startWithDir(t *testing.T) (*Volume, context.Context, *Attr) {
	t.Helper()
	v, _ := startWithData(t, Options{})
	ctx := context.Background()
	d, err := v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v, ctx, d
}

// TestThenStepsUndone: when the partition reports a Txn's then steps
// undone (their homes did not answer in time), the client runs each group
// itself under the request id the partition gave it, so that a group the
// partition did apply after all is not applied twice.
func TestThenStepsUndone(t *testing.T) {
	v, _, f := startWithDataMap(t, Options{}, nil)
	ctx := context.Background()
	d, err := v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	home := v.HomeOf(d.Ino)
	var names []string
	for i := 0; len(names) < 4; i++ {
		if n := fmt.Sprint("u", i); v.RouteName(d.Ino, n) != home {
			names = append(names, n)
		}
	}
	sub, err := v.Mkdir(ctx, d.Ino, names[0], 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	before, err := v.GetAttr(ctx, d.Ino)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.thenUndone = true
	f.mu.Unlock()
	n0 := v.Stats().MetaRequests
	if err := v.Rmdir(WithRmdirHint(ctx, &NameHint{Ino: sub.Ino, Mode: sub.Mode}), d.Ino, names[0]); err != nil {
		t.Fatal(err)
	}
	undone := v.Stats().MetaRequests - n0
	after, err := v.GetAttr(ctx, d.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if after.Nlink != before.Nlink-1 {
		t.Errorf("parent nlink %d after an rmdir whose steps the client ran, want %d", after.Nlink, before.Nlink-1)
	}
	if _, err := v.GetAttr(ctx, sub.Ino); !isErrno(err, syscall.ENOENT) {
		t.Errorf("removed directory: %v, want ENOENT", err)
	}

	// The same rmdir with the steps run by the partition costs the
	// client one request per group fewer.
	sub, err = v.Mkdir(ctx, d.Ino, names[1], 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.thenUndone = false
	f.mu.Unlock()
	n0 = v.Stats().MetaRequests
	if err := v.Rmdir(WithRmdirHint(ctx, &NameHint{Ino: sub.Ino, Mode: sub.Mode}), d.Ino, names[1]); err != nil {
		t.Fatal(err)
	}
	if done := v.Stats().MetaRequests - n0; done >= undone {
		t.Errorf("rmdir: %d requests with the steps sent by the partition, %d without; want fewer", done, undone)
	}
	if a, err := v.GetAttr(ctx, d.Ino); err != nil || a.Nlink != before.Nlink-1 {
		t.Errorf("parent after the second mkdir and rmdir: %+v %v, want nlink %d", a, err, before.Nlink-1)
	}

	// A group the client reruns under the partition's request id after
	// the partition applied it (its answer lost) applies once.
	f.mu.Lock()
	p := f.homeOf(d.Ino)
	id := metapb.FollowUpID(12345, metapb.FollowUpThen)
	touch := &metapb.Txn{RequestId: id, Ops: []*metapb.Op{opTouchDir(d.Ino, -1, 777)}}
	first := f.apply(p, touch)
	again := f.apply(p, &metapb.Txn{RequestId: id, Ops: []*metapb.Op{opLink(d.Ino, -1)}})
	f.mu.Unlock()
	if first.Errno != 0 || again.Errno != 0 {
		t.Fatalf("touch %v, rerun %v", first, again)
	}
	if a, err := v.GetAttr(ctx, d.Ino); err != nil || a.Nlink != before.Nlink-2 {
		t.Errorf("parent after a group rerun under its request id: %+v %v, want nlink %d (applied once)", a, err, before.Nlink-2)
	}
}
