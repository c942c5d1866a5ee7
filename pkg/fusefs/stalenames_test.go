package fusefs

import (
	"syscall"
	"testing"
	"time"

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
