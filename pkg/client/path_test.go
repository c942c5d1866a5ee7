package client

import (
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

func TestSubstitute(t *testing.T) {
	for _, c := range []struct {
		comps    []string
		k        int
		target   string
		trailing bool
		want     string
	}{
		{[]string{"a", "l", "f"}, 1, "b", false, "/a/b/f"},
		{[]string{"a", "l", "f"}, 1, "/x/y", false, "/x/y/f"},
		{[]string{"a", "l"}, 1, "../c", true, "/a/../c/"},
		{[]string{"l"}, 0, "d/e", false, "/d/e"},
		{[]string{"..", "l", "f"}, 1, "b", false, "/../b/f"},
	} {
		if got := substitute(c.comps, c.k, c.target, c.trailing); got != c.want {
			t.Errorf("substitute(%q, %d, %q) = %q, want %q", c.comps, c.k, c.target, got, c.want)
		}
	}
}

func TestSetattrAllowed(t *testing.T) {
	file := &metapb.Inode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: 0o644, Uid: 10, Gid: 20}
	owner, other, member := Cred{Uid: 10, Gid: 10}, Cred{Uid: 11, Gid: 20}, Cred{Uid: 10, Gid: 1, Groups: []uint32{30}}
	for _, c := range []struct {
		name string
		cred Cred
		in   SetattrIn
		want syscall.Errno
	}{
		{"root does anything", Cred{}, SetattrIn{Valid: SetUID | SetMode, Uid: 5}, 0},
		{"owner chmod", owner, SetattrIn{Valid: SetMode, Mode: 0o600}, 0},
		{"other chmod", other, SetattrIn{Valid: SetMode, Mode: 0o600}, syscall.EPERM},
		{"owner gives the file away", owner, SetattrIn{Valid: SetUID, Uid: 11}, syscall.EPERM},
		{"owner to a group it is in", member, SetattrIn{Valid: SetGID, Gid: 30}, 0},
		{"owner to a group it is not in", owner, SetattrIn{Valid: SetGID, Gid: 30}, syscall.EPERM},
		{"truncate without write permission", other, SetattrIn{Valid: SetSize}, syscall.EACCES},
		{"truncate by the owner", owner, SetattrIn{Valid: SetSize}, 0},
		{"touch by a non-owner without write", other, SetattrIn{Valid: SetMtimeNow}, syscall.EACCES},
		{"explicit times by a non-owner", other, SetattrIn{Valid: SetMtime}, syscall.EPERM},
	} {
		if got := setattrAllowed(c.cred, file, c.in); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
