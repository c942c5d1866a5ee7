package fusefs

import (
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
)

// TestStaleNames: a file with one link found under a name while the kernel
// was given another gets a new generation, once, unless it is open here;
// directories, hard links, this mount's own renames and expired names do
// not.
func TestStaleNames(t *testing.T) {
	file := &client.Attr{Ino: 10, Mode: syscall.S_IFREG | 0o644, Nlink: 1}
	linked := &client.Attr{Ino: 11, Mode: syscall.S_IFREG | 0o644, Nlink: 2}
	dir := &client.Attr{Ino: 12, Mode: syscall.S_IFDIR | 0o755, Nlink: 2}
	cases := []struct {
		name   string
		setup  func(s *staleNames)
		found  *client.Attr
		open   bool
		bumped bool
	}{
		{"renamed elsewhere", func(s *staleNames) { s.gave(1, "a", file) }, file, false, true},
		{"renamed elsewhere, open here", func(s *staleNames) { s.gave(1, "a", file) }, file, true, false},
		{"the same name again", func(s *staleNames) { s.gave(1, "b", file) }, file, false, false},
		{"a hard link", func(s *staleNames) { s.gave(1, "a", linked) }, linked, false, false},
		{"a directory", func(s *staleNames) { s.gave(1, "a", dir) }, dir, false, false},
		{"renamed here", func(s *staleNames) { s.gave(1, "a", file); s.moved(1, "a", 1, "b") }, file, false, false},
		{"unlinked here", func(s *staleNames) { s.gave(1, "a", file); s.forget(1, "a") }, file, false, false},
		{"never given", func(s *staleNames) {}, file, false, false},
	}
	for _, c := range cases {
		s := newStaleNames(time.Minute)
		c.setup(s)
		old, bumped := s.found(1, "b", c.found, func() bool { return c.open })
		if bumped != c.bumped {
			t.Errorf("%s: bumped %v, want %v", c.name, bumped, c.bumped)
		}
		want := uint64(0)
		if c.bumped {
			want = 1
			if old != (nameKey{1, "a"}) {
				t.Errorf("%s: stale name %v, want a", c.name, old)
			}
		}
		if g := s.generation(c.found.Ino); g != want {
			t.Errorf("%s: generation +%d, want +%d", c.name, g, want)
		}
		// Once bumped, the old name is forgotten: a second lookup under
		// the new name changes nothing.
		if _, again := s.found(1, "b", c.found, func() bool { return c.open }); again {
			t.Errorf("%s: bumped twice", c.name)
		}
	}

	// An expired name is not the kernel's any more.
	s := newStaleNames(0)
	s.gave(1, "a", file)
	time.Sleep(nameHintSlack + 10*time.Millisecond)
	if _, bumped := s.found(1, "b", file, func() bool { return false }); bumped {
		t.Error("an expired name counted as held")
	}
}

// TestListingShowsRenamedFileTwice: a listing that read its partitions
// while another client renamed a file shows the file under both names;
// the kernel must not get both entries for one inode (it would then answer
// a rename of the one onto the other itself), so the second entry carries
// a new generation.
func TestListingShowsRenamedFileTwice(t *testing.T) {
	fs := &FS{root: 1, stale: newStaleNames(time.Minute)}
	file := &client.Attr{Ino: 10, Mode: syscall.S_IFREG | 0o644, Nlink: 1}
	var n0, n2 fuse.EntryOut
	fs.plusEntry(grantToken{}, 7, client.DirEntry{Name: "n0", Ino: 10, Type: syscall.S_IFREG, Attr: file}, &n0)
	fs.plusEntry(grantToken{}, 7, client.DirEntry{Name: "n2", Ino: 10, Type: syscall.S_IFREG, Attr: file}, &n2)
	if n0.NodeId != n2.NodeId {
		t.Fatalf("node ids %d and %d, want one inode's", n0.NodeId, n2.NodeId)
	}
	if n0.Generation == n2.Generation {
		t.Fatalf("both entries carry generation %d: the kernel would hold one inode under two names", n0.Generation)
	}
	// A hard-linked file keeps its generation under both names.
	linked := &client.Attr{Ino: 11, Mode: syscall.S_IFREG | 0o644, Nlink: 2}
	var a, b fuse.EntryOut
	fs.plusEntry(grantToken{}, 7, client.DirEntry{Name: "a", Ino: 11, Type: syscall.S_IFREG, Attr: linked}, &a)
	fs.plusEntry(grantToken{}, 7, client.DirEntry{Name: "b", Ino: 11, Type: syscall.S_IFREG, Attr: linked}, &b)
	if a.Generation != b.Generation {
		t.Fatalf("a hard link's names carry generations %d and %d", a.Generation, b.Generation)
	}
}
