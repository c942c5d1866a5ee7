package fusefs

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
)

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.EntryTimeout != time.Second || o.AttrTimeout != time.Second {
		t.Fatalf("defaults: %+v", o)
	}
	o = Options{EntryTimeout: -1, AttrTimeout: 5 * time.Second}.withDefaults()
	if o.EntryTimeout != 0 || o.AttrTimeout != 5*time.Second {
		t.Fatalf("explicit: %+v", o)
	}
}

func TestStatusMapping(t *testing.T) {
	cases := []struct {
		err  error
		want fuse.Status
	}{
		{nil, fuse.OK},
		{&client.Error{Op: "mkdir", Errno: syscall.EEXIST}, fuse.Status(syscall.EEXIST)},
		{&client.Error{Op: "write", Errno: syscall.ENOSPC}, fuse.Status(syscall.ENOSPC)},
		{context.DeadlineExceeded, fuse.Status(syscall.ETIMEDOUT)},
		{errors.New("boom"), fuse.EIO},
	}
	for _, c := range cases {
		if got := status(c.err); got != c.want {
			t.Errorf("status(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestFuseTime(t *testing.T) {
	if s, ns := toFuseTime(time.Time{}); s != 0 || ns != 0 {
		t.Fatalf("zero time: %d.%d", s, ns)
	}
	if s, ns := toFuseTime(time.Unix(12, 34)); s != 12 || ns != 34 {
		t.Fatalf("12.34: %d.%d", s, ns)
	}
}

func TestParseGroups(t *testing.T) {
	status := "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGroups:\t3000 4000 \nNgid:\t0\n"
	if got := parseGroups([]byte(status)); !slices.Equal(got, []uint32{3000, 4000}) {
		t.Errorf("groups %v", got)
	}
	if got := parseGroups([]byte("Groups:\t\n")); len(got) != 0 {
		t.Errorf("no groups: %v", got)
	}
	if got := parseGroups([]byte("Name:\tx\n")); got != nil {
		t.Errorf("no Groups line: %v", got)
	}
}
