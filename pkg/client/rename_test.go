package client

import (
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// TestNewNameChanged: a rename's step on its new name that failed because
// the names are not what the lookups found starts the rename over (ESTALE);
// any other failure is the rename's answer.
func TestNewNameChanged(t *testing.T) {
	const dir, other = 5, 6
	reg := metapb.FileType_FILE_TYPE_REGULAR
	fail := func(e syscall.Errno) error { return &Error{Op: "rename", Errno: e} }
	for _, tc := range []struct {
		name string
		ops  []*metapb.Op
		op   int32 // the op that failed
		err  error
		want syscall.Errno
	}{
		{"the new name taken since", []*metapb.Op{opCreateDentry(dir, "b", 9, reg)}, 0, fail(syscall.EEXIST), syscall.ESTALE},
		{"the moved inode gone since", []*metapb.Op{opCreateDentry(dir, "b", 9, reg)}, 0, fail(syscall.ENOENT), syscall.ESTALE},
		{"a replaced name now another inode", []*metapb.Op{opReplaceDentry(dir, "b", 9, reg, 8)}, 0, fail(syscall.ESTALE), syscall.ESTALE},
		{"a replaced name gone", []*metapb.Op{opReplaceDentry(dir, "b", 9, reg, 8)}, 0, fail(syscall.ENOENT), syscall.ESTALE},
		{"an exchange's delete of a name gone", []*metapb.Op{opDeleteDentry(dir, "b", 8, 0), opCreateDentry(dir, "b", 9, reg)}, 0, fail(syscall.ENOENT), syscall.ESTALE},
		{"no space is the answer", []*metapb.Op{opCreateDentry(dir, "b", 9, reg)}, 0, fail(syscall.ENOSPC), syscall.ENOSPC},
		{"another name's step failed", []*metapb.Op{opCreateDentry(other, "b", 9, reg)}, 0, fail(syscall.ENOENT), syscall.ENOENT},
		{"an op out of range", []*metapb.Op{opCreateDentry(dir, "b", 9, reg)}, 3, fail(syscall.EEXIST), syscall.EEXIST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &metapb.TxnResult{Errno: int32(ErrnoOf(tc.err)), FailedOp: tc.op}
			got := newNameChanged("rename", tc.ops, res, tc.err, dir, "b")
			if e := ErrnoOf(got); e != tc.want {
				t.Fatalf("errno %v, want %v", e, tc.want)
			}
		})
	}
}
