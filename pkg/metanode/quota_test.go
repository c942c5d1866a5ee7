package metanode

import (
	"context"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// TestQuotaEnforcement drives quota charges and EDQUOT through the
// service on a real three-replica partition: quotas a client names are
// replaced by the leader's, a file below a subdirectory counts toward the
// quota above, the inode and byte limits refuse what would pass them, and
// every replica applies the same counts.
func TestQuotaEnforcement(t *testing.T) {
	c := newTestCluster(t, Options{})
	c.leader(t)
	pool := redirect.NewPool(nil, nil)
	defer pool.Close()
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitRoot(t, ctx, mc, c.part)

	txn := func(ops ...*metapb.Op) *metapb.TxnResult {
		t.Helper()
		res, err := mc.Txn(ctx, c.part, &metapb.Txn{Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	create := func(parent uint64, name string, typ metapb.FileType) (uint64, metapb.Errno) {
		t.Helper()
		res := txn(
			&metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: typ, Mode: 0o755, Parent: parent}},
				Quotas: []uint64{99}}, // a client's claim: replaced
			&metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: parent, Name: []byte(name), Type: typ}}})
		if res.Errno != 0 {
			return 0, metapb.Errno(res.Errno)
		}
		return res.Results[0].Inode.Ino, metapb.OK
	}
	dir, e := create(RootIno, "q", metapb.FileType_FILE_TYPE_DIRECTORY)
	if e != metapb.OK {
		t.Fatalf("mkdir: %v", e)
	}
	quota := &pb.QuotaState{VolumeId: c.part.VolumeId, Quota: &pb.Quota{Id: 5, Ino: dir, Path: "/q", MaxInodes: 3, MaxBytes: 1000}}
	for _, h := range c.hosts {
		h.SetQuotas([]*pb.QuotaState{quota})
	}
	sub, e := create(dir, "sub", metapb.FileType_FILE_TYPE_DIRECTORY)
	if e != metapb.OK {
		t.Fatalf("mkdir below the quota: %v", e)
	}
	f, e := create(sub, "f", metapb.FileType_FILE_TYPE_REGULAR)
	if e != metapb.OK {
		t.Fatalf("create below the quota: %v", e)
	}
	if _, e := create(dir, "g", metapb.FileType_FILE_TYPE_REGULAR); e != metapb.OK {
		t.Fatalf("third inode: %v", e)
	}
	if _, e := create(sub, "h", metapb.FileType_FILE_TYPE_REGULAR); e != metapb.EDQUOT {
		t.Fatalf("fourth inode under a limit of 3: %v, want EDQUOT", e)
	}
	if _, e := create(RootIno, "outside", metapb.FileType_FILE_TYPE_REGULAR); e != metapb.OK {
		t.Fatalf("create outside the quota: %v", e)
	}

	grow := func(size uint64) metapb.Errno {
		t.Helper()
		return metapb.Errno(txn(&metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: f, Size: size,
			Extents: []*metapb.ExtentKey{{FileOffset: 0, PartitionId: 7, ExtentId: 1, Size: size}}}}}).Errno)
	}
	if e := grow(800); e != metapb.OK {
		t.Fatalf("grow to 800 of 1000 bytes: %v", e)
	}
	if e := grow(1100); e != metapb.EDQUOT {
		t.Fatalf("grow to 1100 of 1000 bytes: %v, want EDQUOT", e)
	}
	shrink := txn(&metapb.Op{Op: &metapb.Op_Setattr{Setattr: &metapb.Setattr{Ino: f, Valid: uint32(metapb.SetattrValid_SETATTR_SIZE), Size: 100}}})
	if shrink.Errno != 0 {
		t.Fatalf("truncate down: %v", metapb.Errno(shrink.Errno))
	}

	want := metapartition.QuotaUse{Bytes: 100, Inodes: 3}
	for _, h := range c.hosts {
		deadline := time.Now().Add(5 * time.Second)
		for {
			var got, bogus metapartition.QuotaUse
			p := h.partition(c.part.Id)
			if p == nil {
				t.Fatalf("node %d does not host partition %d", h.env.NodeID, c.part.Id)
			}
			p.sm.read(func(mp *metapartition.Partition) { got, bogus = mp.QuotaUseOf(5), mp.QuotaUseOf(99) })
			if bogus != (metapartition.QuotaUse{}) {
				t.Fatalf("node %d charged the client's quota 99: %+v", h.env.NodeID, bogus)
			}
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d counts %+v for quota 5, want %+v", h.env.NodeID, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
