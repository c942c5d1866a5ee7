package master

import (
	"context"
	"fmt"
	"syscall"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// metaOps is partitionOps over the meta nodes' gRPC service: each call goes to
// the partition's Raft leader (metaclient follows redirects), and a non-zero
// errno in a reply is an error.
type metaOps struct{ mc *metaclient.Client }

func errnoError(what string, p *pb.Partition, errno int32, msg string) error {
	if msg == "" {
		msg = syscall.Errno(errno).Error()
	}
	return fmt.Errorf("meta partition %d: %s: errno %d: %s", p.Id, what, errno, msg)
}

func (o metaOps) txn(ctx context.Context, p *pb.Partition, what string, op *metapb.Op) error {
	res, err := o.mc.Txn(ctx, p, &metapb.Txn{Ops: []*metapb.Op{op}})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if res.GetErrno() != 0 {
		return errnoError(what, p, res.Errno, res.Message)
	}
	return nil
}

func (o metaOps) SetRouting(ctx context.Context, p *pb.Partition, r *metapb.SetRouting) error {
	return o.txn(ctx, p, "set routing", &metapb.Op{Op: &metapb.Op_SetRouting{SetRouting: r}})
}

func (o metaOps) Import(ctx context.Context, p *pb.Partition, dentries []*metapb.Dentry) error {
	return o.txn(ctx, p, "import dentries", &metapb.Op{Op: &metapb.Op_ImportDentries{ImportDentries: &metapb.ImportDentries{Dentries: dentries}}})
}

func (o metaOps) Purge(ctx context.Context, p *pb.Partition, keys []*metapb.DentryKey) error {
	return o.txn(ctx, p, "purge dentries", &metapb.Op{Op: &metapb.Op_PurgeDentries{PurgeDentries: &metapb.PurgeDentries{Keys: keys}}})
}

func (o metaOps) SetRange(ctx context.Context, p *pb.Partition, end uint64) error {
	return o.txn(ctx, p, "set range", &metapb.Op{Op: &metapb.Op_SetRange{SetRange: &metapb.SetRange{End: end}}})
}

func (o metaOps) ScanNotOwned(ctx context.Context, p *pb.Partition, afterParent uint64, afterName []byte, limit uint32) ([]*metapb.Dentry, bool, error) {
	resp, err := o.mc.Scan(ctx, p, &metapb.ScanRequest{
		Kind: metapb.ScanKind_SCAN_KIND_DENTRIES, AfterParent: afterParent, AfterName: afterName,
		Limit: limit, NotOwned: true,
	})
	if err != nil {
		return nil, false, fmt.Errorf("scan: %w", err)
	}
	return resp.Dentries, resp.More, nil
}

func (o metaOps) Stats(ctx context.Context, p *pb.Partition, topNames uint32, countNames [][]byte) (*metapb.PartitionStatsResponse, error) {
	resp, err := o.mc.Stats(ctx, p, topNames, countNames...)
	if err != nil {
		return nil, fmt.Errorf("partition stats: %w", err)
	}
	return resp, nil
}
