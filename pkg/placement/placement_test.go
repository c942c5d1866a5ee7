package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// placements is the number of keys each statistical test places.
const placements = 10000

// flat returns nodes 1..len(weights) with the given weights and no zone.
func flat(weights ...float64) []WeightedNode {
	nodes := make([]WeightedNode, len(weights))
	for i, w := range weights {
		nodes[i] = WeightedNode{ID: uint64(i + 1), Weight: w}
	}
	return nodes
}

// zoned returns nodes numbered from 1 in zone order; zones[z] lists the
// weights of the nodes of zone "z<z>".
func zoned(zones ...[]float64) []WeightedNode {
	var nodes []WeightedNode
	for z, ws := range zones {
		for _, w := range ws {
			nodes = append(nodes, WeightedNode{ID: uint64(len(nodes) + 1), Zone: fmt.Sprintf("z%d", z), Weight: w})
		}
	}
	return nodes
}

func equal(k int) []float64 {
	ws := make([]float64, k)
	for i := range ws {
		ws[i] = 1
	}
	return ws
}

func mustChoose(t testing.TB, key uint64, nodes []WeightedNode, n int) []uint64 {
	t.Helper()
	ids, err := ChooseWeighted(key, nodes, n)
	if err != nil {
		t.Fatalf("ChooseWeighted(key %d, %d nodes, n %d): %v", key, len(nodes), n, err)
	}
	return ids
}

// allPlacements places keys 0..placements-1.
func allPlacements(t testing.TB, nodes []WeightedNode, n int) [][]uint64 {
	t.Helper()
	out := make([][]uint64, placements)
	for key := range out {
		out[key] = mustChoose(t, uint64(key), nodes, n)
	}
	return out
}

func TestChooseGolden(t *testing.T) {
	// Pins the exact function. A change here changes where future
	// partitions go compared with an older master; placements already made
	// are recorded and unaffected, but the change must be deliberate.
	nodes := zoned([]float64{1, 2}, []float64{3}, []float64{1, 1, 1}, []float64{2})
	want := [][]uint64{
		{7, 6, 2}, {6, 2, 3}, {3, 7, 5}, {7, 6, 2},
		{3, 4, 7}, {3, 4, 2}, {6, 2, 3}, {7, 3, 4},
	}
	for key, w := range want {
		if got := mustChoose(t, uint64(key), nodes, 3); !slices.Equal(got, w) {
			t.Errorf("key %d: got %v, want %v", key, got, w)
		}
	}
}

func TestChooseOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tables := map[string][]WeightedNode{
		"flat equal":     flat(equal(12)...),
		"flat unequal":   flat(1, 2, 3, 4, 5, 6, 7, 8),
		"zones":          zoned([]float64{1, 2, 3}, []float64{4}, []float64{1, 1}, []float64{0, 5}),
		"two zones":      zoned([]float64{1, 1, 1, 1}, []float64{2, 2}),
		"mixed zoneless": append(zoned([]float64{1, 1}, []float64{1}), WeightedNode{ID: 100, Weight: 1}, WeightedNode{ID: 101, Weight: 3}),
		// Draws divided by a subnormal weight overflow to -Inf and tie;
		// only the id tie-break keeps such a result order-independent.
		"tied draws": append(flat(1, math.SmallestNonzeroFloat64, math.SmallestNonzeroFloat64, math.SmallestNonzeroFloat64),
			WeightedNode{ID: 10, Zone: "a", Weight: math.SmallestNonzeroFloat64}, WeightedNode{ID: 11, Zone: "a", Weight: math.SmallestNonzeroFloat64}),
	}
	for name, nodes := range tables {
		t.Run(name, func(t *testing.T) {
			for key := uint64(0); key < 500; key++ {
				want := mustChoose(t, key, nodes, 3)
				shuffled := slices.Clone(nodes)
				rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				if got := mustChoose(t, key, shuffled, 3); !slices.Equal(got, want) {
					t.Fatalf("key %d: shuffled input gives %v, original %v", key, got, want)
				}
			}
		})
	}
}

func TestChooseMatchesChooseWeighted(t *testing.T) {
	cands := []Candidate{
		{ID: 1, Zone: "a", CapacityBytes: 4 * tib, UsedBytes: tib},
		{ID: 2, Zone: "a", CapacityBytes: 4 * tib, UsedBytes: 3 * tib, MemUtil: 0.5},
		{ID: 3, Zone: "b", CapacityBytes: 2 * tib},
		{ID: 4, Zone: "c", CapacityBytes: tib, UsedBytes: tib}, // full: never chosen
		{ID: 5, Zone: "c", CapacityBytes: tib, MemUtil: 0.9},
	}
	nodes := make([]WeightedNode, len(cands))
	for i, c := range cands {
		nodes[i] = WeightedNode{ID: c.ID, Zone: c.Zone, Weight: Weight(c)}
	}
	for key := uint64(0); key < 1000; key++ {
		got, err := Choose(key, cands, 3)
		if err != nil {
			t.Fatalf("Choose(key %d): %v", key, err)
		}
		if want := mustChoose(t, key, nodes, 3); !slices.Equal(got, want) {
			t.Fatalf("key %d: Choose = %v, ChooseWeighted(Weight) = %v", key, got, want)
		}
		if slices.Contains(got, 4) {
			t.Fatalf("key %d: full node 4 chosen: %v", key, got)
		}
	}
}

// expectedShares is an independent model of ChooseWeighted's distribution,
// built from the straw2 math rather than from the code: domains are ranked
// by a Plackett–Luce race over their total weights, round-robin decides how
// many replicas k each domain gets, and within a domain the k replicas are a
// Plackett–Luce race over node weights. It returns each eligible node's
// expected share of all replica slots (shares sum to 1) by exact
// enumeration, so it is only for small tables.
func expectedShares(nodes []WeightedNode, n int) map[uint64]float64 {
	type domain struct {
		ids []uint64
		ws  []float64
		sum float64
	}
	var doms []*domain
	byZone := map[string]*domain{}
	for _, nd := range nodes {
		if !eligible(nd.Weight) {
			continue
		}
		d := byZone[nd.Zone]
		if d == nil || nd.Zone == "" {
			d = &domain{}
			doms = append(doms, d)
			if nd.Zone != "" {
				byZone[nd.Zone] = d
			}
		}
		d.ids = append(d.ids, nd.ID)
		d.ws = append(d.ws, nd.Weight)
		d.sum += nd.Weight
	}
	// inclusion[i] = P(item i among the first k of a Plackett–Luce race).
	inclusion := func(ws []float64, k int) []float64 {
		p := make([]float64, len(ws))
		used := make([]bool, len(ws))
		var rec func(depth int, prob, rest float64)
		rec = func(depth int, prob, rest float64) {
			if depth == k {
				return
			}
			for i, w := range ws {
				if used[i] {
					continue
				}
				q := prob * w / rest
				p[i] += q
				used[i] = true
				rec(depth+1, q, rest-w)
				used[i] = false
			}
		}
		total := 0.0
		for _, w := range ws {
			total += w
		}
		rec(0, 1, total)
		return p
	}
	shares := map[uint64]float64{}
	order := make([]int, 0, len(doms))
	used := make([]bool, len(doms))
	var total float64
	for _, d := range doms {
		total += d.sum
	}
	prefix := min(n, len(doms))
	var rec func(prob, rest float64)
	rec = func(prob, rest float64) {
		if len(order) < prefix {
			for i, d := range doms {
				if used[i] {
					continue
				}
				used[i] = true
				order = append(order, i)
				rec(prob*d.sum/rest, rest-d.sum)
				order = order[:len(order)-1]
				used[i] = false
			}
			return
		}
		// Round-robin over the ranked domains, as the package documents.
		counts := make([]int, len(doms))
		for got, round := 0, 0; got < n; round++ {
			for _, i := range order {
				if got < n && round < len(doms[i].ids) {
					counts[i]++
					got++
				}
			}
		}
		for _, i := range order {
			for j, p := range inclusion(doms[i].ws, counts[i]) {
				shares[doms[i].ids[j]] += prob * p / float64(n)
			}
		}
	}
	rec(1, total)
	return shares
}

func TestExpectedSharesModel(t *testing.T) {
	// Sanity checks of the reference model against hand-computed values.
	tests := []struct {
		name  string
		nodes []WeightedNode
		n     int
		want  map[uint64]float64
	}{
		{"n=1 is weight share", flat(1, 3), 1, map[uint64]float64{1: 0.25, 2: 0.75}},
		{"n=all is uniform", flat(1, 3), 2, map[uint64]float64{1: 0.5, 2: 0.5}},
		// P(1 in top 2 of {1:1, 2:1, 3:2}) = 1/4 + 1/4·1/3 + 1/2·1/2 = 7/12.
		{"top 2 of 3", flat(1, 1, 2), 2, map[uint64]float64{1: 7.0 / 24, 2: 7.0 / 24, 3: 10.0 / 24}},
		// Two equal zones of three, n=3: each zone 1.5 replicas on average.
		{"two zones", zoned(equal(3), equal(3)), 3, map[uint64]float64{1: 1.0 / 6, 2: 1.0 / 6, 3: 1.0 / 6, 4: 1.0 / 6, 5: 1.0 / 6, 6: 1.0 / 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := expectedShares(tt.nodes, tt.n)
			for id, w := range tt.want {
				if math.Abs(got[id]-w) > 1e-12 {
					t.Errorf("node %d: model share %.6f, want %.6f", id, got[id], w)
				}
			}
		})
	}
}

func TestShares(t *testing.T) {
	// With n > 1 a node holds at most one replica per key, so its share of
	// replicas is its Plackett–Luce inclusion probability / n, which is
	// flatter than its weight share (a node of weight 90% cannot get 90% of
	// replicas with n=3). The test therefore compares replica shares with the
	// exact model above and, where noted, also with plain weight shares, and
	// first-replica shares (always exactly weight share for straw2) with
	// weight shares.
	//
	// ±10% of a share is ≥ 3σ of sampling noise only when the node expects
	// ≥ 1000 hits; the test refuses tables that do not meet that, rather than
	// asserting on noise.
	tests := []struct {
		name          string
		nodes         []WeightedNode
		n             int
		checkFirst    bool // first-replica share vs weight share
		checkVsWeight bool // replica share vs weight share (mild skew only)
	}{
		{"10 equal, n=3", flat(equal(10)...), 3, true, true},
		{"1:2:3:4, n=1", flat(1, 2, 3, 4), 1, true, true},
		{"1:2:3:4, n=3", flat(1, 2, 3, 4), 3, false, false},
		{"skewed 8 nodes, n=3", flat(1, 1, 2, 2, 3, 3, 6, 6), 3, false, false},
		{"mild skew 8 nodes, n=3", flat(9, 9, 10, 10, 10, 10, 11, 11), 3, false, true},
		{"5 unequal zones, n=3", zoned([]float64{4, 4}, []float64{3, 3, 2}, []float64{5}, []float64{2, 2, 2}, []float64{3}), 3, false, false},
		{"2 unequal zones, n=3", zoned([]float64{3, 2, 1}, []float64{2, 2}), 3, false, false},
		{"zones and zoneless, n=3", append(zoned([]float64{2, 2}, []float64{3}), WeightedNode{ID: 10, Weight: 2}, WeightedNode{ID: 11, Weight: 1}), 3, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := expectedShares(tt.nodes, tt.n)
			var totalW float64
			for _, nd := range tt.nodes {
				totalW += nd.Weight
			}
			slots := float64(placements * tt.n)
			for _, nd := range tt.nodes {
				if want[nd.ID]*slots < 1000 {
					t.Fatalf("node %d expects %.0f replicas: too few for a ±10%% check", nd.ID, want[nd.ID]*slots)
				}
				if tt.checkFirst && nd.Weight/totalW*placements < 1000 {
					t.Fatalf("node %d expects %.0f first replicas: too few for a ±10%% check", nd.ID, nd.Weight/totalW*placements)
				}
			}
			hits := map[uint64]int{}
			firsts := map[uint64]int{}
			for _, ids := range allPlacements(t, tt.nodes, tt.n) {
				firsts[ids[0]]++
				for _, id := range ids {
					hits[id]++
				}
			}
			worst := 0.0
			for _, nd := range tt.nodes {
				got := float64(hits[nd.ID]) / slots
				dev := got/want[nd.ID] - 1
				worst = max(worst, math.Abs(dev))
				wshare := nd.Weight / totalW
				first := float64(firsts[nd.ID]) / placements
				t.Logf("node %3d zone %-3q weight %5.2f: replicas %.4f (model %.4f, %+5.1f%%), weight share %.4f, first %.4f (%+5.1f%%)",
					nd.ID, nd.Zone, nd.Weight, got, want[nd.ID], 100*dev, wshare, first, 100*(first/wshare-1))
				if math.Abs(dev) > 0.10 {
					t.Errorf("node %d: replica share %.4f, model %.4f: off by %+.1f%%", nd.ID, got, want[nd.ID], 100*dev)
				}
				if tt.checkVsWeight && math.Abs(got/wshare-1) > 0.10 {
					t.Errorf("node %d: replica share %.4f, weight share %.4f: off by %+.1f%%", nd.ID, got, wshare, 100*(got/wshare-1))
				}
				if tt.checkFirst && math.Abs(first/wshare-1) > 0.10 {
					t.Errorf("node %d: first-replica share %.4f, weight share %.4f: off by %+.1f%%", nd.ID, first, wshare, 100*(first/wshare-1))
				}
			}
			t.Logf("worst replica-share deviation from model: %.1f%%", 100*worst)
		})
	}
}

// setDiff returns the ids in a but not in b.
func setDiff(a, b []uint64) []uint64 {
	var d []uint64
	for _, x := range a {
		if !slices.Contains(b, x) {
			d = append(d, x)
		}
	}
	return d
}

func TestMovementOnAddOrGrow(t *testing.T) {
	// Moved fraction = Σ over keys of |old set \ new set| / (keys × n): the
	// share of replica slots whose data must be copied. Straw2 promises
	// that every move goes onto the changed node, so it also equals the
	// changed node's new share minus its old one, which the model predicts.
	addTo := func(nodes []WeightedNode, nd WeightedNode) []WeightedNode {
		return append(slices.Clone(nodes), nd)
	}
	reweigh := func(nodes []WeightedNode, id uint64, w float64) []WeightedNode {
		out := slices.Clone(nodes)
		for i := range out {
			if out[i].ID == id {
				out[i].Weight = w
			}
		}
		return out
	}
	ten := flat(equal(10)...)
	fiveZones := zoned(equal(2), equal(2), equal(2), equal(2), equal(2))
	tests := []struct {
		name          string
		before, after []WeightedNode
		subject       uint64
		n             int
		maxMoved      float64 // absolute bound on the moved fraction, if > 0
	}{
		// The brief's bound: one node added to ten equal ones should take
		// 1/11 of the replicas and nothing else should move.
		{"add 1 to 10 equal, n=3", ten, addTo(ten, WeightedNode{ID: 11, Weight: 1}), 11, 3, 1.0/11 + 0.03},
		{"add 1 to 10 equal, n=1", ten, addTo(ten, WeightedNode{ID: 11, Weight: 1}), 11, 1, 1.0/11 + 0.03},
		{"add new zone", fiveZones, addTo(fiveZones, WeightedNode{ID: 11, Zone: "new", Weight: 1}), 11, 3, 0},
		{"add to existing zone", fiveZones, addTo(fiveZones, WeightedNode{ID: 11, Zone: "z0", Weight: 1}), 11, 3, 0},
		{"add zone to 2 zones", zoned(equal(3), equal(3)), addTo(zoned(equal(3), equal(3)), WeightedNode{ID: 7, Zone: "new", Weight: 1}), 7, 3, 0},
		{"double one weight", ten, reweigh(ten, 4, 2), 4, 3, 0},
		{"revive zero-weight node", reweigh(ten, 4, 0), ten, 4, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := allPlacements(t, tt.before, tt.n)
			after := allPlacements(t, tt.after, tt.n)
			moved := 0
			for key := range before {
				lost, gained := setDiff(before[key], after[key]), setDiff(after[key], before[key])
				if len(lost) == 0 && len(gained) == 0 {
					continue
				}
				if len(lost) != 1 || len(gained) != 1 || gained[0] != tt.subject {
					t.Fatalf("key %d: %v -> %v: want at most one replica moved, onto node %d", key, before[key], after[key], tt.subject)
				}
				moved++
			}
			frac := float64(moved) / float64(placements*tt.n)
			model := expectedShares(tt.after, tt.n)[tt.subject] - expectedShares(tt.before, tt.n)[tt.subject]
			t.Logf("moved %.4f of replica slots (model %.4f, %d of %d keys changed)", frac, model, moved, placements)
			if math.Abs(frac-model) > 0.03 {
				t.Errorf("moved %.4f of replica slots, model %.4f ± 0.03", frac, model)
			}
			if tt.maxMoved > 0 && frac > tt.maxMoved {
				t.Errorf("moved %.4f of replica slots, want ≤ %.4f", frac, tt.maxMoved)
			}
		})
	}
}

func TestMovementOnRemoveOrShrink(t *testing.T) {
	without := func(nodes []WeightedNode, id uint64) []WeightedNode {
		return slices.DeleteFunc(slices.Clone(nodes), func(nd WeightedNode) bool { return nd.ID == id })
	}
	reweigh := func(nodes []WeightedNode, id uint64, w float64) []WeightedNode {
		out := slices.Clone(nodes)
		for i := range out {
			if out[i].ID == id {
				out[i].Weight = w
			}
		}
		return out
	}
	eleven := flat(equal(11)...)
	fiveZones := zoned(equal(2), equal(2), equal(3), equal(2), equal(2))
	twoZones := zoned(equal(3), equal(3))
	tests := []struct {
		name          string
		before, after []WeightedNode
		subject       uint64
		n             int
		wantMoved     float64 // expected moved fraction ± 0.03, if > 0
	}{
		// The removed node held 1/11 of the replicas; exactly those move.
		{"remove 1 of 11 equal", eleven, without(eleven, 5), 5, 3, 1.0 / 11},
		{"remove from a zone", fiveZones, without(fiveZones, 5), 5, 3, 0},
		{"remove a whole zone", fiveZones, without(without(fiveZones, 1), 2), 1, 3, 0},
		{"remove from 2 zones", twoZones, without(twoZones, 2), 2, 3, 0},
		{"weight to zero", eleven, reweigh(eleven, 5, 0), 5, 3, 1.0 / 11},
		{"weight to NaN", eleven, reweigh(eleven, 5, math.NaN()), 5, 3, 1.0 / 11},
		{"halve a weight", eleven, reweigh(eleven, 5, 0.5), 5, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// For "remove a whole zone" two nodes leave; both must have been
			// on the key for it to move.
			gone := setDiff(idsOf(tt.before), idsOf(tt.after))
			before := allPlacements(t, tt.before, tt.n)
			after := allPlacements(t, tt.after, tt.n)
			moved := 0
			for key := range before {
				lost, gained := setDiff(before[key], after[key]), setDiff(after[key], before[key])
				if !slices.Contains(before[key], tt.subject) && !containsAny(before[key], gone) {
					// Not on a changed node: must be untouched, order included.
					if !slices.Equal(before[key], after[key]) {
						t.Fatalf("key %d: %v -> %v moved although no replica was on node %d", key, before[key], after[key], tt.subject)
					}
					continue
				}
				for _, id := range lost {
					if id != tt.subject && !slices.Contains(gone, id) {
						t.Fatalf("key %d: %v -> %v: node %d lost a replica but did not change", key, before[key], after[key], id)
					}
				}
				if len(lost) != len(gained) {
					t.Fatalf("key %d: %v -> %v: replica count changed", key, before[key], after[key])
				}
				moved += len(lost)
			}
			frac := float64(moved) / float64(placements*tt.n)
			t.Logf("moved %.4f of replica slots (%d replicas)", frac, moved)
			if tt.wantMoved > 0 && math.Abs(frac-tt.wantMoved) > 0.03 {
				t.Errorf("moved %.4f of replica slots, want %.4f ± 0.03", frac, tt.wantMoved)
			}
		})
	}
}

func idsOf(nodes []WeightedNode) []uint64 {
	ids := make([]uint64, len(nodes))
	for i, nd := range nodes {
		ids[i] = nd.ID
	}
	return ids
}

func containsAny(s, of []uint64) bool {
	return slices.ContainsFunc(s, func(x uint64) bool { return slices.Contains(of, x) })
}

func TestZones(t *testing.T) {
	tests := []struct {
		name  string
		nodes []WeightedNode
		n     int
	}{
		{"3 equal zones", zoned(equal(4), equal(4), equal(4)), 3},
		{"3 zones, one heavy", zoned([]float64{50, 50, 50, 50}, []float64{1}, []float64{1, 1}), 3},
		{"4 zones, n=3", zoned(equal(1), equal(5), []float64{3, 9}, equal(2)), 3},
		{"10 zones, n=5", zoned(equal(3), equal(3), equal(3), equal(3), equal(3), equal(3), equal(3), equal(3), equal(3), equal(3)), 5},
		{"3 zones with zero weights", zoned([]float64{0, 1}, []float64{0, 0, 2}, []float64{5, 0}), 3},
		{"2 zones", zoned(equal(3), equal(3)), 3},
		{"2 zones, one heavy", zoned([]float64{100, 100}, []float64{1}), 3},
		{"2 zones, n=4", zoned(equal(2), equal(5)), 4},
		{"1 zone", zoned(equal(5)), 3},
		{"zoneless only", flat(1, 2, 3), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zoneOf := map[uint64]string{}
			zones := map[string]bool{}
			for _, nd := range tt.nodes {
				zoneOf[nd.ID] = nd.Zone
				if eligible(nd.Weight) {
					zones[nd.Zone] = true
				}
			}
			for key, ids := range allPlacements(t, tt.nodes, tt.n) {
				if err := checkPlacement(tt.nodes, tt.n, ids); err != nil {
					t.Fatalf("key %d: %v", key, err)
				}
				used := map[string]int{}
				for _, id := range ids {
					used[zoneOf[id]]++
				}
				if len(zones) >= tt.n && len(used) != tt.n {
					t.Fatalf("key %d: %v uses zones %v, want %d distinct", key, ids, used, tt.n)
				}
				if len(zones) < tt.n && len(used) != len(zones) {
					t.Fatalf("key %d: %v uses zones %v, want all %d", key, ids, used, len(zones))
				}
			}
		})
	}
}

// checkPlacement checks the guarantees of ChooseWeighted for one successful
// result: n distinct eligible ids, spread over failure domains as documented.
func checkPlacement(nodes []WeightedNode, n int, ids []uint64) error {
	if len(ids) != n {
		return fmt.Errorf("got %d ids %v, want %d", len(ids), ids, n)
	}
	byID := map[uint64]WeightedNode{}
	for _, nd := range nodes {
		byID[nd.ID] = nd
	}
	// Domain key: zone name, or the node itself for zoneless nodes.
	domainOf := func(nd WeightedNode) string {
		if nd.Zone == "" {
			return fmt.Sprintf("\x00node %d", nd.ID)
		}
		return nd.Zone
	}
	size := map[string]int{}
	for _, nd := range nodes {
		if eligible(nd.Weight) {
			size[domainOf(nd)]++
		}
	}
	count := map[string]int{}
	seen := map[uint64]bool{}
	for _, id := range ids {
		nd, ok := byID[id]
		if !ok {
			return fmt.Errorf("%v: unknown node %d", ids, id)
		}
		if seen[id] {
			return fmt.Errorf("%v: node %d chosen twice", ids, id)
		}
		seen[id] = true
		if !eligible(nd.Weight) {
			return fmt.Errorf("%v: node %d has weight %g", ids, id, nd.Weight)
		}
		count[domainOf(nd)]++
	}
	// As even as possible: a domain may hold two more than another only if
	// the other has no node left.
	for d, c := range count {
		for e := range size {
			if c >= count[e]+2 && count[e] < size[e] {
				return fmt.Errorf("%v: domain %q has %d replicas, %q only %d of its %d nodes", ids, d, c, e, count[e], size[e])
			}
		}
	}
	if len(size) >= n && len(count) != n {
		return fmt.Errorf("%v: %d domains used of %d available, want %d", ids, len(count), len(size), n)
	}
	return nil
}

func TestChooseRandomProperties(t *testing.T) {
	// Random candidate sets with repeated and empty zones, zero, negative,
	// NaN and infinite weights, and duplicate ids: ChooseWeighted must never
	// panic, must fail exactly when the inputs call for it, and must
	// otherwise meet every documented guarantee, independent of input order.
	rng := rand.New(rand.NewPCG(7, 11))
	zones := []string{"", "", "a", "b", "c", "d"}
	weights := []float64{0, 0, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1e-300, 0.5, 1, 1, 2, 3, 10, 1e6}
	counts := map[string]int{}
	for iter := range 20000 {
		size := rng.IntN(12)
		nodes := make([]WeightedNode, size)
		for i := range nodes {
			nodes[i] = WeightedNode{
				ID:     rng.Uint64N(40), // small range: duplicates happen
				Zone:   zones[rng.IntN(len(zones))],
				Weight: weights[rng.IntN(len(weights))],
			}
		}
		n := rng.IntN(7) - 1
		key := rng.Uint64()

		var wantErr error
		ids := map[uint64]bool{}
		elig := 0
		for _, nd := range nodes {
			if ids[nd.ID] && wantErr == nil {
				wantErr = ErrDuplicateID
			}
			ids[nd.ID] = true
			if eligible(nd.Weight) {
				elig++
			}
		}
		switch {
		case n <= 0:
			wantErr = ErrInvalidReplicaCount
		case wantErr != nil:
		case elig < n:
			wantErr = ErrNotEnoughNodes
		}

		got, err := ChooseWeighted(key, nodes, n)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("iter %d: ChooseWeighted(%d, %v, %d) = %v, %v; want error %v", iter, key, nodes, n, got, err, wantErr)
			}
			counts[wantErr.Error()]++
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: ChooseWeighted(%d, %v, %d): unexpected error %v", iter, key, nodes, n, err)
		}
		if err := checkPlacement(nodes, n, got); err != nil {
			t.Fatalf("iter %d: ChooseWeighted(%d, %v, %d): %v", iter, key, nodes, n, err)
		}
		shuffled := slices.Clone(nodes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, err := ChooseWeighted(key, shuffled, n); err != nil || !slices.Equal(again, got) {
			t.Fatalf("iter %d: shuffled input gives %v, %v; original %v", iter, again, err, got)
		}
		counts["ok"]++
	}
	t.Logf("outcomes: %v", counts)
	// The generator must exercise every path, or the test proves little.
	for _, k := range []string{"ok", ErrDuplicateID.Error(), ErrInvalidReplicaCount.Error(), ErrNotEnoughNodes.Error()} {
		if counts[k] < 100 {
			t.Errorf("only %d cases of %q", counts[k], k)
		}
	}
}

func TestChooseErrors(t *testing.T) {
	tests := []struct {
		name  string
		nodes []WeightedNode
		n     int
		want  error
	}{
		{"no nodes", nil, 3, ErrNotEnoughNodes},
		{"too few nodes", flat(1, 1), 3, ErrNotEnoughNodes},
		{"too few eligible", flat(1, 1, 0, -1, math.NaN(), math.Inf(1)), 3, ErrNotEnoughNodes},
		{"all weights zero", flat(0, 0, 0, 0), 3, ErrNotEnoughNodes},
		{"duplicate ids", []WeightedNode{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}, {ID: 1, Zone: "a", Weight: 1}, {ID: 3, Weight: 1}}, 3, ErrDuplicateID},
		{"duplicate ineligible ids", []WeightedNode{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}, {ID: 3, Weight: 1}, {ID: 9}, {ID: 9}}, 3, ErrDuplicateID},
		{"n zero", flat(1, 1, 1), 0, ErrInvalidReplicaCount},
		{"n negative", flat(1, 1, 1), -1, ErrInvalidReplicaCount},
		{"n huge", flat(1, 1, 1), math.MaxInt, ErrNotEnoughNodes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChooseWeighted(42, tt.nodes, tt.n)
			if !errors.Is(err, tt.want) || got != nil {
				t.Fatalf("ChooseWeighted = %v, %v; want nil, error wrapping %v", got, err, tt.want)
			}
			t.Logf("error: %v", err)
		})
	}
	// Choose reports the same errors for candidates.
	cands := []Candidate{
		{ID: 1, CapacityBytes: tib},
		{ID: 2, CapacityBytes: tib, UsedBytes: tib},
		{ID: 3, CapacityBytes: tib, MemUtil: 1},
	}
	if _, err := Choose(1, cands, 2); !errors.Is(err, ErrNotEnoughNodes) {
		t.Errorf("Choose with one usable node of three: %v, want ErrNotEnoughNodes", err)
	}
	if _, err := Choose(1, append(cands, Candidate{ID: 1}), 1); !errors.Is(err, ErrDuplicateID) {
		t.Errorf("Choose with duplicate id: %v, want ErrDuplicateID", err)
	}
	if _, err := Choose(1, cands, 0); !errors.Is(err, ErrInvalidReplicaCount) {
		t.Errorf("Choose with n=0: %v, want ErrInvalidReplicaCount", err)
	}
}

func BenchmarkChoose(b *testing.B) {
	// 100 nodes in 10 zones, realistic and unequal usage, n=3.
	cands := make([]Candidate, 100)
	for i := range cands {
		cands[i] = Candidate{
			ID:            uint64(1000 + i),
			Zone:          fmt.Sprintf("zone-%d", i%10),
			CapacityBytes: uint64(4+i%3) * tib,
			UsedBytes:     uint64(i%7) * tib / 2,
			MemUtil:       float64(i%5) / 10,
			Partitions:    i,
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := Choose(uint64(i), cands, 3); err != nil {
			b.Fatal(err)
		}
	}
}
