package metapartition

import (
	"bytes"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"google.golang.org/protobuf/proto"
)

// The raft host drives a Partition directly. (Checked here rather than in
// the package, which stays free of the host and its storage dependencies.)
var _ multiraft.StateMachine = (*Partition)(nil)

// Shorthands for file types and op constructors, so that test tables read
// like the operations they apply.
const (
	reg  = metapb.FileType_FILE_TYPE_REGULAR
	dir  = metapb.FileType_FILE_TYPE_DIRECTORY
	lnk  = metapb.FileType_FILE_TYPE_SYMLINK
	fifo = metapb.FileType_FILE_TYPE_FIFO
	chr  = metapb.FileType_FILE_TYPE_CHAR_DEVICE
)

func createInode(t metapb.FileType, mode uint32) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: t, Mode: mode, Uid: 1000, Gid: 100}}}
}

func createSymlink(target string) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: lnk, Mode: 0o777, Target: []byte(target)}}}
}

func createDentry(parent uint64, name string, ino uint64, t metapb.FileType) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: parent, Name: []byte(name), Ino: ino, Type: t}}}
}

func deleteDentry(parent uint64, name string, expectIno uint64, expectType metapb.FileType) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: parent, Name: []byte(name), ExpectIno: expectIno, ExpectType: expectType}}}
}

func replaceDentry(parent uint64, name string, ino uint64, t metapb.FileType, expectIno uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{Parent: parent, Name: []byte(name), Ino: ino, Type: t, ExpectIno: expectIno}}}
}

func setattr(m *metapb.Setattr) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Setattr{Setattr: m}}
}

func truncate(ino, size uint64) *metapb.Op {
	return setattr(&metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_SIZE), Size: size})
}

func link(ino uint64, delta int32) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: delta}}}
}

func touchDir(ino uint64, delta int32, opID uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: ino, NlinkDelta: delta, OpId: opID}}}
}

func evict(ino uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: ino}}}
}

func setXattr(ino uint64, name, value string, flags uint32) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_SetXattr{SetXattr: &metapb.SetXattr{Ino: ino, Name: name, Value: []byte(value), Flags: flags}}}
}

func removeXattr(ino uint64, name string) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_RemoveXattr{RemoveXattr: &metapb.RemoveXattr{Ino: ino, Name: name}}}
}

// ek is an extent key: file bytes [off, off+size) at extOff of extent eid in
// data partition 7.
func ek(off, eid, extOff, size uint64) *metapb.ExtentKey {
	return &metapb.ExtentKey{FileOffset: off, PartitionId: 7, ExtentId: eid, ExtentOffset: extOff, Size: size}
}

func appendExtents(ino, size uint64, keys ...*metapb.ExtentKey) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: ino, Size: size, Extents: keys}}}
}

func fence(parent, token uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: parent, Token: token}}}
}

func unfence(parent, token uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: parent, Token: token}}}
}

func setRange(end uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_SetRange{SetRange: &metapb.SetRange{End: end}}}
}

func tx(ops ...*metapb.Op) *metapb.Txn { return &metapb.Txn{Ops: ops} }

// applyBatch marshals b and applies it through Apply, as the raft host
// does, so that every test also exercises the decode path.
func applyBatch(t testing.TB, p *Partition, index uint64, b *metapb.Batch) []*metapb.TxnResult {
	t.Helper()
	data, err := proto.Marshal(b)
	if err != nil {
		t.Fatalf("marshal batch: %v", err)
	}
	res, err := p.Apply(index, data)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	rs, ok := res.([]*metapb.TxnResult)
	if !ok || len(rs) != len(b.Txns) {
		t.Fatalf("Apply returned %T with %d results for %d txns", res, len(rs), len(b.Txns))
	}
	return rs
}

// run applies one Txn at time now and returns its result.
func run(t testing.TB, p *Partition, now int64, ops ...*metapb.Op) *metapb.TxnResult {
	t.Helper()
	return applyBatch(t, p, uint64(now), &metapb.Batch{NowNs: now, Txns: []*metapb.Txn{tx(ops...)}})[0]
}

// mustRun applies one Txn and fails the test unless it succeeds.
func mustRun(t testing.TB, p *Partition, now int64, ops ...*metapb.Op) *metapb.TxnResult {
	t.Helper()
	r := run(t, p, now, ops...)
	if r.Errno != 0 {
		t.Fatalf("txn failed: %s (errno %d, op %d)", r.Message, r.Errno, r.FailedOp)
	}
	return r
}

// newRoot returns a partition with range [1, open) holding the root
// directory, inode 1, created at time 1.
func newRoot(t testing.TB) *Partition {
	t.Helper()
	p, err := New(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, p, 1, createInode(dir, 0o755))
	return p
}

func snap(t testing.TB, p *Partition) []byte {
	t.Helper()
	b, err := p.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return b
}

func mustInode(t testing.TB, p *Partition, ino uint64) *metapb.Inode {
	t.Helper()
	in, e := p.GetInode(ino)
	if e != metapb.OK {
		t.Fatalf("GetInode(%d): %v", ino, e)
	}
	return in
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }
