package metapartition

import (
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Directory quotas. A partition does not know which directories have
// quotas or where its inodes lie in the tree: the meta node's leader works
// that out before proposing and names, on each op that changes an inode's
// footprint, the quotas it counts toward (Op.quotas, Op.quotas_to). Apply
// charges the change of the footprint those ops make, in the same Txn as
// the change itself, so the counts survive crashes and replay exactly
// like the inodes: the sum of one quota's counts over all partitions is
// what the inodes it was charged for hold, whatever failed in between.
//
// An inode's footprint is one inode, plus its apparent size for a regular
// file or a symbolic link, from its creation until its eviction (an
// unlinked file still open still counts). A directory counts as one inode
// and no bytes.

// QuotaUse is what a partition's inodes add to one quota. Either figure
// may be negative on one partition (a file created here and grown by a
// rename's move of its charge elsewhere); the sums over a volume are not.
type QuotaUse struct {
	Bytes  int64
	Inodes int64
}

// MaxQuotasPerOp bounds Op.quotas and Op.quotas_to: how deeply quota
// directories may nest.
const MaxQuotasPerOp = 16

func (u QuotaUse) add(v QuotaUse, sign int64) QuotaUse {
	return QuotaUse{Bytes: u.Bytes + sign*v.Bytes, Inodes: u.Inodes + sign*v.Inodes}
}

// footprint is what inode in counts toward its quotas; nil (absent) counts
// nothing.
func footprint(in *inode) QuotaUse {
	if in == nil {
		return QuotaUse{}
	}
	u := QuotaUse{Inodes: 1}
	switch in.typ() {
	case metapb.FileType_FILE_TYPE_REGULAR, metapb.FileType_FILE_TYPE_SYMLINK:
		u.Bytes = int64(in.size)
	}
	return u
}

// ChargedIno returns the inode whose footprint op may change: the op's inode
// field (0: the Txn's created inode), or, for a CreateInode, the inode it
// creates (known after it applied). ok is false for ops that change no
// footprint, which may carry no quotas.
func ChargedIno(op *metapb.Op) (ino uint64, creates, ok bool) {
	switch o := op.GetOp().(type) {
	case *metapb.Op_CreateInode:
		return 0, true, true
	case *metapb.Op_Setattr:
		return o.Setattr.GetIno(), false, true
	case *metapb.Op_Link:
		return o.Link.GetIno(), false, true
	case *metapb.Op_Evict:
		return o.Evict.GetIno(), false, true
	case *metapb.Op_AppendExtents:
		return o.AppendExtents.GetIno(), false, true
	case *metapb.Op_SpliceChunks:
		return o.SpliceChunks.GetIno(), false, true
	}
	return 0, false, false
}

// quotaCharge is one pending change of one quota's count in a Txn.
type quotaCharge struct {
	id  uint64
	use QuotaUse
}

// chargeBefore validates op's quota lists and returns the inode whose
// footprint it charges and that footprint before the op. charged is false
// for an op with no quotas.
func (t *txn) chargeBefore(op *metapb.Op) (ino uint64, before QuotaUse, charged bool, err *opError) {
	qs, to := op.GetQuotas(), op.GetQuotasTo()
	if len(qs) == 0 && len(to) == 0 {
		return 0, QuotaUse{}, false, nil
	}
	raw, creates, ok := ChargedIno(op)
	if !ok {
		return 0, QuotaUse{}, false, fail(metapb.EINVAL, "quotas given for an op that changes no inode's footprint")
	}
	if len(qs) > MaxQuotasPerOp || len(to) > MaxQuotasPerOp {
		return 0, QuotaUse{}, false, fail(metapb.EINVAL, "%d and %d quotas, more than %d", len(qs), len(to), MaxQuotasPerOp)
	}
	for _, id := range append(qs[:len(qs):len(qs)], to...) {
		if id == 0 {
			return 0, QuotaUse{}, false, fail(metapb.EINVAL, "quota id 0")
		}
	}
	if creates {
		return 0, QuotaUse{}, true, nil
	}
	if raw == 0 {
		raw = t.created
	}
	if raw == 0 {
		return 0, QuotaUse{}, false, nil // the op itself fails on it
	}
	return raw, footprint(t.inode(raw)), true, nil
}

// chargeAfter records the charges of op, which applied with result r:
// the footprint before leaves op.quotas, the footprint after joins
// op.quotas_to (op.quotas unless quotas_move).
func (t *txn) chargeAfter(op *metapb.Op, ino uint64, before QuotaUse, r *metapb.OpResult) {
	if _, creates, _ := ChargedIno(op); creates {
		ino = r.GetInode().GetIno()
	}
	after := footprint(t.inode(ino))
	from, to := op.GetQuotas(), op.GetQuotas()
	if op.GetQuotasMove() || len(op.GetQuotasTo()) > 0 {
		to = op.GetQuotasTo()
	}
	for _, id := range from {
		t.charge(id, before, -1)
	}
	for _, id := range to {
		t.charge(id, after, +1)
	}
}

func (t *txn) charge(id uint64, u QuotaUse, sign int64) {
	if u == (QuotaUse{}) {
		return
	}
	for i := range t.quota {
		if t.quota[i].id == id {
			t.quota[i].use = t.quota[i].use.add(u, sign)
			return
		}
	}
	t.quota = append(t.quota, quotaCharge{id: id, use: QuotaUse{}.add(u, sign)})
}

// commitQuota applies the Txn's charges; a count back at zero is dropped.
func (t *txn) commitQuota() {
	for _, c := range t.quota {
		u, _ := t.p.quota.Get(c.id)
		if u = u.add(c.use, 1); u == (QuotaUse{}) {
			t.p.quota.Delete(c.id)
		} else {
			t.p.quota.Set(c.id, u)
		}
	}
}

// QuotaUse returns what the partition's inodes add to each quota, by id
// (quotas they add nothing to are absent).
func (p *Partition) QuotaUse() map[uint64]QuotaUse {
	out := make(map[uint64]QuotaUse, p.quota.Len())
	p.quota.Scan(func(id uint64, u QuotaUse) bool {
		out[id] = u
		return true
	})
	return out
}

// QuotaUseOf returns what the partition's inodes add to quota id.
func (p *Partition) QuotaUseOf(id uint64) QuotaUse {
	u, _ := p.quota.Get(id)
	return u
}

// Footprint is what inode ino counts toward its quotas (zero for an inode
// the partition does not hold), and whether it exists here.
func (p *Partition) Footprint(ino uint64) (QuotaUse, bool) {
	in := p.lookupInode(ino)
	return footprint(in), in != nil
}
