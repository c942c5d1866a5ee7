// Package replicaset is the write side of a data partition's replica set
// (Ceph §5, CFS §2.2): which replicas form the write chain, which one heads
// it, whether the partition takes writes, and how a node going down, coming
// back and catching up change that. It is pure logic on pb.Partition: the
// master's map applies it (pkg/clustermap), the data nodes and clients read
// it, so every party that holds the same map epoch computes the same chain.
//
// Three rules make writes with a replica down safe:
//
//   - The chain is the replicas whose node is not down, in replicas' order.
//     A write is acknowledged when every chain member holds it durably, and
//     the chain takes writes only while it has at least Quorum members: an
//     acknowledged write is on a majority of the replicas.
//   - A replica that was down while the partition took writes is stale: it
//     may lack acknowledged bytes. It follows in the chain (and catches up by
//     alignment) but never heads it, because the head is the source every
//     follower aligns from (followers delete what the head lacks). It stops
//     being stale only when it reports a full alignment at the partition's
//     current epoch (InSync).
//   - The head is the first chain member; the master keeps replicas ordered
//     fresh-alive, stale-alive, down (stable otherwise), so a head that goes
//     down is replaced by a fresh replica, and one that comes back returns as
//     a follower. With no fresh replica alive the partition takes no writes
//     until one returns: it holds the acknowledged bytes.
package replicaset

import (
	"slices"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Quorum is the number of replicas of an n-replica partition that must hold
// a write: n - n/2 (2 of 3, 1 of 1 or 2).
func Quorum(n int) int { return n - n/2 }

// Chain returns p's write chain: its replicas that are not down, in order.
// The result is a new slice.
func Chain(p *pb.Partition) []uint64 {
	out := make([]uint64, 0, len(p.GetReplicas()))
	for _, r := range p.GetReplicas() {
		if !slices.Contains(p.GetDown(), r) {
			out = append(out, r)
		}
	}
	return out
}

// Head returns the replica that heads p's chain and may lead it (not
// stale), or 0 when there is none: then no replica is a source for the
// others and the partition takes no writes.
func Head(p *pb.Partition) uint64 {
	for _, r := range p.GetReplicas() {
		if slices.Contains(p.GetDown(), r) {
			continue
		}
		if slices.Contains(p.GetStale(), r) {
			return 0
		}
		return r
	}
	return 0
}

// Writable reports whether p's chain takes writes: a head that is not
// stale and at least Quorum members.
func Writable(p *pb.Partition) bool {
	return Head(p) != 0 && len(Chain(p)) >= Quorum(len(p.GetReplicas()))
}

// NodeDown takes node out of p's chain. It reports whether p changed; the
// caller then stamps p.Epoch.
func NodeDown(p *pb.Partition, node uint64) bool {
	if !slices.Contains(p.Replicas, node) || slices.Contains(p.Down, node) {
		return false
	}
	p.Down = append(p.Down, node)
	Normalize(p)
	return true
}

// NodeUp puts node back into p's chain (as a follower when stale). It
// reports whether p changed.
func NodeUp(p *pb.Partition, node uint64) bool {
	i := slices.Index(p.Down, node)
	if i < 0 {
		return false
	}
	p.Down = slices.Delete(p.Down, i, i+1)
	Normalize(p)
	return true
}

// InSync clears node's stale mark after it aligned fully with the head at
// partition epoch epoch. It reports whether p changed: not when node is not
// stale, is down, or p changed since epoch (the alignment may predate a
// change of the head or of the chain).
func InSync(p *pb.Partition, node, epoch uint64) bool {
	i := slices.Index(p.Stale, node)
	if i < 0 || epoch != p.Epoch || slices.Contains(p.Down, node) {
		return false
	}
	p.Stale = slices.Delete(p.Stale, i, i+1)
	Normalize(p)
	return true
}

// Normalize restores p's invariants after a change of its replicas, down
// or stale lists: replicas ordered fresh-alive, stale-alive, down (stable
// within each group), and, when the partition takes writes, every down
// replica marked stale (it misses them). NodeDown, NodeUp and InSync call
// it; a caller that edits the lists itself (a replica move) must too.
func Normalize(p *pb.Partition) {
	slices.SortStableFunc(p.Replicas, func(a, b uint64) int { return rank(p, a) - rank(p, b) })
	if Writable(p) {
		for _, r := range p.Replicas {
			if slices.Contains(p.Down, r) && !slices.Contains(p.Stale, r) {
				p.Stale = append(p.Stale, r)
			}
		}
	}
	// Keep the lists in replicas' order so that equal sets encode equally.
	order := func(a, b uint64) int { return slices.Index(p.Replicas, a) - slices.Index(p.Replicas, b) }
	slices.SortFunc(p.Down, order)
	slices.SortFunc(p.Stale, order)
}

// rank orders replica r of p: 0 fresh and alive, 1 stale and alive, 2 down.
func rank(p *pb.Partition, r uint64) int {
	switch {
	case slices.Contains(p.Down, r):
		return 2
	case slices.Contains(p.Stale, r):
		return 1
	}
	return 0
}
