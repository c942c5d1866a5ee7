package metapb

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
	// FollowUpCtime sets the ctime of a renamed inode homed on another
	// partition than its old name's.
	FollowUpCtime = 4
	// FollowUpFenceToken names a request in the fence tokens of its
	// attempts (rmdir, a directory's rename; not a Txn's request id).
	FollowUpFenceToken = 5
	// FollowUpThen + i is the group of TxnRequest.then steps whose first
	// step has index i.
	FollowUpThen = 16
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
