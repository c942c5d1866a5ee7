package metanode

import (
	"bytes"
	"context"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// giveGrantKey gives h a grant key, as a heartbeat does, and returns a
// token of the ranges for mode, signed with it for clientCtx's
// certificate (serial 42) in volume 1.
func giveGrantKey(t *testing.T, h *Host, mode grant.Mode, ranges ...grant.Range) [][]byte {
	t.Helper()
	kr := &grant.Keyring{}
	kr.Set([]grant.Key{{ID: 1, Secret: bytes.Repeat([]byte{7}, grant.SecretLen), CreatedMs: time.Now().Add(-time.Hour).UnixMilli()}})
	h.env.Grants = kr
	toks, err := kr.Sign(grant.Grant{Holder: "2a", Volume: 1, Mode: mode, Ranges: ranges}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// TestWrittenChecked: a client certificate records extent keys and chunk
// registrations only of ranges a write token of its own covers, splices
// chunks only of ranges any of its tokens covers; a token of another
// certificate, of another volume, a forged or a read one does not count;
// nodes are not asked; answers carry grants of what they return, chunks
// read only.
func TestWrittenChecked(t *testing.T) {
	dm := newDataMap()
	part := &pb.Partition{Id: 1, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1}
	c := newTestClusterOf(t, Options{CollectInterval: -1, ClusterMap: dm.read}, part)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.leader(t)
	svc := granting{&service{h: leader}}
	cctx := clientCtx(ctx)
	write := giveGrantKey(t, leader, grant.Write, grant.Range{Partition: 10, Extent: 1, Lo: 0, Hi: 1 << 20})
	kr := leader.env.Grants
	sign := func(holder string, vol uint64, m grant.Mode, r grant.Range) [][]byte {
		toks, err := kr.Sign(grant.Grant{Holder: holder, Volume: vol, Mode: m, Ranges: []grant.Range{r}}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return toks
	}
	other := grant.Range{Partition: 10, Extent: 2, Lo: 0, Hi: 4096}
	read := sign("2a", 1, grant.Read, other)
	forged := func() [][]byte {
		var f grant.Keyring
		f.Set([]grant.Key{{ID: 1, Secret: bytes.Repeat([]byte{8}, grant.SecretLen)}})
		toks, _ := f.Sign(grant.Grant{Holder: "2a", Volume: 1, Mode: grant.Write, Ranges: []grant.Range{other}}, time.Hour, time.Now())
		return toks
	}()
	for {
		r, err := svc.GetInode(ctx, &metapb.GetInodeRequest{PartitionId: 1, Ino: RootIno})
		if err == nil && r.Errno == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	txn := func(ctx context.Context, receipts [][]byte, ops ...*metapb.Op) *metapb.TxnResponse {
		t.Helper()
		resp, err := svc.Txn(ctx, &metapb.TxnRequest{PartitionId: 1, Txn: &metapb.Txn{Ops: ops}, Receipts: receipts})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	res := txn(cctx, nil, createTxn(RootIno, "f").Ops...).Result
	if res.Errno != 0 {
		t.Fatalf("create: %v", res)
	}
	f := res.Results[0].Inode.Ino
	appendAt := func(ext, off, size uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: f, Size: size,
			Extents: []*metapb.ExtentKey{{PartitionId: 10, ExtentId: ext, ExtentOffset: off, Size: size}}}}}
	}
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		receipts [][]byte
		op       *metapb.Op
		want     metapb.Errno
	}{
		{"a key inside its receipt", cctx, write, appendAt(1, 4096, 4096), metapb.OK},
		{"a key past its receipt", cctx, write, appendAt(1, 1<<20, 4096), metapb.EACCES},
		{"a key of an extent it did not write", cctx, write, appendAt(2, 0, 4096), metapb.EACCES},
		{"no receipt", cctx, nil, appendAt(1, 0, 4096), metapb.EACCES},
		{"a read grant", cctx, read, appendAt(2, 0, 4096), metapb.EACCES},
		{"a forged receipt", cctx, forged, appendAt(2, 0, 4096), metapb.EACCES},
		{"another certificate's receipt", cctx, sign("2b", 1, grant.Write, other), appendAt(2, 0, 4096), metapb.EACCES},
		{"a receipt of another volume", cctx, sign("2a", 2, grant.Write, other), appendAt(2, 0, 4096), metapb.EACCES},
		{"a node needs none", ctx, nil, appendAt(2, 0, 4096), metapb.OK},
	} {
		if got := metapb.Errno(txn(tc.ctx, tc.receipts, tc.op).Result.Errno); got != tc.want {
			t.Errorf("%s: errno %v, want %v", tc.name, got, tc.want)
		}
	}
	// The answer to the client carries a grant of the file's keys, for
	// writing; one to a node none.
	resp, err := svc.GetInode(cctx, &metapb.GetInodeRequest{PartitionId: 1, Ino: f})
	if err != nil || resp.Errno != 0 || len(resp.Grants) != 1 {
		t.Fatalf("get inode as a client: %v, %d grants", err, len(resp.GetGrants()))
	}
	g, err := kr.Verify(resp.Grants[0], "2a", time.Now())
	if err != nil || g.Ino != f || g.Mode != grant.Write || len(g.Ranges) == 0 {
		t.Fatalf("the grant: %+v, %v", g, err)
	}
	if resp, _ := svc.GetInode(ctx, &metapb.GetInodeRequest{PartitionId: 1, Ino: f}); len(resp.GetGrants()) != 0 {
		t.Fatalf("a node's answer carries %d grants", len(resp.Grants))
	}
	// A chunk index answer grants the chunks it names, read only.
	ino := &metapb.Inode{Ino: 9, Chunks: []*metapb.Chunk{{PartitionId: 10, ExtentId: 3, Size: 100}}}
	for _, tok := range svc.grants(cctx, 1, true, ino) {
		if g, err := kr.Verify(tok, "2a", time.Now()); err != nil || g.Mode != grant.Read {
			t.Fatalf("a chunk's grant: %+v, %v; want read only", g, err)
		}
	}
}
