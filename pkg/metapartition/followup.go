package metapartition

import "github.com/cairnfs/cairn/pkg/metapb"

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

// Steps of a client's request that a meta node runs as separate Txns, each
// with the request id FollowUpID(request_id, step), so that a retry of
// the client's request (same request id) never applies one twice.
const (
	// FollowUpLink is the Link -1 of an unlinked name's inode on its home.
	FollowUpLink = 1
	// FollowUpEvict is the Evict of that inode at 0 links.
	FollowUpEvict = 2
	// FollowUpUndo takes a create back when the parent's TouchDir found
	// the parent removed.
	FollowUpUndo = 3
)

// FollowUpID derives the request id of step of the request with id: a
// fixed, well-mixed function (SplitMix64's finaliser), never 0, so that
// every retry of the request derives the same ids and two requests'
// random ids derive unrelated ones.
func FollowUpID(id uint64, step uint64) uint64 {
	z := id + step*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1
	}
	return z
}
