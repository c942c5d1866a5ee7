package multiraft

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// span renders the cached run as "first..last@terms" for table checks.
func span(c *entryCache) string {
	if len(c.ents) == 0 {
		return "empty"
	}
	s := fmt.Sprintf("%d..%d@", c.first(), c.last())
	for _, e := range c.ents {
		s += fmt.Sprint(e.GetTerm())
	}
	return s
}

func TestEntryCacheOps(t *testing.T) {
	one := proto.Size(ents(1, 1, 1)[0]) // every test entry has the same size
	tests := []struct {
		name     string
		maxBytes int
		ops      func(c *entryCache)
		want     string
	}{
		{"append", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 7)); c.append(ents(1, 8, 9)) }, "5..9@11111"},
		{"conflicting tail replaced", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.append(ents(2, 7, 7)) }, "5..7@112"},
		{"overwrite from first", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.append(ents(2, 5, 6)) }, "5..6@22"},
		{"before first resets", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.append(ents(2, 3, 4)) }, "3..4@22"},
		{"gap resets", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.append(ents(2, 12, 13)) }, "12..13@22"},
		{"bounded keeps newest", 3 * one, func(c *entryCache) { c.append(ents(1, 1, 10)) }, "8..10@111"},
		{"newest kept over bound", 1, func(c *entryCache) { c.append(ents(1, 1, 3)) }, "3..3@1"},
		{"disabled", 0, func(c *entryCache) { c.append(ents(1, 1, 3)) }, "empty"},
		{"compact inside", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.compactTo(6) }, "7..9@111"},
		{"compact below", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.compactTo(3) }, "5..9@11111"},
		{"compact all", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.compactTo(9) }, "empty"},
		{"append after compact", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.compactTo(8); c.append(ents(1, 10, 10)) }, "9..10@11"},
		{"clear", 1 << 20, func(c *entryCache) { c.append(ents(1, 5, 9)); c.clear(); c.append(ents(3, 20, 20)) }, "20..20@3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newEntryCache(tc.maxBytes)
			tc.ops(c)
			if got := span(c); got != tc.want {
				t.Fatalf("cache %s, want %s", got, tc.want)
			}
			sum := 0
			for _, n := range c.sizes {
				sum += n
			}
			if sum != c.bytes || len(c.sizes) != len(c.ents) {
				t.Fatalf("accounting: bytes %d, sizes sum %d, %d sizes for %d entries", c.bytes, sum, len(c.sizes), len(c.ents))
			}
		})
	}
}

func TestEntryCacheGet(t *testing.T) {
	c := newEntryCache(1 << 20)
	c.append(ents(4, 10, 19))
	one := uint64(proto.Size(ents(4, 1, 1)[0]))
	tests := []struct {
		lo, hi, maxSize uint64
		n               int
		ok              bool
	}{
		{10, 20, 1 << 30, 10, true},
		{12, 15, 1 << 30, 3, true},
		{12, 15, 1, 1, true},         // at least one entry
		{12, 15, 2 * one, 2, true},   // the size limit is inclusive
		{12, 15, 2*one + 1, 2, true}, // and stops before the entry that passes it
		{9, 15, 1 << 30, 0, false},   // starts before the cache
		{15, 21, 1 << 30, 0, false},  // ends after it
		{15, 15, 1 << 30, 0, false},  // empty range: storage answers it
	}
	for _, tc := range tests {
		es, ok := c.get(tc.lo, tc.hi, tc.maxSize)
		if ok != tc.ok || len(es) != tc.n {
			t.Errorf("get(%d, %d, %d): %d entries, %v; want %d, %v", tc.lo, tc.hi, tc.maxSize, len(es), ok, tc.n, tc.ok)
			continue
		}
		for i, e := range es {
			if e.GetIndex() != tc.lo+uint64(i) {
				t.Errorf("get(%d, %d): entry %d has index %d", tc.lo, tc.hi, i, e.GetIndex())
			}
		}
	}
	if tm, ok := c.term(19); !ok || tm != 4 {
		t.Fatalf("term(19) = %d, %v", tm, ok)
	}
	if _, ok := c.term(20); ok {
		t.Fatal("term(20) found past the cache")
	}
}

// Storage answers the same from its cache as from Pebble alone, through a
// random history of appends, conflicting tails, snapshots, and rounds whose
// batch failed (dropped, never committed).
func TestStorageCacheMatchesDB(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			db := memDB(t)
			st, _, err := loadStorage(db, 3)
			if err != nil {
				t.Fatal(err)
			}
			st.cache.maxBytes = 1 + rng.IntN(40)*proto.Size(ents(1, 1, 1)[0])
			term := uint64(1)
			meta := &raftpb.SnapshotMetadata{Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}
			stage(t, db, st, func(b *pebble.Batch) error { return st.stageSnapshot(b, meta, []byte("s"), true) })
			// A commit index at the snapshot keeps the log loadable.
			hard := func(b *pebble.Batch) error {
				return st.stageHardState(b, &raftpb.HardState{Term: proto.Uint64(term), Commit: proto.Uint64(st.next().snap.GetIndex())})
			}
			for step := 0; step < 200; step++ {
				first, last := st.cur.snap.GetIndex()+1, st.cur.lastIndex
				b := db.NewBatch()
				var err error
				switch r := rng.IntN(10); {
				case r < 6: // append, sometimes over a conflicting tail
					from := last + 1
					if r == 0 && last >= first {
						from = first + uint64(rng.IntN(int(last-first+1)))
						term++
					}
					err = st.stageEntries(b, ents(term, from, from+uint64(rng.IntN(8))))
				case r < 8 && last > first: // compact part of the log
					idx := first + uint64(rng.IntN(int(last-first)))
					m := &raftpb.SnapshotMetadata{Index: proto.Uint64(idx), Term: proto.Uint64(term), ConfState: meta.GetConfState()}
					err = st.stageSnapshot(b, m, []byte("s"), false)
				case r == 8: // a snapshot from the leader replaces the log
					idx := last + uint64(rng.IntN(5)) + 1
					term++
					m := &raftpb.SnapshotMetadata{Index: proto.Uint64(idx), Term: proto.Uint64(term), ConfState: meta.GetConfState()}
					err = st.stageSnapshot(b, m, []byte("s"), true)
				default: // a round whose batch is lost
					_ = st.stageEntries(b, ents(term+100, last+1, last+3))
					st.dropStaged()
					b.Close()
					continue
				}
				if err == nil {
					err = hard(b)
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if err := b.Commit(pebble.NoSync); err != nil {
					t.Fatal(err)
				}
				b.Close()
				st.commitStaged()
				compareStorage(t, step, st, db)
			}
		})
	}
}

// compareStorage checks every Entries and Term answer of st against a
// storage freshly loaded from db, whose cache is empty.
func compareStorage(t *testing.T, step int, st *storage, db *pebble.DB) {
	t.Helper()
	ref, _, err := loadStorage(db, st.group)
	if err != nil {
		t.Fatal(err)
	}
	first, last := ref.cur.snap.GetIndex()+1, ref.cur.lastIndex
	if st.cur.lastIndex != last || st.cur.snap.GetIndex()+1 != first {
		t.Fatalf("step %d: log [%d, %d], DB has [%d, %d]", step, st.cur.snap.GetIndex()+1, st.cur.lastIndex, first, last)
	}
	if len(st.cache.ents) > 0 && (st.cache.first() < first || st.cache.last() != last) {
		t.Fatalf("step %d: cache %s outside the log [%d, %d]", step, span(st.cache), first, last)
	}
	for i := first; i <= last; i++ {
		a, errA := st.Term(i)
		b, errB := ref.Term(i)
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("step %d: term(%d) %d %v, DB %d %v", step, i, a, errA, b, errB)
		}
		es, errA := st.Entries(i, last+1, 1<<30)
		want, errB := ref.Entries(i, last+1, 1<<30)
		if (errA == nil) != (errB == nil) || len(es) != len(want) {
			t.Fatalf("step %d: entries from %d: %d %v, DB %d %v", step, i, len(es), errA, len(want), errB)
		}
		for k := range es {
			if !proto.Equal(es[k], want[k]) {
				t.Fatalf("step %d: entry %d is %v, DB has %v", step, es[k].GetIndex(), es[k], want[k])
			}
		}
	}
}
