package perm

import "testing"

const (
	dir  = 0o040000
	file = 0o100000
)

func TestAllowed(t *testing.T) {
	root := Cred{Uid: 0, Gid: 0}
	alice := Cred{Uid: 1000, Gid: 1000}
	bob := Cred{Uid: 1001, Gid: 1001, Groups: []uint32{50, 1000}}
	carol := Cred{Uid: 1002, Gid: 1002}

	tests := []struct {
		name     string
		c        Cred
		mode     uint32
		uid, gid uint32
		want     uint32
		ok       bool
	}{
		// Root.
		{"root reads mode 0", root, file, 1000, 1000, Read, true},
		{"root writes mode 0", root, file, 1000, 1000, Write, true},
		{"root read+write mode 0", root, file, 1000, 1000, Read | Write, true},
		{"root no exec of non-executable file", root, file | 0o666, 1000, 1000, Exec, false},
		{"root exec when only other x set", root, file | 0o001, 1000, 1000, Exec, true},
		{"root exec when only group x set", root, file | 0o010, 1000, 1000, Exec, true},
		{"root searches dir mode 0", root, dir, 1000, 1000, Exec, true},
		{"root rwx dir mode 0", root, dir, 1000, 1000, Read | Write | Exec, true},
		{"root rwx on non-executable file", root, file | 0o600, 0, 0, Read | Write | Exec, false},

		// Owner class only.
		{"owner rw", alice, file | 0o600, 1000, 1000, Read | Write, true},
		{"owner denied but other allowed", alice, file | 0o077, 1000, 1000, Read, false},
		{"owner denied exec though group has it", alice, dir | 0o670, 1000, 1000, Exec, false},
		{"owner needs every bit", alice, file | 0o400, 1000, 1000, Read | Write, false},
		{"owner of file in foreign group", alice, file | 0o700, 1000, 5, Exec, true},

		// Group class.
		{"primary group", carol, file | 0o040, 1000, 1002, Read, true},
		{"supplementary group", bob, file | 0o040, 1000, 50, Read, true},
		{"supplementary group matches owner's group", bob, file | 0o060, 1000, 1000, Write, true},
		{"group denied though other allowed", bob, file | 0o007, 1000, 50, Read, false},
		{"group member without write", bob, file | 0o050, 1000, 50, Write, false},

		// Other class.
		{"other read", carol, file | 0o004, 1000, 1000, Read, true},
		{"other denied", carol, file | 0o770, 1000, 1000, Read, false},
		{"other search dir", carol, dir | 0o001, 1000, 1000, Exec, true},
		{"other not in supplementary list", carol, file | 0o074, 1000, 50, Read, true},

		// Want edge cases.
		{"empty want", carol, file, 1000, 1000, 0, true},
		{"unknown want bits ignored", alice, file | 0o400, 1000, 1000, Read | 0o10, true},
		{"special bits are not permission bits", carol, file | 0o7000, 1000, 1000, Exec, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Allowed(tt.c, tt.mode, tt.uid, tt.gid, tt.want); got != tt.ok {
				t.Errorf("Allowed(%+v, %#o, uid %d, gid %d, want %d) = %v, want %v",
					tt.c, tt.mode, tt.uid, tt.gid, tt.want, got, tt.ok)
			}
		})
	}
}

func TestMayDelete(t *testing.T) {
	root := Cred{Uid: 0}
	alice := Cred{Uid: 1000, Gid: 1000}
	bob := Cred{Uid: 1001, Gid: 1000}
	tests := []struct {
		name            string
		c               Cred
		dirMode         uint32
		dirUid, fileUid uint32
		ok              bool
	}{
		{"no sticky: anyone with w+x", bob, dir | 0o777, 0, 1000, true},
		{"sticky: stranger refused", bob, dir | 0o1777, 0, 1000, false},
		{"sticky: stranger in same group refused", bob, dir | 0o1777, 1002, 1000, false},
		{"sticky: file owner", alice, dir | 0o1777, 0, 1000, true},
		{"sticky: dir owner", bob, dir | 0o1777, 1001, 1000, true},
		{"sticky: root", root, dir | 0o1777, 1001, 1000, true},
		{"setgid is not sticky", bob, dir | 0o2777, 0, 1000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MayDelete(tt.c, tt.dirMode, tt.dirUid, tt.fileUid); got != tt.ok {
				t.Errorf("MayDelete(%+v, %#o, dir uid %d, file uid %d) = %v, want %v",
					tt.c, tt.dirMode, tt.dirUid, tt.fileUid, got, tt.ok)
			}
		})
	}
}

func TestAttributeChanges(t *testing.T) {
	file := Attr{Mode: 0o100664, Uid: 1000, Gid: 100}
	owner := Cred{Uid: 1000, Gid: 100, Groups: []uint32{100, 200}}
	groupie := Cred{Uid: 1001, Gid: 100}
	other := Cred{Uid: 1002, Gid: 300}
	root := Cred{}
	for _, tc := range []struct {
		name string
		got  int
		want int
	}{
		{"owner chmod", Chmod(owner, file), 0},
		{"group chmod", Chmod(groupie, file), EPERM},
		{"root chmod", Chmod(root, file), 0},
		{"owner keeps owner, own group", Chown(owner, file, 1000, 200), 0},
		{"owner to a group not its own", Chown(owner, file, 1000, 300), EPERM},
		{"owner gives the file away", Chown(owner, file, 1002, 100), EPERM},
		{"other changes the group", Chown(other, file, 1000, 300), EPERM},
		{"nothing changed by a stranger", Chown(other, file, 1000, 100), 0},
		{"root gives it away", Chown(root, file, 5, 5), 0},
		{"owner sets times", Times(owner, file, false), 0},
		{"group member sets times to now", Times(groupie, file, true), 0},
		{"group member sets given times", Times(groupie, file, false), EPERM},
		{"other sets times to now", Times(other, file, true), EACCES},
		{"user xattr by a writer", Xattr(groupie, file, "user.k"), 0},
		{"user xattr by other", Xattr(other, file, "user.k"), EACCES},
		{"acl by owner", Xattr(owner, file, "system.posix_acl_access"), 0},
		{"acl by group member", Xattr(groupie, file, "system.posix_acl_access"), EPERM},
		{"trusted by owner", Xattr(owner, file, "trusted.k"), EPERM},
		{"security by root", Xattr(root, file, "security.selinux"), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if !KeepsSetgid(owner, 200) || KeepsSetgid(owner, 300) || !KeepsSetgid(root, 300) {
		t.Error("KeepsSetgid")
	}
}
