package metapartition

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Support for the follow-ups a meta node runs on other partitions to finish
// a client's request (docs/design.md "Client metadata": the parent's
// TouchDir, the Link -1 and Evict of an unlinked inode homed elsewhere, the
// undo of a create under a removed parent).

// Answered returns the remembered result of the Txn with request id, if
// one succeeded recently (Txn.request_id): a retry of it is answered with
// this result and not applied again. A service that plans a request from
// the partition's state uses it to tell a retry of a step that succeeded
// from a new request (an unlink retried after its name is gone).
func (p *Partition) Answered(id uint64) (*metapb.TxnResult, bool) {
	if id == 0 {
		return nil, false
	}
	return p.requests.get(id)
}

// RefusesNames reports whether a fence (not a namespace lock) covers
// directory parent at time now (Unix ns): a CreateDentry under it fails
// with ENOENT (rmdir, or a rename over the directory, is checking that it
// is empty).
func (p *Partition) RefusesNames(parent uint64, now int64) bool {
	f, ok := p.fences.Get(parent)
	return ok && !f.expired(now) && f.token&lockBit == 0
}

// PendingNames returns up to limit names (sorted) that a rename placed
// pending (metapb.Dentry.pending) before time before (Unix ns, the
// partition's apply clock): the names whose rename should have settled or
// taken them back by then.
func (p *Partition) PendingNames(before int64, limit int) []*metapb.Dentry {
	var out []*metapb.Dentry
	for k := range p.pending {
		d, ok := p.dentries.Get(dentry{parent: k.parent, name: k.name})
		if ok && d.pend != nil && d.pend.GetSince() < before {
			out = append(out, d.toProto())
		}
	}
	slices.SortFunc(out, func(a, b *metapb.Dentry) int {
		if c := cmp.Compare(a.GetParent(), b.GetParent()); c != 0 {
			return c
		}
		return bytes.Compare(a.GetName(), b.GetName())
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
