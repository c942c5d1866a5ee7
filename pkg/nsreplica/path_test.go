package nsreplica

import (
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestSplit(t *testing.T) {
	name255 := strings.Repeat("x", MaxName)
	name256 := strings.Repeat("x", MaxName+1)
	// "/" + 2047 * "a/" is 4095 bytes: the longest path allowed.
	path4095 := "/" + strings.Repeat("a/", (MaxPath-2)/2)
	path4096 := path4095 + "b"

	tests := []struct {
		path     string
		comps    []string
		trailing bool
		err      syscall.Errno
	}{
		{"/", nil, false, 0},
		{"//", nil, false, 0},
		{"/.", nil, false, 0},
		{"/a", []string{"a"}, false, 0},
		{"/a/b/c", []string{"a", "b", "c"}, false, 0},
		{"//a//b/", []string{"a", "b"}, true, 0},
		{"/a/", []string{"a"}, true, 0},
		{"/./a/.", []string{"a"}, true, 0},
		{"/./a", []string{"a"}, false, 0},
		{"/a/./b", []string{"a", "b"}, false, 0},
		{"/a/.//", []string{"a"}, true, 0},
		{"/..", []string{".."}, false, 0},
		{"/a/../b/..", []string{"a", "..", "b", ".."}, false, 0},
		{"/..a/.b/...", []string{"..a", ".b", "..."}, false, 0},
		{"/" + name255, []string{name255}, false, 0},
		{"/" + name256, nil, false, syscall.ENAMETOOLONG},
		{"/a/" + name256 + "/b", nil, false, syscall.ENAMETOOLONG},
		{path4096, nil, false, syscall.ENAMETOOLONG},
		{"", nil, false, syscall.EINVAL},
		{"a/b", nil, false, syscall.EINVAL},
		{"./a", nil, false, syscall.EINVAL},
		{"/a\x00b", nil, false, syscall.EINVAL},
		{"/" + name256 + "\x00", nil, false, syscall.EINVAL},
	}
	for _, tt := range tests {
		name := tt.path
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		t.Run(name, func(t *testing.T) {
			comps, trailing, err := Split(tt.path)
			if err != tt.err || trailing != tt.trailing || !slices.Equal(comps, tt.comps) {
				t.Errorf("Split(%q) = %q, %v, %v; want %q, %v, %v",
					name, comps, trailing, err, tt.comps, tt.trailing, tt.err)
			}
		})
	}

	// The 4095-byte path is checked apart so that a failure does not print
	// 2047 components.
	if len(path4095) != MaxPath-1 || len(path4096) != MaxPath {
		t.Fatalf("test paths are %d and %d bytes", len(path4095), len(path4096))
	}
	comps, trailing, err := Split(path4095)
	if err != 0 || !trailing || len(comps) != (MaxPath-2)/2 {
		t.Errorf("Split(4095-byte path) = %d comps, %v, %v; want %d, true, 0", len(comps), trailing, err, (MaxPath-2)/2)
	}
}
