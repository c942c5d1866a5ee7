package mountinfo

import (
	"strings"
	"testing"
)

const sample = `22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw
98 29 0:52 / /mnt/my\040data rw,nosuid,nodev,relatime shared:51 - fuse.cairn cairn:photos rw,user_id=0,group_id=0
99 29 0:53 / /mnt/x rw - fuse.cairn cairn:a rw
100 99 0:54 / /mnt/x rw - fuse.cairn cairn:b rw
`

func TestLookup(t *testing.T) {
	tests := []struct {
		path   string
		want   Entry
		wantOK bool
	}{
		{"/mnt/my data", Entry{"/mnt/my data", "fuse.cairn", "cairn:photos", "rw,nosuid,nodev,relatime"}, true},
		{"/mnt/x", Entry{"/mnt/x", "fuse.cairn", "cairn:b", "rw"}, true}, // the top of a stack
		{"/proc", Entry{"/proc", "proc", "proc", "rw,nosuid"}, true},
		{"/mnt", Entry{}, false},
		{"/mnt/my\\040data", Entry{}, false},
	}
	for _, tt := range tests {
		got, ok, err := lookup(strings.NewReader(sample), tt.path)
		if err != nil || ok != tt.wantOK || got != tt.want {
			t.Errorf("lookup(%q) = %+v, %v, %v; want %+v, %v", tt.path, got, ok, err, tt.want, tt.wantOK)
		}
	}
}

func TestContaining(t *testing.T) {
	root := "20 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	tests := []struct {
		path, want string
	}{
		{"/mnt/x/a/b", "/mnt/x"},
		{"/mnt/x", "/mnt/x"},
		{"/mnt/xy", "/"},
		{"/mnt/my data/f", "/mnt/my data"},
		{"/home", "/"},
	}
	for _, tt := range tests {
		got, ok, err := containing(strings.NewReader(root+sample), tt.path)
		if err != nil || !ok || got.MountPoint != tt.want {
			t.Errorf("containing(%q) = %+v, %v, %v; want %s", tt.path, got, ok, err, tt.want)
		}
	}
}
