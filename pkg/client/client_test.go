package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

func TestErrnoOf(t *testing.T) {
	e := errnoErr("mkdir", syscall.EEXIST, "1/%q", "a")
	wrapped := fmt.Errorf("outer: %w", e)
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{e, syscall.EEXIST},
		{wrapped, syscall.EEXIST},
		{syscall.ENOENT, syscall.ENOENT},
		{context.DeadlineExceeded, syscall.ETIMEDOUT},
		{&redirect.NoLeaderError{}, syscall.ETIMEDOUT},
		{context.Canceled, syscall.EINTR},
		{errors.New("boom"), syscall.EIO},
		{transportErr("lookup", context.DeadlineExceeded), syscall.ETIMEDOUT},
	}
	for _, c := range cases {
		if got := ErrnoOf(c.err); got != c.want {
			t.Errorf("ErrnoOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !errors.Is(wrapped, syscall.EEXIST) || errors.Is(wrapped, syscall.ENOENT) {
		t.Error("errors.Is does not see the errno")
	}
	cause := errors.New("cause")
	te := &Error{Op: "x", Errno: syscall.EIO, Err: cause}
	if !errors.Is(te, cause) || !errors.Is(te, syscall.EIO) {
		t.Error("errors.Is does not see the cause and the errno")
	}
	if s := e.Error(); !strings.Contains(s, "mkdir") || !strings.Contains(s, "file exists") {
		t.Errorf("message %q lacks the op or the errno", s)
	}
}

func TestCheckName(t *testing.T) {
	for name, want := range map[string]syscall.Errno{
		"ok": 0, "": syscall.EINVAL, ".": syscall.EINVAL, "..": syscall.EINVAL, "a/b": syscall.EINVAL,
		"a\x00": syscall.EINVAL, strings.Repeat("x", 255): 0, strings.Repeat("x", 256): syscall.ENAMETOOLONG,
	} {
		if got := ErrnoOf(checkName("t", name)); got != want {
			t.Errorf("checkName(%.10q) = %v, want %v", name, got, want)
		}
	}
}

func testMap() *pb.ClusterMap {
	return &pb.ClusterMap{
		Epoch: 9,
		Nodes: map[uint64]*pb.Node{1: {Id: 1, Addr: "n1:1"}},
		Volumes: map[uint64]*pb.Volume{4: {
			Id: 4, Name: "v", MetaPartitions: []uint64{10, 11, 12},
			SlotOwners: []uint64{10, 10, 11, 11, 12, 12}, RoutingVersion: 1,
		}},
		Partitions: map[uint64]*pb.Partition{
			10: {Id: 10, InodeStart: 1, InodeEnd: 1000},
			11: {Id: 11, InodeStart: 1001, InodeEnd: 2000},
			12: {Id: 12, InodeStart: 2001},
		},
	}
}

func TestViewRouting(t *testing.T) {
	w, err := newView(testMap(), "v")
	if err != nil {
		t.Fatal(err)
	}
	for ino, want := range map[uint64]uint64{1: 10, 1000: 10, 1001: 11, 2000: 11, 2001: 12, 1 << 60: 12} {
		p, err := w.home(ino)
		if err != nil || p.GetId() != want {
			t.Errorf("home(%d) = %v %v, want %d", ino, p, err, want)
		}
	}
	if _, err := w.home(0); ErrnoOf(err) != syscall.ENOENT {
		t.Errorf("home(0) = %v", err)
	}
	seen := map[uint64]bool{}
	for i := range 100 {
		p, err := w.route(1, fmt.Sprint("name", i))
		if err != nil {
			t.Fatal(err)
		}
		seen[p.GetId()] = true
	}
	if len(seen) != 3 {
		t.Errorf("100 names reached partitions %v, want all 3", seen)
	}
	if got := len(w.all()); got != 3 {
		t.Errorf("all() has %d partitions", got)
	}
	if _, err := newView(testMap(), "nope"); ErrnoOf(err) != syscall.ENOENT {
		t.Errorf("missing volume: %v", err)
	}
	bad := testMap()
	bad.Volumes[4].SlotOwners = []uint64{10, 99}
	if _, err := newView(bad, "v"); err == nil {
		t.Error("a slot owner outside the volume was accepted")
	}
	gap := testMap()
	gap.Partitions[12].InodeStart = 3001
	w, _ = newView(gap, "v")
	if _, err := w.home(2500); ErrnoOf(err) != syscall.ENOENT {
		t.Errorf("inode in a range gap: %v", err)
	}
}

func TestTypeBits(t *testing.T) {
	for ft := metapb.FileType_FILE_TYPE_REGULAR; ft <= metapb.FileType_FILE_TYPE_BLOCK_DEVICE; ft++ {
		back, ok := fileType(ft.ModeBits() | 0o644)
		if !ok || back != ft {
			t.Errorf("%v -> %#o -> %v", ft, ft.ModeBits(), back)
		}
	}
	if ft, ok := fileType(0o644); !ok || ft != metapb.FileType_FILE_TYPE_REGULAR {
		t.Error("mode without type bits is not a regular file")
	}
	a := toAttr(&metapb.Inode{Ino: 5, Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: 0o755, Parent: 1})
	if !a.IsDir() || a.Mode != syscall.S_IFDIR|0o755 || a.Parent != 1 {
		t.Errorf("toAttr = %+v", a)
	}
}

func TestXattrNamespace(t *testing.T) {
	for name, want := range map[string]syscall.Errno{
		"user.a": 0, "trusted.x": 0, "security.selinux": 0, "system.posix_acl_access": 0,
		"user.": syscall.EINVAL, "other.a": syscall.EOPNOTSUPP, "": syscall.ERANGE,
	} {
		if got := ErrnoOf(checkXattrNamespace("t", name)); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}
