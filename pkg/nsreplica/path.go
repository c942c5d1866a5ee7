package nsreplica

import (
	"strings"
	"syscall"
)

// MaxName and MaxPath are Linux's NAME_MAX and PATH_MAX. MaxPath counts the
// terminating NUL a C caller would pass, so a path string may have at most
// MaxPath-1 bytes; Split enforces both so that Cairn refuses exactly the paths
// a local file system refuses.
const (
	MaxName = 255
	MaxPath = 4096
)

// Split parses an absolute path inside a volume, such as "/a/b/c", into its
// components. It collapses repeated slashes, drops "." components and keeps
// ".." (which only resolution can interpret). The components are substrings
// of path.
//
// trailingSlash reports that the last component must be a directory, as Linux
// requires when the path ends in "/" or in a "." component ("/a/" and "/a/."
// both name a only if a is a directory). It is false when there are no
// components ("/", "//", "/."), since the root is a directory anyway.
//
// Errors: EINVAL for an empty path, a path not starting with "/" or a path
// containing a NUL byte; ENAMETOOLONG for a path longer than MaxPath-1 bytes
// or a component longer than MaxName bytes. EINVAL wins when both apply.
// On error comps is nil.
func Split(path string) (comps []string, trailingSlash bool, err syscall.Errno) {
	if path == "" || path[0] != '/' || strings.IndexByte(path, 0) >= 0 {
		return nil, false, syscall.EINVAL
	}
	if len(path) > MaxPath-1 {
		return nil, false, syscall.ENAMETOOLONG
	}
	// Most paths are short; counting slashes first would cost a second pass
	// for a single allocation saved, so append.
	lastWasDot := false
	rest := path
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch {
		case c == "":
			continue
		case len(c) > MaxName:
			return nil, false, syscall.ENAMETOOLONG
		case c == ".":
			lastWasDot = true
			continue
		}
		lastWasDot = false
		comps = append(comps, c)
	}
	trailingSlash = len(comps) > 0 && (path[len(path)-1] == '/' || lastWasDot)
	return comps, trailingSlash, 0
}
