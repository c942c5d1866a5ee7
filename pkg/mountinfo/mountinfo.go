// Package mountinfo reads the kernel's table of mounts
// (/proc/self/mountinfo): whether a path is a mount point, and what is
// mounted there.
package mountinfo

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// Entry is one mount.
type Entry struct {
	MountPoint string // absolute, unescaped
	FSType     string // "fuse.cairn", "ext4", ...
	Source     string // the mount source ("cairn:VOLUME" for a Cairn mount)
	Options    string // the per-mount options ("rw,nosuid,relatime")
}

// Lookup returns the mount at path (the last one, if several are stacked
// there), and whether there is one.
func Lookup(path string) (Entry, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Entry{}, false, err
	}
	defer f.Close()
	return lookup(f, path)
}

// Containing returns the mount that holds path: the one with the longest
// mount point that is path or one of its parents.
func Containing(path string) (Entry, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Entry{}, false, err
	}
	defer f.Close()
	return containing(f, path)
}

// Mounted reports whether path is a mount point.
func Mounted(path string) (bool, error) {
	_, ok, err := Lookup(path)
	return ok, err
}

// lookup finds the last mount at path in the mountinfo lines of r.
func lookup(r io.Reader, path string) (Entry, bool, error) {
	return scan(r, func(e, _ Entry) bool { return e.MountPoint == path })
}

// containing finds the innermost mount holding path in the lines of r.
func containing(r io.Reader, path string) (Entry, bool, error) {
	return scan(r, func(e, best Entry) bool {
		p := e.MountPoint
		return (p == "/" || path == p || strings.HasPrefix(path, p+"/")) && len(p) >= len(best.MountPoint)
	})
}

// scan reads mountinfo lines ("ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS
// [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS") and returns the last entry
// better says beats the best so far (the zero Entry at first).
func scan(r io.Reader, better func(e, best Entry) bool) (Entry, bool, error) {
	var (
		best Entry
		ok   bool
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, found := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !found || len(a) < 6 || len(b) < 2 {
			continue
		}
		e := Entry{MountPoint: unescape(a[4]), Options: a[5], FSType: unescape(b[0]), Source: unescape(b[1])}
		if better(e, best) {
			best, ok = e, true
		}
	}
	return best, ok, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
