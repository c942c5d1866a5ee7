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

// Mounted reports whether path is a mount point.
func Mounted(path string) (bool, error) {
	_, ok, err := Lookup(path)
	return ok, err
}

// lookup reads mountinfo lines from r: "ID PARENT MAJ:MIN ROOT MOUNTPOINT
// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS".
func lookup(r io.Reader, path string) (Entry, bool, error) {
	var (
		found Entry
		ok    bool
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescape(fields[4]) != path {
			continue
		}
		e := Entry{MountPoint: path}
		for i := 5; i < len(fields)-2; i++ {
			if fields[i] == "-" {
				e.FSType, e.Source = unescape(fields[i+1]), unescape(fields[i+2])
				break
			}
		}
		found, ok = e, true
	}
	return found, ok, sc.Err()
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
