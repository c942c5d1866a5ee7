package nsreplica

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cairnfs/cairn/pkg/perm"
)

const sIFDIR = 0o040000

func dirEntry(ino uint64, perm uint32, uid, gid uint32) Entry {
	return Entry{Ino: ino, Mode: sIFDIR | perm, Uid: uid, Gid: gid}
}

func mustPut(t *testing.T, r *Replica, parent uint64, name string, e Entry) {
	t.Helper()
	if !r.Put(parent, name, e, r.Gen()) {
		t.Fatalf("Put(%d, %q) refused with the current generation", parent, name)
	}
}

func TestRecordSize(t *testing.T) {
	if got := unsafe.Sizeof(record{}); got != recordSize {
		t.Fatalf("record is %d bytes, recordSize says %d", got, recordSize)
	}
}

func TestGetPut(t *testing.T) {
	r := New(0)
	root := dirEntry(1, 0o755, 0, 0)
	mustPut(t, r, RootParent, RootName, root)
	a := dirEntry(2, 0o700, 1000, 1000)
	mustPut(t, r, 1, "a", a)

	tests := []struct {
		parent uint64
		name   string
		want   Entry
		ok     bool
	}{
		{0, "", root, true},
		{1, "a", a, true},
		{1, "b", Entry{}, false},
		{2, "a", Entry{}, false}, // same name, other parent
		{1, "A", Entry{}, false},
	}
	for _, tt := range tests {
		got, ok := r.Get(tt.parent, tt.name)
		if ok != tt.ok || got != tt.want {
			t.Errorf("Get(%d, %q) = %+v, %v; want %+v, %v", tt.parent, tt.name, got, ok, tt.want, tt.ok)
		}
	}
	st := r.Stats()
	if st.Entries != 2 || st.Hits != 2 || st.Misses != 3 || st.Puts != 2 {
		t.Errorf("Stats = %+v; want 2 entries, 2 hits, 3 misses, 2 puts", st)
	}
}

func TestPutReplaces(t *testing.T) {
	r := New(0)
	mustPut(t, r, 1, "a", dirEntry(10, 0o755, 0, 0))

	// New attributes for the same directory.
	mustPut(t, r, 1, "a", dirEntry(10, 0o700, 5, 5))
	if e, _ := r.Get(1, "a"); e != dirEntry(10, 0o700, 5, 5) {
		t.Errorf("after update Get = %+v", e)
	}

	// Same name, another directory.
	mustPut(t, r, 1, "a", dirEntry(11, 0o755, 0, 0))
	if e, _ := r.Get(1, "a"); e.Ino != 11 {
		t.Errorf("after replacement Get = %+v", e)
	}
	r.Invalidate(10) // must not touch the new entry
	if _, ok := r.Get(1, "a"); !ok {
		t.Errorf("Invalidate of the replaced inode dropped its successor")
	}

	// Same directory under a new name: the old name goes.
	mustPut(t, r, 2, "b", dirEntry(11, 0o755, 0, 0))
	if _, ok := r.Get(1, "a"); ok {
		t.Errorf("old name of a moved directory is still held")
	}
	if st := r.Stats(); st.Entries != 1 {
		t.Errorf("Entries = %d, want 1", st.Entries)
	}
	r.Invalidate(11)
	if st := r.Stats(); st.Entries != 0 {
		t.Errorf("after Invalidate Entries = %d, want 0", st.Entries)
	}
}

func TestGeneration(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, r *Replica)
		ok     bool
	}{
		{"no change", func(t *testing.T, r *Replica) {}, true},
		{"get and put meanwhile", func(t *testing.T, r *Replica) { r.Get(1, "x"); mustPut(t, r, 1, "y", dirEntry(7, 0o755, 0, 0)) }, true},
		{"invalidate this inode", func(t *testing.T, r *Replica) { r.Invalidate(5) }, false},
		{"invalidate another inode", func(t *testing.T, r *Replica) { r.Invalidate(99) }, false},
		{"invalidate an inode not held", func(t *testing.T, r *Replica) { r.Invalidate(12345) }, false},
		{"clear", func(t *testing.T, r *Replica) { r.Clear() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(0)
			mustPut(t, r, 1, "other", dirEntry(99, 0o755, 0, 0))
			gen := r.Gen()
			tt.change(t, r)
			before := r.Stats()
			if got := r.Put(1, "a", dirEntry(5, 0o755, 0, 0), gen); got != tt.ok {
				t.Fatalf("Put with the generation read before %q = %v, want %v", tt.name, got, tt.ok)
			}
			_, held := r.Get(1, "a")
			after := r.Stats()
			if held != tt.ok {
				t.Errorf("entry held = %v after Put returned %v", held, tt.ok)
			}
			if !tt.ok && (after.Refused != before.Refused+1 || after.Puts != before.Puts) {
				t.Errorf("refused Put counted as %+v -> %+v", before, after)
			}
			// A fresh generation is always accepted.
			if !r.Put(1, "a", dirEntry(5, 0o755, 0, 0), r.Gen()) {
				t.Errorf("Put with the current generation refused")
			}
		})
	}
	r := New(0)
	if r.Put(1, "a", dirEntry(5, 0o755, 0, 0), r.Gen()+1) {
		t.Errorf("Put with a future generation accepted")
	}
}

func TestInvalidateAndClear(t *testing.T) {
	r := New(0)
	for i := range 100 {
		mustPut(t, r, uint64(i%7+1), fmt.Sprint("d", i), dirEntry(uint64(100+i), 0o755, 0, 0))
	}
	for i := 0; i < 100; i += 2 {
		r.Invalidate(uint64(100 + i))
	}
	for i := range 100 {
		_, ok := r.Get(uint64(i%7+1), fmt.Sprint("d", i))
		if ok != (i%2 == 1) {
			t.Errorf("d%d held = %v after invalidating the even ones", i, ok)
		}
	}
	st := r.Stats()
	if st.Entries != 50 || st.Invalidations != 50 {
		t.Errorf("Stats = %+v; want 50 entries, 50 invalidations", st)
	}
	gen := r.Gen()
	r.Clear()
	if r.Gen() <= gen {
		t.Errorf("Clear did not increase the generation")
	}
	if st := r.Stats(); st.Entries != 0 || st.Bytes > New(0).Stats().Bytes {
		t.Errorf("after Clear Stats = %+v", st)
	}
	for i := range 100 {
		if _, ok := r.Get(uint64(i%7+1), fmt.Sprint("d", i)); ok {
			t.Fatalf("d%d still held after Clear", i)
		}
	}
	// The replica is usable after Clear.
	mustPut(t, r, 1, "again", dirEntry(5, 0o755, 0, 0))
	if _, ok := r.Get(1, "again"); !ok {
		t.Errorf("Put after Clear not held")
	}
}

func TestEviction(t *testing.T) {
	tests := []struct {
		max, puts int
	}{
		{1, 5},
		{3, 3},
		{3, 4},
		{10, 1000},
		{chunkLen + 1, 3 * chunkLen},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("max%d_puts%d", tt.max, tt.puts), func(t *testing.T) {
			r := New(tt.max)
			for i := range tt.puts {
				mustPut(t, r, 1, fmt.Sprint(i), dirEntry(uint64(10+i), 0o755, 0, 0))
			}
			st := r.Stats()
			wantEntries := min(tt.max, tt.puts)
			if st.Entries != wantEntries || st.Evictions != uint64(tt.puts-wantEntries) {
				t.Fatalf("Stats = %+v; want %d entries, %d evictions", st, wantEntries, tt.puts-wantEntries)
			}
			// The last entry put is never the one evicted for itself.
			if _, ok := r.Get(1, fmt.Sprint(tt.puts-1)); !ok {
				t.Errorf("last Put not held")
			}
			held := 0
			for i := range tt.puts {
				e, ok := r.Get(1, fmt.Sprint(i))
				if ok {
					held++
					if e.Ino != uint64(10+i) {
						t.Errorf("entry %d has inode %d", i, e.Ino)
					}
				}
			}
			if held != wantEntries {
				t.Errorf("%d entries reachable, Stats says %d", held, wantEntries)
			}
			checkInvariants(t, r)
		})
	}
}

// TestRandomOps drives the replica with random operations and compares it
// with a plain map, checking the index tables after every step.
func TestRandomOps(t *testing.T) {
	type key struct {
		parent uint64
		name   string
	}
	rng := rand.New(rand.NewPCG(1, 2))
	r := New(300)
	model := map[key]Entry{}
	modelDrop := func(ino uint64) {
		for k, e := range model {
			if e.Ino == ino {
				delete(model, k)
			}
		}
	}
	for step := range 5000 {
		k := key{uint64(rng.IntN(20)), fmt.Sprint("n", rng.IntN(30))}
		ino := uint64(rng.IntN(400) + 1)
		switch op := rng.IntN(10); {
		case op < 6:
			e := dirEntry(ino, uint32(rng.IntN(0o1000)), 0, 0)
			if !r.Put(k.parent, k.name, e, r.Gen()) {
				t.Fatalf("step %d: Put refused", step)
			}
			modelDrop(ino)
			delete(model, k)
			model[k] = e
		case op < 8:
			r.Invalidate(ino)
			modelDrop(ino)
		default:
			got, ok := r.Get(k.parent, k.name)
			want, inModel := model[k]
			// Eviction may have dropped what the model still has, but
			// anything held must be what was last put.
			if ok && (!inModel || got != want) {
				t.Fatalf("step %d: Get(%v) = %+v, model has %+v, %v", step, k, got, want, inModel)
			}
		}
		// Mirror evictions into the model.
		for k := range model {
			if _, ok := r.Get(k.parent, k.name); !ok {
				delete(model, k)
			}
		}
		if r.Stats().Entries != len(model) {
			t.Fatalf("step %d: %d entries, model has %d", step, r.Stats().Entries, len(model))
		}
		if step%500 == 0 {
			checkInvariants(t, r)
		}
	}
	checkInvariants(t, r)
}

// checkInvariants verifies that every record is reachable through both
// tables and that the tables point at nothing else.
func checkInvariants(t *testing.T, r *Replica) {
	t.Helper()
	r.mu.RLock()
	defer r.mu.RUnlock()
	count := func(tab []uint32) int {
		n := 0
		for _, s := range tab {
			if s != 0 {
				n++
				if int(s&r.idxMask) > r.n {
					t.Fatalf("slot points at record %d of %d", s&r.idxMask-1, r.n)
				}
			}
		}
		return n
	}
	if k, i := count(r.byKey), count(r.byIno); k != r.n || i != r.n {
		t.Fatalf("%d records, %d key slots, %d inode slots", r.n, k, i)
	}
	for idx := range uint32(r.n) {
		rec := r.rec(idx)
		if got, ok := r.findKey(rec.parent, rec.name, r.keyHash(rec.parent, rec.name)); !ok || got != idx {
			t.Fatalf("record %d (%d, %q) found by key at %d, %v", idx, rec.parent, rec.name, got, ok)
		}
		if got, ok := r.findIno(rec.ino); !ok || got != idx {
			t.Fatalf("record %d (inode %d) found by inode at %d, %v", idx, rec.ino, got, ok)
		}
	}
	if need := (r.n + chunkLen - 1) / chunkLen; len(r.chunks) > need+1 {
		t.Fatalf("%d chunks for %d records", len(r.chunks), r.n)
	}
}

func TestWalk(t *testing.T) {
	// Tree:
	//   / (1, 0755 root)
	//   /pub (2, 0755 root)
	//   /pub/x (3, 0755 alice)
	//   /home (4, 0711 root)
	//   /home/alice (5, 0700 alice)
	//   /home/alice/sub (6, 0755 alice)
	//   /grp (7, 0750 root:staff) with /grp/in (8, 0755)
	//   /home/alice/sub/missing is not in the replica.
	const staff = 50
	root := dirEntry(1, 0o755, 0, 0)
	pub := dirEntry(2, 0o755, 0, 0)
	x := dirEntry(3, 0o755, 1000, 1000)
	home := dirEntry(4, 0o711, 0, 0)
	alice := dirEntry(5, 0o700, 1000, 1000)
	sub := dirEntry(6, 0o755, 1000, 1000)
	grp := dirEntry(7, 0o750, 0, staff)
	in := dirEntry(8, 0o755, 0, staff)

	r := New(0)
	for _, p := range []struct {
		parent uint64
		name   string
		e      Entry
	}{
		{1, "pub", pub}, {2, "x", x}, {1, "home", home}, {4, "alice", alice},
		{5, "sub", sub}, {1, "grp", grp}, {7, "in", in},
	} {
		mustPut(t, r, p.parent, p.name, p.e)
	}

	credRoot := perm.Cred{}
	credAlice := perm.Cred{Uid: 1000, Gid: 1000}
	credBob := perm.Cred{Uid: 1001, Gid: 1001}
	credStaff := perm.Cred{Uid: 1002, Gid: 1002, Groups: []uint32{staff}}
	// The root directory itself refuses search to others.
	closedRoot := dirEntry(1, 0o750, 0, 0)

	tests := []struct {
		name      string
		root      Entry
		dirs      []string
		cred      perm.Cred
		stack     []Entry
		next      int
		err       syscall.Errno
		hits, mis uint64
	}{
		{"empty", root, nil, credBob, []Entry{root}, 0, 0, 0, 0},
		{"one hit", root, []string{"pub"}, credBob, []Entry{root, pub}, 1, 0, 1, 0},
		{"all hits", root, []string{"home", "alice", "sub"}, credAlice, []Entry{root, home, alice, sub}, 3, 0, 3, 0},
		{"miss first", root, []string{"nope", "x"}, credBob, []Entry{root}, 0, 0, 0, 1},
		{"miss in the middle", root, []string{"home", "alice", "sub", "missing", "deeper"}, credAlice, []Entry{root, home, alice, sub}, 3, 0, 3, 1},
		{"search-only dir passes", root, []string{"home", "alice"}, credBob, []Entry{root, home, alice}, 2, 0, 2, 0},
		{"EACCES on an intermediate dir", root, []string{"home", "alice", "sub"}, credBob, []Entry{root, home, alice}, 2, syscall.EACCES, 2, 0},
		{"EACCES before a missing entry", root, []string{"home", "alice", "missing"}, credBob, []Entry{root, home, alice}, 2, syscall.EACCES, 2, 0},
		{"EACCES at the root", closedRoot, []string{"pub"}, credBob, []Entry{closedRoot}, 0, syscall.EACCES, 0, 0},
		{"root user passes closed dirs", closedRoot, []string{"home", "alice", "sub"}, credRoot, []Entry{closedRoot, home, alice, sub}, 3, 0, 3, 0},
		{"supplementary group searches", root, []string{"grp", "in"}, credStaff, []Entry{root, grp, in}, 2, 0, 2, 0},
		{"other refused by group-only dir", root, []string{"grp", "in"}, credBob, []Entry{root, grp}, 1, syscall.EACCES, 1, 0},
		{"dotdot pops", root, []string{"pub", "x", "..", "..", "home"}, credBob, []Entry{root, home}, 5, 0, 3, 0},
		{"dotdot at root stays", root, []string{"..", "..", "pub"}, credBob, []Entry{root, pub}, 3, 0, 1, 0},
		{"dotdot needs search permission", root, []string{"home", "alice", ".."}, credBob, []Entry{root, home, alice}, 2, syscall.EACCES, 2, 0},
		{"dotdot then miss", root, []string{"pub", "..", "nope"}, credBob, []Entry{root}, 2, 0, 1, 1},
		{"dot ignored", root, []string{".", "pub", "."}, credBob, []Entry{root, pub}, 3, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.Stats()
			stack, next, err := r.Walk(tt.root, tt.dirs, tt.cred)
			if !slices.Equal(stack, tt.stack) || next != tt.next || err != tt.err {
				t.Errorf("Walk(%q) = %+v, %d, %v; want %+v, %d, %v", tt.dirs, stack, next, err, tt.stack, tt.next, tt.err)
			}
			after := r.Stats()
			if h, m := after.Hits-before.Hits, after.Misses-before.Misses; h != tt.hits || m != tt.mis {
				t.Errorf("Walk counted %d hits, %d misses; want %d, %d", h, m, tt.hits, tt.mis)
			}
		})
	}
}

// TestWalkResume follows the protocol Walk documents: on a miss, fetch, Put
// and walk again.
func TestWalkResume(t *testing.T) {
	owner := map[string]Entry{"a": dirEntry(2, 0o755, 0, 0), "b": dirEntry(3, 0o755, 0, 0), "c": dirEntry(4, 0o755, 0, 0)}
	root := dirEntry(1, 0o755, 0, 0)
	r := New(0)
	dirs := []string{"a", "b", "c"}
	fetches := 0
	for {
		gen := r.Gen()
		stack, next, err := r.Walk(root, dirs, perm.Cred{Uid: 7, Gid: 7})
		if err != 0 {
			t.Fatal(err)
		}
		if next == len(dirs) {
			if got := stack[len(stack)-1].Ino; got != 4 || len(stack) != 4 {
				t.Fatalf("resolved to %+v", stack)
			}
			break
		}
		fetches++
		if !r.Put(stack[len(stack)-1].Ino, dirs[next], owner[dirs[next]], gen) {
			t.Fatal("Put refused")
		}
	}
	if fetches != 3 {
		t.Errorf("%d fetches, want 3", fetches)
	}
}

func TestConcurrent(t *testing.T) {
	r := New(500)
	root := dirEntry(1, 0o755, 0, 0)
	const workers, rounds = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				parent := uint64(rng.IntN(8) + 1)
				name := fmt.Sprint("d", rng.IntN(100))
				ino := uint64(rng.IntN(1000) + 10)
				switch rng.IntN(5) {
				case 0:
					r.Invalidate(ino)
				case 1:
					gen := r.Gen()
					r.Put(parent, name, dirEntry(ino, 0o755, 0, 0), gen)
				case 2:
					r.Walk(root, []string{name, "..", name}, perm.Cred{Uid: 1})
				case 3:
					r.Stats()
				default:
					r.Get(parent, name)
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, r)
	st := r.Stats()
	if st.Entries > 500 {
		t.Errorf("%d entries in a replica of 500", st.Entries)
	}
}

func BenchmarkGet(b *testing.B) {
	r := New(0)
	const n = 100_000
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("n%08d", i)
		r.Put(uint64(i%1000+2), names[i], dirEntry(uint64(i+10_000), 0o755, 0, 0), r.Gen())
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		r.Get(uint64(i%1000+2), names[i])
		i = (i + 1) % n
	}
}

// TestParentOf: a directory's parent and attributes come from its entry
// or from PutDir; an Invalidate of the directory forgets both, a PutDir
// from before it is refused, and Clear forgets everything.
func TestParentOf(t *testing.T) {
	r := New(4)
	mustPut(t, r, 1, "a", dirEntry(2, 0o755, 0, 0))
	if p, ok := r.ParentOf(2); !ok || p != 1 {
		t.Fatalf("ParentOf(2) from its entry = %d, %v", p, ok)
	}
	if e, ok := r.Dir(2); !ok || e != dirEntry(2, 0o755, 0, 0) {
		t.Fatalf("Dir(2) from its entry = %+v, %v", e, ok)
	}
	if _, ok := r.ParentOf(3); ok {
		t.Fatal("ParentOf(3) known before anything said it")
	}
	gen := r.Gen()
	three := dirEntry(3, 0o1777, 7, 8)
	if !r.PutDir(three, 2, gen) {
		t.Fatal("PutDir refused at the current generation")
	}
	if p, ok := r.ParentOf(3); !ok || p != 2 {
		t.Fatalf("ParentOf(3) = %d, %v", p, ok)
	}
	if e, ok := r.Dir(3); !ok || e != three {
		t.Fatalf("Dir(3) = %+v, %v", e, ok)
	}
	r.Invalidate(3) // 3 was renamed
	if _, ok := r.ParentOf(3); ok {
		t.Fatal("ParentOf(3) survived its invalidation")
	}
	if r.PutDir(three, 2, gen) {
		t.Fatal("a PutDir read before the invalidation was stored")
	}
	r.Invalidate(2)
	if _, ok := r.ParentOf(2); ok {
		t.Fatal("ParentOf(2) survived its invalidation")
	}
	for i := uint64(10); i < 20; i++ { // more than max: bounded
		r.PutDir(dirEntry(i, 0o755, 0, 0), 1, r.Gen())
	}
	if n := len(r.byDir); n > 4 {
		t.Fatalf("%d parent pointers held, max 4", n)
	}
	r.Clear()
	if _, ok := r.ParentOf(19); ok {
		t.Fatal("ParentOf survived Clear")
	}
}
