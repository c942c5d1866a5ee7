// Package placement chooses the replica set of a new meta or data partition.
//
// The master calls [Choose] with the partition id as key and the nodes that
// may host it; the result is an ordered list of distinct node ids, the first
// being the preferred leader. The package is pure: no I/O, no clock, no
// global state, and the result depends only on its arguments, never on the
// order of the candidate slice, the process, or the CPU architecture.
//
// # Straw2
//
// Placement is a CRUSH-like weighted function (Ceph §5.1) using the straw2
// draw. For a key k every eligible node i draws
//
//	draw(k, i) = log(u) / w_i,   u = hash(k, i) mapped uniformly into (0, 1]
//
// and nodes are ranked by draw, highest first. -log(u)/w_i is an exponential
// variable with rate w_i, so the highest draw is an exponential race: node i
// wins with probability exactly w_i / Σw. Later ranks follow the same race
// among the remaining nodes (sampling without replacement in proportion to
// weight, the Plackett–Luce model), so with n > 1 a heavy node's share of
// replicas is below its weight share and a light node's above it: a node
// holds at most one replica of a partition (weights 1:2:3:4 with n = 3
// give replica shares of about 15:25:29:31).
//
// Why movement is minimal: a node's draw depends only on the key, its own id
// and its own weight. Adding a node, removing one, or changing one node's
// weight changes that node's draw and no other, so a key's ranking can only
// change by that node moving up or down in it. Consequently adding a node
// moves replicas only onto the new node (as many as its share), and
// removing a node moves only the replicas that were on it. This is what
// straw2 fixed over CRUSH's original straw bucket, whose straw lengths
// depended on all weights in the bucket.
//
// The hash is a splitmix64-style mix of key and node id, u has 53 bits, and
// the logarithm is computed in integer fixed point, so the only
// floating-point operation on the way to a draw is one division, which IEEE
// 754 rounds exactly. math.Log is not used because its result may differ in
// the last bit between architectures (assembly on amd64, pure Go with fused
// multiply-add elsewhere). Using log2 instead of ln scales every draw by the
// same constant and leaves the ranking unchanged.
//
// # Failure domains
//
// A node's Zone is its failure domain; a node with Zone "" is a domain of
// its own. Replicas are taken in rounds: the domains are ordered by the draw
// of their best node, and each round takes the next-best node of every domain
// that still has one, until n nodes are chosen. So with at least n domains
// the n replicas land in n different domains, and with fewer domains every
// domain is used and replica counts per domain differ by at most one unless
// a domain runs out of nodes.
//
// Ordering domains by their best node is distributed exactly like the
// two-level CRUSH rule "straw2 over zones weighted by the sum of their node
// weights, then straw2 over the nodes of the chosen zone": the best draw in a
// zone is itself an exponential race with rate Σw of the zone, and which node
// wins inside the zone is independent of the winning value. Unlike the
// two-level rule with a separate zone hash, it keeps the minimal-movement
// property above: in the two-level rule adding a node raises its zone's
// weight and can pull placements onto the zone's old nodes.
//
// # Weights
//
// [Weight] turns a node's reported usage into a straw2 weight, following the
// utilization-based placement of CFS §2.3.1 (new partitions go to the least
// utilized nodes):
//
//	w = freeGiB × (1 − diskUtil) × (1 − MemUtil)
//	freeGiB  = (CapacityBytes − UsedBytes) / 2^30
//	diskUtil = UsedBytes / CapacityBytes
//
// Weight grows with free space and shrinks with both disk and memory
// utilization; a full node, one with memory exhausted, or one with invalid
// numbers has weight 0 and is never chosen. The (1 − diskUtil) factor makes
// new and emptier nodes fill faster than their free space alone would, so
// utilization converges across the cluster; weighting by free space alone
// would keep utilizations apart until every node is full.
//
// Weights change as nodes fill, and with them the result of Choose for a
// given key. Choose is meant for new partitions: the master records the
// chosen replica set and does not recompute the placement of existing ones.
package placement
