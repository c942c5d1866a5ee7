package metanode

import (
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// pathPlan is what one resolution under the partition's read lock decided:
// an answer, an entry to fetch first, or a Txn to propose (guarded by the
// namespace epoch the path was resolved under).
type pathPlan struct {
	resp  *metapb.PathResponse
	miss  *nsMiss
	txn   *metapb.Txn
	build func(res *metapb.TxnResult) *metapb.PathResponse
	// again, if set, says that a refused Txn is to be planned again
	// (the name changed between the plan and the apply).
	again func(res *metapb.TxnResult) bool
	// follow are the steps the Txn owes other partitions (followup.go).
	follow *followUp
	// layoutMiss is a parent homed elsewhere whose layout attribute a
	// create must read first (layout.go); defaultLayout says that the
	// Txn's new file takes the volume's default layout.
	layoutMiss    uint64
	defaultLayout bool
	// rmdir are an rmdir's fences on the other partitions, placed before
	// the Txn (rmdir.go).
	rmdir *rmdirFence
	// rename is a rename's new name on another partition, placed before
	// the Txn (rename.go).
	rename *renamePlace
	// dirLock is a directory rename's namespace locks, taken before the
	// rename's steps (rename.go).
	dirLock *renameLock
	// settle is a rename's new name on another partition, placed pending:
	// settled once the Txn applied, beside its other follow-ups.
	settle *settleStep
	// takeBack is a rename's answer (resp) that finds its old name gone,
	// to give once an earlier attempt's placement of the new name is taken
	// back (rename.go).
	takeBack *takeBack
}

// guardedPlan proposes ops as the request's Txn, held to the namespace
// epoch the path was just resolved under (ENSCHANGED makes Path resolve
// again); done builds the answer of a success, a refusal names the path
// and the resolved parent.
func guardedPlan(mp *metapartition.Partition, req *metapb.PathRequest, what string, parent uint64, ops []*metapb.Op, done func(*metapb.TxnResult) *metapb.PathResponse) pathPlan {
	plan := txnPlan(req, what, parent, ops, done)
	plan.txn.NsEpoch, plan.txn.NsGuard = mp.NsEpoch(), true
	return plan
}

// txnPlan proposes ops as the request's Txn, unguarded; done and the
// answer of a refusal are guardedPlan's.
func txnPlan(req *metapb.PathRequest, what string, parent uint64, ops []*metapb.Op, done func(*metapb.TxnResult) *metapb.PathResponse) pathPlan {
	txn := &metapb.Txn{Ops: ops, RequestId: req.RequestId}
	return pathPlan{txn: txn, build: func(res *metapb.TxnResult) *metapb.PathResponse {
		if res.Errno != 0 {
			r := pathErr(metapb.Errno(res.Errno), req.Path, "%s: %s", what, res.Message)
			r.Parent = parent
			return r
		}
		return done(res)
	}}
}
