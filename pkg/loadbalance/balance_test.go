package loadbalance_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	lb "github.com/cairnfs/cairn/pkg/loadbalance"
)

// generators are the synthetic namespaces with the most exception entries
// each may need on n MPs (FalconFS Appendix A: O(n), or one per distinct
// name when there are only O(n) names).
var generators = []struct {
	name       string
	gen        func(files int, seed uint64) *namespace
	maxEntries func(n int) int
}{
	{"uniform", uniformNS, func(int) int { return 0 }},
	{"hot5", hotNS, func(int) int { return 1 }},
	{"linux", linuxNS, func(n int) int { return n }},
	{"few", fewNS, func(n int) int { return 100 }},
	{"dl", dlNS, func(int) int { return 0 }},
}

// TestBalanceNamespaces is FalconFS Table 3 for synthetic namespaces: each
// is balanced from an empty exception table at 16 and 64 MPs with ε = 0.1,
// then shrunk once. Run with -v to print the table of docs/loadbalance.md;
// -long adds 4M files and 256 MPs, -short uses 100k files.
func TestBalanceNamespaces(t *testing.T) {
	sizes, mpCounts := []int{scaled(1_000_000)}, []int{16, 64}
	if *long {
		sizes, mpCounts = append(sizes, 4_000_000), append(mpCounts, 256)
	}
	var rows []outcome
	for _, size := range sizes {
		for _, g := range generators {
			start := time.Now()
			ns := g.gen(size, 42)
			genTime := time.Since(start)
			for _, n := range mpCounts {
				t.Run(fmt.Sprintf("%s/%d/%d", g.name, size, n), func(t *testing.T) {
					start := time.Now()
					o, err := balance(ns, n, lb.Options{})
					if err != nil {
						t.Fatal(err)
					}
					rows = append(rows, o)
					t.Logf("%s (generated in %v, balanced in %v)", o.row(), genTime.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
					// Plan predicts path-walk names as spread exactly evenly;
					// the binomial spread of their records gets 1% tolerance.
					if o.afterMax > o.limit*1.01 {
						t.Errorf("max share %.3f%% after balancing, limit %.3f%%", 100*o.afterMax, 100*o.limit)
					}
					if o.shrunkMax > max(o.afterMax, o.limit) {
						t.Errorf("shrink raised the max share from %.3f%% to %.3f%% (limit %.3f%%)", 100*o.afterMax, 100*o.shrunkMax, 100*o.limit)
					}
					if e := o.pathWalk + o.override; e > g.maxEntries(n) {
						t.Errorf("%d exception entries, want at most %d", e, g.maxEntries(n))
					}
				})
			}
		}
	}
	if testing.Verbose() {
		fmt.Print("\n" + table(rows))
	}
}

// scaled is n, or n/10 with -short.
func scaled(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// A hot name needs a path-walk entry in a small volume; after the volume
// grows sixfold with unique names, Shrink removes the entry and the volume
// stays balanced. Four MPs keep the test small: the hot name's 1,000
// records are 5% of 20k files (limit 27.5%, hashed home 25% + 5%), then
// 0.83% of 120k (shrink margin 1.25%).
func TestShrinkAfterGrowth(t *testing.T) {
	small := hotNS(20_000, 1)
	m, err := newMaster(small, 4, lb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.converge(); err != nil {
		t.Fatal(err)
	}
	if r, ok := m.tab.Exceptions.Get("__init__.py"); !ok || r.Kind != hybridindex.PathWalk || m.tab.Exceptions.Len() != 1 {
		t.Fatalf("small volume: table %v, want one path-walk entry for __init__.py", m.tab.Exceptions)
	}
	res, err := m.shrink()
	if err != nil || len(res.Changes) != 0 {
		t.Fatalf("shrink of the small volume: %v, %v; the entry is still needed", res.Changes, err)
	}
	m.setNamespace(merge("grown", small, uniformNS(100_000, 2)))
	if rounds, _, err := m.converge(); err != nil || rounds != 0 {
		t.Fatalf("grown volume: %d rounds, %v; want balanced as is", rounds, err)
	}
	res, err = m.shrink()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 1 || res.Changes[0].Op != lb.Remove || m.tab.Exceptions.Len() != 0 {
		t.Fatalf("shrink of the grown volume: %v, table %v; want the entry removed", res.Changes, m.tab.Exceptions)
	}
	// The default shrink limit is (1 + ε/2) × the mean.
	if hi, _ := shares(m.s.place(), m.s.ns.files()); hi > 1.05/4 {
		t.Errorf("after shrink the max share is %.3f%%, above the shrink limit", 100*hi)
	}
}

// Adding MPs moves slots (hybridindex.Rebalance); the master then
// rebalances the records and shrinks the table, and the volume stays
// balanced throughout the master's loop.
func TestAddMPs(t *testing.T) {
	ns := linuxNS(scaled(1_000_000), 3)
	m, err := newMaster(ns, 16, lb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.converge(); err != nil {
		t.Fatal(err)
	}
	before := m.tab.Exceptions.Len()
	mps := append(m.tab.MPs(), 17, 18, 19, 20)
	slots, moved, err := hybridindex.Rebalance(m.tab.Slots, mps)
	if err != nil {
		t.Fatal(err)
	}
	m.tab.Slots = slots
	m.k = len(mps)
	m.setNamespace(ns)
	rounds, changes, err := m.converge()
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.shrink()
	if err != nil {
		t.Fatal(err)
	}
	hi, lo := shares(m.s.place(), ns.files())
	t.Logf("16 -> 20 MPs: %d slots moved; %d entries before, %d rounds with %d changes, %d removed by shrink, %d entries left; max %.2f%%, min %.2f%%",
		len(moved), before, rounds, changes, len(res.Changes), m.tab.Exceptions.Len(), 100*hi, 100*lo)
	if limit := limitShare(m.opts, 20); hi > limit*1.01 {
		t.Errorf("max share %.3f%% after growing to 20 MPs, limit %.3f%%", 100*hi, 100*limit)
	}
}

// BenchmarkPlan measures one Plan call of the master on the statistics of
// an unbalanced Linux-like volume of 1M files (the first round).
func BenchmarkPlan(b *testing.B) {
	ns := linuxNS(1_000_000, 42)
	for _, n := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("mps=%d", n), func(b *testing.B) {
			m, err := newMaster(ns, n, lb.Options{})
			if err != nil {
				b.Fatal(err)
			}
			stats := m.s.stats(m.s.place(), n)
			b.ResetTimer()
			for b.Loop() {
				if _, err := lb.Plan(stats, m.tab, lb.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
