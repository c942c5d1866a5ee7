package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrNotEnoughNodes is wrapped by the errors of Choose and ChooseWeighted
// when fewer than n candidates have a positive weight.
var ErrNotEnoughNodes = errors.New("not enough eligible nodes")

// ErrDuplicateID is wrapped by the errors of Choose and ChooseWeighted when
// two candidates share an id, eligible or not. Such a list is a bug in the
// caller's view of the cluster, and no placement computed from it is
// trustworthy.
var ErrDuplicateID = errors.New("duplicate node id")

// ErrInvalidReplicaCount is wrapped by the errors of Choose and
// ChooseWeighted when n ≤ 0.
var ErrInvalidReplicaCount = errors.New("replica count must be positive")

// Candidate is a node that may receive a replica, as reported to the master.
type Candidate struct {
	ID            uint64  // node id, unique
	Zone          string  // failure domain label; "" means no zone
	CapacityBytes uint64  // total space for partitions
	UsedBytes     uint64  // space in use
	MemUtil       float64 // 0..1 memory utilization (matters for meta nodes)
	Partitions    int     // partitions already hosted
}

// WeightedNode is a node with an explicit straw2 weight, for callers (and
// tests and benchmarks) that compute weights themselves. Only the ratios of
// weights matter. A weight below about 1e-280 makes the node's draw
// overflow to -Inf: it is then chosen only after every ordinary node, and
// among such nodes by lower id.
type WeightedNode struct {
	ID     uint64  // node id, unique
	Zone   string  // failure domain label; "" means a domain of its own
	Weight float64 // relative share; ≤ 0, NaN and ±Inf mean ineligible
}

// Choose picks n distinct nodes for the object identified by key (usually
// a partition id), weighting each candidate by Weight. It is
// ChooseWeighted applied to the candidates' weights and makes the same
// guarantees.
func Choose(key uint64, cands []Candidate, n int) ([]uint64, error) {
	nodes := make([]WeightedNode, len(cands))
	for i, c := range cands {
		nodes[i] = WeightedNode{ID: c.ID, Zone: c.Zone, Weight: Weight(c)}
	}
	return ChooseWeighted(key, nodes, n)
}

// ChooseWeighted picks n distinct node ids for key by straw2 over the
// nodes' weights, best first. It guarantees:
//
//   - Deterministic: the result depends only on key, n and the set of
//     nodes, not on their order in the slice, the process or the platform.
//   - Only nodes with a finite positive weight are chosen, never one twice.
//   - The first id is node i with probability Weight_i / ΣWeight (over
//     keys, up to the quality of the hash).
//   - Failure domains: if the eligible nodes span at least n domains (each
//     non-empty Zone is one domain, each node with Zone "" is a domain of its
//     own), no two chosen nodes share a domain. Otherwise every domain is
//     used and the number of replicas per domain differs by at most one,
//     except that a domain with too few nodes contributes all it has.
//   - Minimal movement: adding a node, removing one or changing one node's
//     weight changes the set chosen for a key only by that node entering it
//     (replacing exactly one other) or leaving it (replaced by exactly one
//     other); keys whose set it neither enters nor leaves keep their set,
//     though the order may change when the weight of a chosen node does.
//
// It returns an error wrapping ErrInvalidReplicaCount if n ≤ 0,
// ErrDuplicateID if two nodes share an id, and ErrNotEnoughNodes if fewer
// than n nodes are eligible. It does not panic on any input.
func ChooseWeighted(key uint64, nodes []WeightedNode, n int) ([]uint64, error) {
	if n <= 0 {
		return nil, fmt.Errorf("placement: choose %d replicas for key %d: %w", n, key, ErrInvalidReplicaCount)
	}
	ids := make([]uint64, len(nodes))
	straws := make([]straw, 0, len(nodes))
	for i, nd := range nodes {
		ids[i] = nd.ID
		if eligible(nd.Weight) {
			straws = append(straws, straw{id: nd.ID, zone: nd.Zone, draw: straw2Draw(key, nd.ID, nd.Weight)})
		}
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return nil, fmt.Errorf("placement: choose %d replicas for key %d: node %d listed twice: %w", n, key, ids[i], ErrDuplicateID)
		}
	}
	if len(straws) < n {
		return nil, fmt.Errorf("placement: choose %d replicas for key %d: %d of %d nodes have positive weight: %w",
			n, key, len(straws), len(nodes), ErrNotEnoughNodes)
	}
	// Ids are unique, so this is a total order and the ranking does not
	// depend on the input order, even for equal draws.
	slices.SortFunc(straws, func(a, b straw) int {
		if a.draw != b.draw {
			if a.draw > b.draw {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.id, b.id)
	})
	return spread(straws, n), nil
}

// straw is one eligible node's draw for the key being placed.
type straw struct {
	id     uint64
	zone   string
	draw   float64
	domain int // position of the node's failure domain, by the domain's best draw
	rank   int // 0 for the best node of its domain, 1 for the next, ...
}

// eligible reports whether w is a usable straw2 weight. NaN fails w > 0.
func eligible(w float64) bool {
	return w > 0 && !math.IsInf(w, 1)
}

// spread takes n nodes from ranked (best first, len(ranked) ≥ n) in rounds
// over failure domains: domains are ordered by their best node, and round r
// takes the r-th best node of every domain that has one. Only the nodes'
// own ranking decides, which is what keeps movement minimal (see the package
// documentation). It reorders ranked.
func spread(ranked []straw, n int) []uint64 {
	domains := 0
	type zoneState struct{ domain, nodes int }
	zones := make(map[string]zoneState)
	for i := range ranked {
		s := &ranked[i]
		if s.zone == "" {
			s.domain, s.rank = domains, 0
			domains++
			continue
		}
		z, ok := zones[s.zone]
		if !ok {
			z.domain = domains
			domains++
		}
		s.domain, s.rank = z.domain, z.nodes
		z.nodes++
		zones[s.zone] = z
	}
	out := make([]uint64, 0, n)
	if domains < n {
		// Round-robin order is (round, domain position); the pairs are
		// unique, so the order is total.
		slices.SortFunc(ranked, func(a, b straw) int {
			return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.domain, b.domain))
		})
		for _, s := range ranked[:n] {
			out = append(out, s.id)
		}
		return out
	}
	// One round suffices: the best node of each of the first n domains,
	// which appear in ranked in domain order.
	for _, s := range ranked {
		if s.rank == 0 {
			out = append(out, s.id)
			if len(out) == n {
				break
			}
		}
	}
	return out
}
