// Package nsreplica is a meta partition's lazy replica of the directory
// namespace (FalconFS §4.3).
//
// Every meta partition leader keeps a Replica so it can resolve a full path
// locally, and check search permission along it, without asking the
// partitions that own the intermediate directories. The replica holds only
// directories, and of each only what resolution needs (Entry: inode, mode,
// owner, group). It is a cache: it starts empty, is filled on demand and may
// drop any entry at any time (Put evicts when full), because a miss only costs
// a fetch. Walk resolves as far as the replica allows and reports the first
// missing component; the caller fetches that entry from its owner, Puts it
// and walks again. Split turns a path string into the components Walk takes.
//
// Correctness rests on invalidation. An operation that changes what
// resolution would see of a directory (rmdir, directory rename, chmod or chown
// of a directory) first fences the directory's inode on every partition; when
// a partition's state machine applies the fence it calls Invalidate, which
// drops the entry, so the next resolution through that directory fetches it
// afresh from its owner.
//
// A fetch that was in flight when the fence was applied could still bring the
// old entry back. The generation rule closes that gap: the caller reads Gen
// before starting a fetch and hands that value to Put, and every Invalidate
// and Clear increases the generation, so Put refuses any entry whose lookup
// began before an invalidation. The rule is deliberately coarse (an
// invalidation of any inode refuses every Put in flight) because it needs no
// bookkeeping per lookup and invalidations are rare next to lookups; a refused
// entry is simply fetched again on the next miss.
//
// Clear, used after the state machine restores a snapshot, drops everything
// under the same rule, since the snapshot may skip fences the replica never
// saw.
//
// The package does no I/O; permission checks use package perm.
package nsreplica
