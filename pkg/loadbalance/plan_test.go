package loadbalance_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	lb "github.com/cairnfs/cairn/pkg/loadbalance"
)

// The unit tests use four MPs with one slot each: ids 1..4. Hashed homes
// with four slots: Makefile, README, x, b -> MP 2; c -> MP 3; y, a -> MP 4.

type entry struct {
	name string
	r    hybridindex.Redirect
}

var pw = hybridindex.Redirect{Kind: hybridindex.PathWalk}

func ov(mp uint64) hybridindex.Redirect {
	return hybridindex.Redirect{Kind: hybridindex.Override, MP: mp}
}

func table4(t *testing.T, entries ...entry) *hybridindex.Table {
	t.Helper()
	et := hybridindex.NewExceptionTable()
	for _, e := range entries {
		if err := et.Set(e.name, e.r); err != nil {
			t.Fatal(err)
		}
	}
	return &hybridindex.Table{Slots: []uint64{1, 2, 3, 4}, Exceptions: et}
}

// mps builds stats for MPs 1..len(loads) at the table's version.
func mps(tab *hybridindex.Table, loads ...uint64) []lb.MPStats {
	s := make([]lb.MPStats, len(loads))
	for i, l := range loads {
		s[i] = lb.MPStats{MP: uint64(i + 1), Inodes: l, TableVersion: tab.Exceptions.Version()}
	}
	return s
}

func nc(name string, n uint64) lb.NameCount { return lb.NameCount{Name: name, Count: n} }

func loads(ls ...uint64) []lb.Load {
	out := make([]lb.Load, len(ls))
	for i, l := range ls {
		out[i] = lb.Load{MP: uint64(i + 1), Inodes: l}
	}
	return out
}

func TestPlan(t *testing.T) {
	tests := []struct {
		desc    string
		entries []entry
		loads   []uint64
		top     map[int][]lb.NameCount // by MP index
		exc     map[int][]lb.NameCount
		want    []lb.Change
		after   []lb.Load
		stop    lb.Stop
	}{{
		// FalconFS step 3: path-walk spreads 602 over 4 MPs (151, 151, 150,
		// 150; max 1151), override would put 1602 on MP 2. Path-walk wins.
		desc:  "hot name gets path-walk",
		loads: []uint64{1602, 1000, 1000, 1000},
		top:   map[int][]lb.NameCount{0: {nc("Makefile", 602), nc("main.c", 50)}},
		want:  []lb.Change{{Op: lb.SetPathWalk, Name: "Makefile", From: 1, Files: 451}},
		after: loads(1151, 1151, 1150, 1150),
		stop:  lb.Balanced,
	}, {
		// Path-walk would give the lower pair maximum (1075 against 1100),
		// but the override keeps both MPs within the limit 1127 and keeps
		// one-hop access, which FalconFS prefers (Appendix A.1).
		desc:  "override preferred when it fits",
		loads: []uint64{1300, 800, 1000, 1000},
		top:   map[int][]lb.NameCount{0: {nc("a", 300)}},
		want:  []lb.Change{{Op: lb.SetOverride, Name: "a", MP: 2, From: 1, Files: 300}},
		after: loads(1000, 1100, 1000, 1000),
		stop:  lb.Balanced,
	}, {
		// Path-walk gives max 1150, override to the least loaded MP 3 gives 1100.
		desc:  "hash variance gets override",
		loads: []uint64{1300, 1000, 900, 1000},
		top:   map[int][]lb.NameCount{0: {nc("b", 150), nc("a", 200)}},
		want:  []lb.Change{{Op: lb.SetOverride, Name: "a", MP: 3, From: 1, Files: 200}},
		after: loads(1100, 1000, 1100, 1000),
		stop:  lb.Balanced,
	}, {
		desc:  "balanced: nothing to do",
		loads: []uint64{1100, 1000, 950, 1000},
		top:   map[int][]lb.NameCount{0: {nc("a", 500)}},
		after: loads(1100, 1000, 950, 1000),
		stop:  lb.Balanced,
	}, {
		desc:  "no names reported",
		loads: []uint64{2000, 1000, 1000, 1000},
		after: loads(2000, 1000, 1000, 1000),
		stop:  lb.NoCandidate,
	}, {
		// Moving "a" (1200) either way makes MP 2 reach 1300 (path-walk adds
		// 300) or more, so the next name is tried: "b" goes to MP 2 (pair
		// max 1200; path-walk would leave MP 1 at 1225). Then neither name
		// helps MP 1 any more.
		desc:  "most frequent name cannot help, next one can",
		loads: []uint64{1300, 1000, 1000, 1000},
		top:   map[int][]lb.NameCount{0: {nc("a", 1200), nc("b", 100)}},
		want:  []lb.Change{{Op: lb.SetOverride, Name: "b", MP: 2, From: 1, Files: 100}},
		after: loads(1200, 1100, 1000, 1000),
		stop:  lb.NoCandidate,
	}, {
		// Path-walk of "a" (pair max 500 < 1300) pushes MP 2 to 1595, and MP 2
		// has no names to move: the best prefix is no change at all.
		desc:  "no step better than the start",
		loads: []uint64{1300, 1295, 200, 200},
		top:   map[int][]lb.NameCount{0: {nc("a", 1200), nc("b", 10)}},
		after: loads(1300, 1295, 200, 200),
		stop:  lb.NoCandidate,
	}, {
		// An override whose target became the hot spot: turning it into a
		// path-walk entry (max 1125) beats moving it again (1500).
		desc:    "existing override becomes path-walk",
		entries: []entry{{"x", ov(1)}},
		loads:   []uint64{1500, 1000, 1000, 1000},
		exc:     map[int][]lb.NameCount{0: {nc("x", 500)}},
		want:    []lb.Change{{Op: lb.SetPathWalk, Name: "x", From: 1, Files: 375}},
		after:   loads(1125, 1125, 1125, 1125),
		stop:    lb.Balanced,
	}, {
		// Path-walk entries are never Plan's candidates.
		desc:    "path-walk entries stay",
		entries: []entry{{"Makefile", pw}},
		loads:   []uint64{1500, 1000, 1000, 1000},
		exc:     map[int][]lb.NameCount{0: {nc("Makefile", 400)}, 1: {nc("Makefile", 10)}},
		after:   loads(1500, 1000, 1000, 1000),
		stop:    lb.NoCandidate,
	}, {
		// Two hot MPs: path-walk of "a" first raises MP 4 to 1480 (the pair
		// MP 1, MP 2 decides), then "c" goes too, judged on those loads.
		desc:  "several rounds",
		loads: []uint64{1400, 1000, 1000, 1380},
		top: map[int][]lb.NameCount{
			0: {nc("a", 400), nc("z", 1)},
			3: {nc("c", 380)},
		},
		want: []lb.Change{
			{Op: lb.SetPathWalk, Name: "a", From: 1, Files: 300},
			{Op: lb.SetPathWalk, Name: "c", From: 4, Files: 285},
		},
		after: loads(1195, 1195, 1195, 1195),
		stop:  lb.Balanced,
	}}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tab := table4(t, tc.entries...)
			stats := mps(tab, tc.loads...)
			for i, top := range tc.top {
				stats[i].Top = top
			}
			for i, e := range tc.exc {
				stats[i].Exceptions = e
			}
			res, err := lb.Plan(stats, tab, lb.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Changes, tc.want) {
				t.Errorf("changes\n got %v\nwant %v", res.Changes, tc.want)
			}
			if !slices.Equal(res.After, tc.after) {
				t.Errorf("after %v, want %v", res.After, tc.after)
			}
			if res.Stop != tc.stop {
				t.Errorf("stop %v, want %v", res.Stop, tc.stop)
			}
			var sum uint64
			for _, l := range tc.loads {
				sum += l
			}
			if want := uint64(1.1 * float64(sum) / 4); res.Limit != want {
				t.Errorf("limit %d, want %d", res.Limit, want)
			}
			if sumLoads(res.After) != sumLoads(res.Before) {
				t.Errorf("records not conserved: %v -> %v", res.Before, res.After)
			}
			if res.Balanced != (slices.MaxFunc(res.After, byInodes).Inodes <= res.Limit) {
				t.Errorf("Balanced = %v for %v and limit %d", res.Balanced, res.After, res.Limit)
			}
			// The plan applies cleanly to the table it was made for.
			et := tab.Exceptions.Clone()
			if err := lb.Apply(et, res.Changes); err != nil {
				t.Fatal(err)
			}
			// Determinism: the order of the stats does not matter.
			rev := slices.Clone(stats)
			slices.Reverse(rev)
			if again, _ := lb.Plan(rev, tab, lb.Options{}); !reflect.DeepEqual(again, res) {
				t.Errorf("reversed stats give %+v, want %+v", again, res)
			}
		})
	}
}

func byInodes(a, b lb.Load) int { return int(a.Inodes) - int(b.Inodes) }

func sumLoads(ls []lb.Load) uint64 {
	var s uint64
	for _, l := range ls {
		s += l.Inodes
	}
	return s
}

func TestPlanMaxChanges(t *testing.T) {
	tab := table4(t)
	// Unlimited, a -> MP 3 and c -> MP 4 balance it.
	stats := mps(tab, 1300, 1290, 900, 900)
	stats[0].Top = []lb.NameCount{nc("a", 150)}
	stats[1].Top = []lb.NameCount{nc("c", 140)}
	if res, _ := lb.Plan(stats, tab, lb.Options{}); len(res.Changes) != 2 || !res.Balanced {
		t.Fatalf("unlimited plan: %v", res.Changes)
	}
	res, err := lb.Plan(stats, tab, lb.Options{MaxChanges: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 1 || res.Stop != lb.MaxChanges || res.Balanced {
		t.Errorf("MaxChanges 1: %d changes, stop %v, balanced %v", len(res.Changes), res.Stop, res.Balanced)
	}
}

// TopK limits the names considered on each MP.
func TestPlanTopK(t *testing.T) {
	tab := table4(t)
	stats := mps(tab, 1300, 1000, 1000, 1000)
	stats[0].Top = []lb.NameCount{nc("b", 100), nc("a", 1200)}
	if res, _ := lb.Plan(stats, tab, lb.Options{TopK: 2}); len(res.Changes) != 1 {
		t.Fatalf("TopK 2: %v", res.Changes)
	}
	res, err := lb.Plan(stats, tab, lb.Options{TopK: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 0 || res.Stop != lb.NoCandidate {
		t.Errorf("TopK 1 considered more than the top name: %v, %v", res.Changes, res.Stop)
	}
}

func TestShrink(t *testing.T) {
	tests := []struct {
		desc    string
		entries []entry
		loads   []uint64
		exc     map[int][]lb.NameCount
		opts    lb.Options
		want    []lb.Change
		after   []lb.Load
	}{{
		// Removing Makefile would put 600 records on MP 2.
		desc:    "needed path-walk entry stays",
		entries: []entry{{"Makefile", pw}},
		loads:   []uint64{1150, 1150, 1150, 1150},
		exc:     all4(nc("Makefile", 150)),
		after:   loads(1150, 1150, 1150, 1150),
	}, {
		desc:    "unneeded path-walk entry goes",
		entries: []entry{{"Makefile", pw}},
		loads:   []uint64{1010, 1010, 1010, 1010},
		exc:     all4(nc("Makefile", 10)),
		want:    []lb.Change{{Op: lb.Remove, Name: "Makefile", Files: 30}},
		after:   loads(1000, 1040, 1000, 1000),
	}, {
		// Moving x's 100 records home to MP 2 gives 1100: above the shrink
		// limit ⌊1.05 × 1025⌋ = 1076 but below the plan limit 1127.
		desc:    "hysteresis keeps an override",
		entries: []entry{{"x", ov(3)}},
		loads:   []uint64{1000, 1000, 1100, 1000},
		exc:     map[int][]lb.NameCount{2: {nc("x", 100)}},
		after:   loads(1000, 1000, 1100, 1000),
	}, {
		desc:    "override goes with ShrinkEpsilon = Epsilon",
		entries: []entry{{"x", ov(3)}},
		loads:   []uint64{1000, 1000, 1100, 1000},
		exc:     map[int][]lb.NameCount{2: {nc("x", 100)}},
		opts:    lb.Options{ShrinkEpsilon: 0.1},
		want:    []lb.Change{{Op: lb.Remove, Name: "x", From: 3, Files: 100}},
		after:   loads(1000, 1100, 1000, 1000),
	}, {
		// y hashes to MP 4 anyway: removing the entry moves nothing.
		desc:    "override to the home MP goes",
		entries: []entry{{"y", ov(4)}},
		loads:   []uint64{1000, 1000, 1000, 1500},
		exc:     map[int][]lb.NameCount{3: {nc("y", 400)}},
		opts:    lb.Options{},
		want:    []lb.Change{{Op: lb.Remove, Name: "y", From: 4}},
		after:   loads(1000, 1000, 1000, 1500),
	}, {
		// Path-walk entries are visited before overrides: removing Makefile
		// (home MP 2) uses up the room that b (home MP 2) would need.
		desc:    "path-walk first",
		entries: []entry{{"Makefile", pw}, {"b", ov(3)}},
		loads:   []uint64{1010, 1010, 1040, 1010},
		exc:     map[int][]lb.NameCount{0: {nc("Makefile", 10)}, 1: {nc("Makefile", 10)}, 2: {nc("Makefile", 10), nc("b", 40)}, 3: {nc("Makefile", 10)}},
		want:    []lb.Change{{Op: lb.Remove, Name: "Makefile", Files: 30}},
		after:   loads(1000, 1040, 1030, 1000),
	}}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tab := table4(t, tc.entries...)
			stats := mps(tab, tc.loads...)
			for i, e := range tc.exc {
				stats[i].Exceptions = e
			}
			res, err := lb.Shrink(stats, tab, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Changes, tc.want) {
				t.Errorf("changes\n got %v\nwant %v", res.Changes, tc.want)
			}
			if !slices.Equal(res.After, tc.after) {
				t.Errorf("after %v, want %v", res.After, tc.after)
			}
			if res.Stop != lb.Shrunk {
				t.Errorf("stop %v", res.Stop)
			}
		})
	}
}

func all4(ncs ...lb.NameCount) map[int][]lb.NameCount {
	return map[int][]lb.NameCount{0: ncs, 1: ncs, 2: ncs, 3: ncs}
}

// Two entries whose records both go home to MP 2; there is room for one.
// Which one is removed depends on the seed, and only on the seed.
func TestShrinkSeedOrder(t *testing.T) {
	tab := table4(t, entry{"Makefile", pw}, entry{"README", pw})
	stats := mps(tab, 1020, 1020, 1020, 1020)
	for i := range stats {
		stats[i].Exceptions = []lb.NameCount{nc("Makefile", 10), nc("README", 10)}
	}
	removed := map[string]int{}
	for seed := range uint64(32) {
		res, err := lb.Shrink(stats, tab, lb.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Changes) != 1 || !res.Balanced {
			t.Fatalf("seed %d: %v, balanced %v; want exactly one removal", seed, res.Changes, res.Balanced)
		}
		removed[res.Changes[0].Name]++
		again, _ := lb.Shrink(stats, tab, lb.Options{Seed: seed})
		if !reflect.DeepEqual(again, res) {
			t.Fatalf("seed %d: two calls differ", seed)
		}
	}
	if removed["Makefile"] == 0 || removed["README"] == 0 {
		t.Errorf("over 32 seeds removed %v; the order does not depend on the seed", removed)
	}
}

func TestApply(t *testing.T) {
	et := hybridindex.NewExceptionTable()
	err := lb.Apply(et, []lb.Change{
		{Op: lb.SetPathWalk, Name: "Makefile"},
		{Op: lb.SetOverride, Name: "a", MP: 3},
		{Op: lb.SetOverride, Name: "b", MP: 4},
		{Op: lb.Remove, Name: "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := et.String(); got != `v4{"Makefile": path-walk, "a": override MP 3}` {
		t.Errorf("table %s", got)
	}
	for _, bad := range []lb.Change{{Op: 0, Name: "a"}, {Op: lb.SetOverride, Name: "a"}, {Op: lb.SetPathWalk, Name: "a/b"}} {
		if err := lb.Apply(et.Clone(), []lb.Change{bad}); err == nil {
			t.Errorf("Apply(%v) succeeded", bad)
		}
	}
}

func TestPlanRejects(t *testing.T) {
	good := func() ([]lb.MPStats, *hybridindex.Table) {
		tab := table4(t, entry{"Makefile", pw})
		s := mps(tab, 1000, 1000, 1000, 1000)
		s[0].Top = []lb.NameCount{nc("a", 10)}
		s[0].Exceptions = []lb.NameCount{nc("Makefile", 5)}
		return s, tab
	}
	tests := []struct {
		desc  string
		edit  func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table)
		opts  lb.Options
		isErr error
	}{
		{"no stats", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) { return nil, tab }, lb.Options{}, lb.ErrBadStats},
		{"nil table", func(s []lb.MPStats, _ *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) { return s, nil }, lb.Options{}, hybridindex.ErrInvalidTable},
		{"stale version", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[2].TableVersion++
			return s, tab
		}, lb.Options{}, lb.ErrStaleStats},
		{"duplicate MP", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			return append(s, s[1]), tab
		}, lb.Options{}, lb.ErrBadStats},
		{"MP 0", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[3].MP = 0
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"slot owner without stats", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			return s[:3], tab
		}, lb.Options{}, lb.ErrBadStats},
		{"MP without slots", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			return append(s, lb.MPStats{MP: 5, TableVersion: s[0].TableVersion}), tab
		}, lb.Options{}, lb.ErrBadStats},
		{"top name has an entry", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[1].Top = []lb.NameCount{nc("Makefile", 10)}
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"exception name without entry", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[1].Exceptions = []lb.NameCount{nc("a", 10)}
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"name twice", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[0].Top = append(s[0].Top, nc("a", 1))
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"invalid name", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[0].Top = []lb.NameCount{nc("a/b", 1)}
			return s, tab
		}, lb.Options{}, hybridindex.ErrSlashInName},
		{"counts above inodes", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[0].Top = []lb.NameCount{nc("a", 999), nc("b", 2)}
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"counts overflow", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[0].Top = []lb.NameCount{nc("a", math.MaxUint64), nc("b", 2)}
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"too many inodes", func(s []lb.MPStats, tab *hybridindex.Table) ([]lb.MPStats, *hybridindex.Table) {
			s[0].Inodes = lb.MaxInodesPerMP + 1
			return s, tab
		}, lb.Options{}, lb.ErrBadStats},
		{"negative epsilon", nil, lb.Options{Epsilon: -0.1}, lb.ErrBadOptions},
		{"NaN epsilon", nil, lb.Options{Epsilon: math.NaN()}, lb.ErrBadOptions},
		{"infinite shrink epsilon", nil, lb.Options{ShrinkEpsilon: math.Inf(1)}, lb.ErrBadOptions},
		{"negative top-k", nil, lb.Options{TopK: -1}, lb.ErrBadOptions},
		{"shrink epsilon above epsilon", nil, lb.Options{ShrinkEpsilon: 0.2}, lb.ErrBadOptions},
	}
	for _, tc := range tests {
		s, tab := good()
		if tc.edit != nil {
			s, tab = tc.edit(s, tab)
		}
		_, err := lb.Plan(s, tab, tc.opts)
		if !errors.Is(err, tc.isErr) {
			t.Errorf("%s: Plan error %v, want %v", tc.desc, err, tc.isErr)
		}
		_, err = lb.Shrink(s, tab, tc.opts)
		if !errors.Is(err, tc.isErr) {
			t.Errorf("%s: Shrink error %v, want %v", tc.desc, err, tc.isErr)
		}
	}
	if s, tab := good(); true {
		if _, err := lb.Plan(s, tab, lb.Options{}); err != nil {
			t.Fatalf("the good stats are refused: %v", err)
		}
	}
}

// Random statistics, valid or not, never panic Plan or Shrink, and a plan
// never raises the predicted maximum.
func TestPlanRandomStats(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	names := []string{"a", "b", "c", "x", "y", "Makefile", "README", "Kconfig", ".", ""}
	for iter := range 3000 {
		n := 1 + r.IntN(6)
		var ids []uint64
		for i := range n {
			ids = append(ids, uint64(i+1))
		}
		slots, _ := hybridindex.NewSlots(ids, n+r.IntN(8))
		et := hybridindex.NewExceptionTable()
		for _, name := range names[:8] {
			switch r.IntN(4) {
			case 0:
				_ = et.Set(name, pw)
			case 1:
				_ = et.Set(name, ov(ids[r.IntN(n)]))
			}
		}
		tab := &hybridindex.Table{Slots: slots, Exceptions: et}
		stats := make([]lb.MPStats, n)
		for i := range stats {
			stats[i] = lb.MPStats{MP: ids[i], Inodes: uint64(r.IntN(2000)), TableVersion: et.Version()}
			for range r.IntN(4) {
				name := names[r.IntN(len(names))]
				c := nc(name, uint64(r.IntN(600)))
				if _, ok := et.Get(name); ok || r.IntN(20) == 0 {
					stats[i].Exceptions = append(stats[i].Exceptions, c)
				} else {
					stats[i].Top = append(stats[i].Top, c)
				}
			}
		}
		res, err := lb.Plan(stats, tab, lb.Options{Epsilon: r.Float64() / 2})
		if err == nil {
			before := slices.MaxFunc(res.Before, byInodes).Inodes
			after := slices.MaxFunc(res.After, byInodes).Inodes
			if after > before {
				t.Fatalf("iter %d: plan raised the maximum from %d to %d: %v", iter, before, after, res.Changes)
			}
			if sumLoads(res.After) != sumLoads(res.Before) {
				t.Fatalf("iter %d: records not conserved: %v -> %v", iter, res.Before, res.After)
			}
			if err := lb.Apply(et.Clone(), res.Changes); err != nil {
				t.Fatalf("iter %d: %v", iter, err)
			}
		}
		if res, err := lb.Shrink(stats, tab, lb.Options{Seed: uint64(iter)}); err == nil {
			for i, l := range res.After {
				if l.Inodes > res.Limit && l.Inodes > res.Before[i].Inodes {
					t.Fatalf("iter %d: shrink raised MP %d over the limit %d: %v", iter, l.MP, res.Limit, res.Changes)
				}
			}
		}
	}
}
