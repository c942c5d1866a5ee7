// Package perm decides POSIX permission questions the way Linux does for a
// file system without ACLs, so that a Cairn server can refuse an operation
// with the same EACCES/EPERM a local file system would give, at the same step.
//
// The package is pure: it looks only at its arguments.
package perm

import "slices"

// Cred is a caller's identity: its file-system uid, its primary gid and its
// supplementary groups. Groups may be nil and may repeat or include Gid.
type Cred struct {
	Uid, Gid uint32
	Groups   []uint32
}

// Bits of the want argument of Allowed. They have the values of the r, w and
// x bits of one permission class, so a class's bits can be compared with want
// directly.
const (
	Read  = 4
	Write = 2
	Exec  = 1
)

// Mode bits the checks look at. They are spelled out rather than taken from
// package syscall because the wire format of Cairn's modes is Linux's on every
// platform, while syscall's values follow the host.
const (
	typeMask  = 0o170000 // S_IFMT
	typeDir   = 0o040000 // S_IFDIR
	sticky    = 0o1000   // S_ISVTX
	anyExec   = 0o111    // S_IXUGO
	rwx       = Read | Write | Exec
	ownerBits = 6
	groupBits = 3
)

// Allowed reports whether c may access an inode with mode (type bits and
// permission bits), owner uid and group gid for every bit of want, as Linux's
// generic_permission decides it without ACLs.
//
// Uid 0 always gets Read and Write, and gets Exec when the inode is a
// directory or at least one of its three x bits is set. Anyone else is judged
// by exactly one class: the owner class when c.Uid == uid, else the group class
// when gid is c.Gid or one of c.Groups, else the other class. Only that class
// is consulted, so an owner is refused by mode 0o077 even though everyone else
// is let in.
//
// Bits of want other than Read, Write and Exec are ignored; an empty want is
// allowed.
func Allowed(c Cred, mode, uid, gid uint32, want uint32) bool {
	want &= rwx
	if c.Uid == 0 {
		// CAP_DAC_OVERRIDE lets root execute a regular file only if somebody
		// could, so that root does not run data files by accident.
		return want&Exec == 0 || mode&typeMask == typeDir || mode&anyExec != 0
	}
	var class uint32
	switch {
	case c.Uid == uid:
		class = mode >> ownerBits
	case c.inGroup(gid):
		class = mode >> groupBits
	default:
		class = mode
	}
	return class&want == want
}

// MayDelete reports whether c may remove, or rename away, an entry owned by
// fileUid from a directory with mode dirMode owned by dirUid. It assumes the
// caller has already checked that c has Write|Exec on the directory (Allowed).
//
// Without the sticky bit (S_ISVTX) in dirMode that is enough and MayDelete is
// true. With it, as in /tmp, only uid 0, the entry's owner or the directory's
// owner may remove the entry.
func MayDelete(c Cred, dirMode, dirUid, fileUid uint32) bool {
	if dirMode&sticky == 0 {
		return true
	}
	return c.Uid == 0 || c.Uid == fileUid || c.Uid == dirUid
}

func (c Cred) inGroup(gid uint32) bool {
	return c.Gid == gid || slices.Contains(c.Groups, gid)
}

// Errors a change of attributes is refused with, as Linux's errno values.
const (
	EPERM  = 1
	EACCES = 13
)

// Attr is what the checks of a change know of an inode.
type Attr struct {
	Mode, Uid, Gid uint32 // Mode with the type bits
}

// Chmod is 0 when c may change the mode of a, else EPERM (only the owner
// and uid 0 may).
func Chmod(c Cred, a Attr) int {
	if c.Uid == 0 || c.Uid == a.Uid {
		return 0
	}
	return EPERM
}

// Chown is 0 when c may give a the owner uid and group gid (either kept
// as it is when unchanged), else EPERM, as Linux's chown_ok and
// chgrp_ok decide: only uid 0 changes the owner; the owner may change the
// group to one of its own.
func Chown(c Cred, a Attr, uid, gid uint32) int {
	if c.Uid == 0 {
		return 0
	}
	if uid != a.Uid {
		return EPERM
	}
	if gid != a.Gid && (c.Uid != a.Uid || !c.inGroup(gid)) {
		return EPERM
	}
	return 0
}

// Times is 0 when c may set a's access and modification times: to given
// values only as the owner or uid 0 (else EPERM); to the current time also
// with write permission (else EACCES).
func Times(c Cred, a Attr, toNow bool) int {
	if c.Uid == 0 || c.Uid == a.Uid {
		return 0
	}
	if toNow && Allowed(c, a.Mode, a.Uid, a.Gid, Write) {
		return 0
	}
	if toNow {
		return EACCES
	}
	return EPERM
}

// Xattr is 0 when c may set or remove the extended attribute name of a:
// user.* needs write permission (EACCES), the ACLs in system.* the owner
// or uid 0 (EPERM), and every other namespace (trusted.*, security.*)
// uid 0 (EPERM).
func Xattr(c Cred, a Attr, name string) int {
	switch {
	case len(name) > 5 && name[:5] == "user.":
		if Allowed(c, a.Mode, a.Uid, a.Gid, Write) {
			return 0
		}
		return EACCES
	case len(name) > 7 && name[:7] == "system.":
		return Chmod(c, a)
	case c.Uid == 0:
		return 0
	}
	return EPERM
}

// KeepsSetgid reports whether a new inode with group gid made by c may
// keep its set-group-id bit: only when c is in that group or is uid 0, as
// Linux clears it on chmod otherwise.
func KeepsSetgid(c Cred, gid uint32) bool { return c.Uid == 0 || c.inGroup(gid) }
