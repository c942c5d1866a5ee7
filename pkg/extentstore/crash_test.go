package extentstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// The crash test runs a random sequence of operations against a store on a
// MemFS and, before every operation that changes the disk (every write,
// sync, truncate, punch, create, remove, rename), takes the state a crash at
// that instant could leave (Crash, in each mode). Each such state is then
// reopened and checked against a model:
//
//   - acked: each extent as of the last commit that returned (Sync, or
//     Overwrite for its extent) - all of it must be there;
//   - inflight: each extent as the commit under way would leave it.
//
// After recovery every extent must be exactly as in acked or as in
// inflight: no acknowledged byte lost, no unacknowledged or torn byte
// visible. Scrub must find no bad block, and the recovered store must accept
// new writes.

// mext is the model of one extent.
type mext struct {
	kind    Kind
	data    []byte // punched ranges are zeros
	files   []span // small files appended
	punched []span
}

type model map[uint64]*mext

func (e *mext) clone() *mext {
	return &mext{
		kind:    e.kind,
		data:    append([]byte(nil), e.data...),
		files:   append([]span(nil), e.files...),
		punched: append([]span(nil), e.punched...),
	}
}

func (m model) clone() model {
	out := make(model, len(m))
	for id, e := range m {
		out[id] = e.clone()
	}
	return out
}

// crashPoint is a crashed disk with what the model allowed at that instant.
type crashPoint struct {
	fs       *diskfs.MemFS
	acked    model
	inflight model  // nil: no commit under way
	maxID    uint64 // the largest extent id handed out before the crash
	what     string
}

type crashRun struct {
	t        *testing.T
	rng      *rand.Rand
	mem      *diskfs.MemFS
	s        *Store
	live     model
	acked    model
	inflight model
	what     string
	points   []crashPoint
	maxID    uint64
	record   bool
	mu       sync.Mutex
	crashRng *rand.Rand
	opt      Options
}

func (r *crashRun) snapshot(op diskfs.Op) {
	if !r.record || op.Kind&diskfs.OpMutating == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, mode := range []diskfs.CrashMode{diskfs.CrashLoseUnsynced, diskfs.CrashKeepPrefix, diskfs.CrashKeepSubset} {
		r.points = append(r.points, crashPoint{
			fs:       r.mem.Crash(mode, r.crashRng),
			acked:    r.acked,
			inflight: r.inflight,
			maxID:    r.maxID,
			what:     fmt.Sprintf("%s, before %v %s@%d+%d, mode %d", r.what, op.Kind, op.Path, op.Off, op.Len, mode),
		})
	}
}

func crashOpts(fs diskfs.FS) Options {
	o := smallOpts(fs)
	o.CompactBytes = 1 << 10 // compact often: crashes during compaction too
	o.SmallExtentBytes = 2 << 10
	o.SyncParallelism = 1 // the same seed gives the same disk operations
	return o
}

// run performs n random operations.
func (r *crashRun) run(n int) {
	t := r.t
	for i := range n {
		r.step(i)
		if t.Failed() {
			return
		}
	}
}

func (r *crashRun) ids(kind Kind) []uint64 {
	var ids []uint64
	for id, e := range r.live {
		if kind == 0 || e.kind == kind {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (r *crashRun) step(i int) {
	t, rng, s := r.t, r.rng, r.s
	switch k := rng.IntN(20); {
	case k < 2 || len(r.live) == 0: // create
		kind := KindLarge
		if rng.IntN(2) == 0 {
			kind = KindSmall
		}
		r.what = fmt.Sprintf("op %d: create %v", i, kind)
		var id uint64
		if kind == KindSmall {
			l, err := s.LeaseSmall(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", r.what, err)
			}
			id = l.Extent()
			l.Release()
		} else {
			var err error
			if id, err = s.NewExtent(kind); err != nil {
				t.Fatalf("%s: %v", r.what, err)
			}
		}
		if r.live[id] == nil {
			r.live[id] = &mext{kind: kind}
		}
		r.maxID = max(r.maxID, id)
	case k < 10: // append
		ids := r.ids(0)
		id := ids[rng.IntN(len(ids))]
		e := r.live[id]
		n := 1 + rng.IntN(1500)
		if e.kind == KindSmall {
			n = 1 + rng.IntN(1024)
		}
		p := randBytes(rng, n)
		r.what = fmt.Sprintf("op %d: append %d bytes to %d at %d", i, n, id, len(e.data))
		if _, err := s.Append(id, int64(len(e.data)), p); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		if e.kind == KindSmall {
			e.files = append(e.files, span{int64(len(e.data)), int64(len(e.data) + n)})
		}
		e.data = append(e.data, p...)
	case k < 11: // a batch of overwrites over one or more extents, some overlapping
		ids := r.ids(0)
		var ops []OverwriteOp
		for range 2 + rng.IntN(5) {
			id := ids[rng.IntN(len(ids))]
			a := r.acked[id]
			if a == nil || len(a.data) == 0 {
				continue
			}
			off := rng.Int64N(int64(len(a.data)))
			n := 1 + rng.Int64N(min(int64(len(a.data))-off, 700))
			if overlapsPunched(r.live[id].punched, off, off+n) {
				continue
			}
			p := randBytes(rng, int(n))
			copy(r.live[id].data[off:], p)
			ops = append(ops, OverwriteOp{ID: id, Off: off, P: p})
		}
		if len(ops) == 0 {
			return
		}
		r.what = fmt.Sprintf("op %d: overwrite batch of %d", i, len(ops))
		r.inflight = r.acked.clone()
		for _, op := range ops {
			r.inflight[op.ID] = r.live[op.ID].clone()
		}
		for k, err := range s.OverwriteBatch(ops) {
			if err != nil {
				t.Fatalf("%s: op %d: %v", r.what, k, err)
			}
		}
		r.acked = r.inflight
		r.inflight = nil
	case k < 12: // overwrite within the committed bytes, not over a hole
		ids := r.ids(0)
		id := ids[rng.IntN(len(ids))]
		a := r.acked[id]
		if a == nil || len(a.data) == 0 {
			return
		}
		off := rng.Int64N(int64(len(a.data)))
		n := 1 + rng.Int64N(min(int64(len(a.data))-off, 2000))
		if overlapsPunched(r.live[id].punched, off, off+n) {
			return
		}
		p := randBytes(rng, int(n))
		r.what = fmt.Sprintf("op %d: overwrite %d at [%d,+%d)", i, id, off, n)
		// The overwrite commits the extent's pending appends too.
		copy(r.live[id].data[off:], p)
		r.inflight = r.acked.clone()
		r.inflight[id] = r.live[id].clone()
		if err := s.Overwrite(id, off, p); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		r.acked = r.inflight
		r.inflight = nil
	case k < 14: // punch a committed small file
		ids := r.ids(KindSmall)
		if len(ids) == 0 {
			return
		}
		id := ids[rng.IntN(len(ids))]
		e, a := r.live[id], r.acked[id]
		if a == nil || len(e.files) == 0 {
			return
		}
		f := e.files[rng.IntN(len(e.files))]
		if f.end > int64(len(a.data)) {
			return
		}
		r.what = fmt.Sprintf("op %d: punch %d [%d,%d)", i, id, f.off, f.end)
		if err := s.PunchSmall(id, f.off, f.end-f.off); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		clear(e.data[f.off:f.end])
		e.punched, _ = addSpan(e.punched, f)
	case k < 15: // delete
		ids := r.ids(0)
		id := ids[rng.IntN(len(ids))]
		r.what = fmt.Sprintf("op %d: delete %d", i, id)
		if err := s.DeleteExtent(id); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		delete(r.live, id)
	default: // sync, or a forced compaction (which is a sync too)
		r.what = fmt.Sprintf("op %d: sync", i)
		sync := s.Sync
		if rng.IntN(4) == 0 {
			r.what = fmt.Sprintf("op %d: compact", i)
			sync = s.Compact
		}
		r.inflight = r.live.clone()
		if err := sync(); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		r.acked = r.inflight
		r.inflight = nil
	}
}

// matches reports whether the store's extent id is exactly e (nil: absent).
func matches(s *Store, id uint64, e *mext) (bool, string) {
	info, err := s.Stat(id)
	if e == nil {
		if err == nil {
			return false, fmt.Sprintf("present (size %d), want absent", info.Size)
		}
		return true, ""
	}
	if err != nil {
		return false, fmt.Sprintf("absent (%v), want size %d", err, len(e.data))
	}
	if info.Kind != e.kind || info.Size != int64(len(e.data)) {
		return false, fmt.Sprintf("%v size %d, want %v size %d", info.Kind, info.Size, e.kind, len(e.data))
	}
	got := make([]byte, info.Size+1)
	n, err := s.ReadAt(id, got, 0)
	if n != len(e.data) || err != io.EOF {
		return false, fmt.Sprintf("read %d bytes, err %v", n, err)
	}
	if !bytes.Equal(got[:n], e.data) {
		return false, "content differs"
	}
	return true, ""
}

// check opens a crashed disk and compares it with the model.
func checkRecovered(t *testing.T, p crashPoint, s *Store) {
	t.Helper()
	ids := map[uint64]bool{}
	for id := range p.acked {
		ids[id] = true
	}
	for id := range p.inflight {
		ids[id] = true
	}
	for _, info := range s.Extents() {
		ids[info.ID] = true
	}
	for id := range ids {
		ok, why := matches(s, id, p.acked[id])
		if !ok && p.inflight != nil {
			var why2 string
			ok, why2 = matches(s, id, p.inflight[id])
			why += "; vs in-flight commit: " + why2
		}
		if !ok {
			t.Fatalf("%s: extent %d: %s", p.what, id, why)
		}
	}
	bad, err := s.Scrub(context.Background(), ScrubOptions{})
	if err != nil || len(bad) > 0 {
		t.Fatalf("%s: scrub after recovery: %v %v", p.what, bad, err)
	}
	// Files are cut to the committed sizes: no stale bytes kept.
	for _, info := range s.Extents() {
		fi, err := p.fs.Stat("/dp/ext-" + strconv.FormatUint(info.ID, 10))
		if err != nil || fi.Size != info.Size {
			t.Fatalf("%s: extent %d of size %d: file %+v, %v", p.what, info.ID, info.Size, fi, err)
		}
	}
}

// checkNoReuse checks that a recovered store never hands out an id it had
// handed out before the crash.
func checkNoReuse(t *testing.T, p crashPoint, s *Store) {
	t.Helper()
	id, err := s.NewExtent(KindLarge)
	if err != nil {
		t.Fatalf("%s: NewExtent after recovery: %v", p.what, err)
	}
	if id <= p.maxID {
		t.Fatalf("%s: NewExtent after recovery returned %d, already handed out (max %d)", p.what, id, p.maxID)
	}
}

func TestCrashAtEveryStep(t *testing.T) {
	seeds, ops := 64, 60
	if testing.Short() {
		seeds = 8
	}
	total := 0
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			r := &crashRun{
				t:        t,
				rng:      rand.New(rand.NewPCG(uint64(seed), 1)),
				crashRng: rand.New(rand.NewPCG(uint64(seed), 2)),
				mem:      diskfs.NewMem(),
				live:     model{},
				acked:    model{},
			}
			r.opt = crashOpts(diskfs.Inject(r.mem, diskfs.InjectorFunc(func(op diskfs.Op) error {
				r.snapshot(op)
				return nil
			})))
			r.s = mustOpen(t, "/dp", r.opt)
			r.record = true
			r.run(ops)
			r.record = false
			if t.Failed() {
				return
			}
			r.s.Close()
			total += len(r.points)
			for i, p := range r.points {
				opt := crashOpts(p.fs)
				s, err := Open("/dp", opt)
				if err != nil {
					t.Fatalf("%s: Open: %v", p.what, err)
				}
				checkRecovered(t, p, s)
				checkNoReuse(t, p, s)
				// The recovered store takes new writes and commits them.
				if infos := s.Extents(); len(infos) > 0 {
					e := infos[i%len(infos)]
					if _, err := s.Append(e.ID, e.Size, []byte("after recovery")); err != nil && !errors.Is(err, ErrExtentFull) {
						t.Fatalf("%s: append after recovery: %v", p.what, err)
					}
				}
				if err := s.Sync(); err != nil {
					t.Fatalf("%s: sync after recovery: %v", p.what, err)
				}
				s.Close()
			}
		})
	}
	t.Logf("%d crash states checked", total)
}

// TestCrashDuringRecovery crashes Open itself at every disk change and
// checks that the next Open still finds the state the first would have.
func TestCrashDuringRecovery(t *testing.T) {
	seeds := 16
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		r := &crashRun{
			t:        t,
			rng:      rand.New(rand.NewPCG(uint64(seed), 3)),
			crashRng: rand.New(rand.NewPCG(uint64(seed), 4)),
			mem:      diskfs.NewMem(),
			live:     model{},
			acked:    model{},
		}
		r.opt = crashOpts(diskfs.Inject(r.mem, diskfs.InjectorFunc(func(op diskfs.Op) error {
			r.snapshot(op)
			return nil
		})))
		r.s = mustOpen(t, "/dp", r.opt)
		r.record = true
		r.run(40)
		r.record = false
		// Crash with everything unsynced kept in part, mid-sequence.
		for _, p := range r.points[len(r.points)/2:] {
			if p.inflight != nil {
				continue
			}
			// Recover on a disk that records its own crash states.
			var states []*diskfs.MemFS
			rng := rand.New(rand.NewPCG(uint64(seed), 5))
			mem := p.fs
			fs := diskfs.Inject(mem, diskfs.InjectorFunc(func(op diskfs.Op) error {
				if op.Kind&diskfs.OpMutating != 0 {
					states = append(states, mem.Crash(diskfs.CrashKeepSubset, rng))
				}
				return nil
			}))
			s, err := Open("/dp", crashOpts(fs))
			if err != nil {
				t.Fatalf("seed %d: %s: Open: %v", seed, p.what, err)
			}
			s.Close()
			for j, st := range states {
				s, err := Open("/dp", crashOpts(st))
				if err != nil {
					t.Fatalf("seed %d: %s: crash %d during Open, reopen: %v", seed, p.what, j, err)
				}
				checkRecovered(t, crashPoint{fs: st, acked: p.acked, what: fmt.Sprintf("seed %d: %s: crash %d during recovery", seed, p.what, j)}, s)
				s.Close()
			}
			break
		}
	}
}

// TestCrashConcurrentGroupCommit: writers append to their own extents and
// Sync concurrently (sharing commit rounds); crashes are taken at random disk
// operations. After recovery each extent holds at least what its writer had
// seen acknowledged at the crash, and only bytes the writer wrote.
func TestCrashConcurrentGroupCommit(t *testing.T) {
	const writers, appends = 4, 40
	mem := diskfs.NewMem()
	type point struct {
		fs    *diskfs.MemFS
		acked [writers]int64
	}
	var (
		mu      sync.Mutex
		points  []point
		acked   [writers]atomic.Int64
		rng     = rand.New(rand.NewPCG(61, 62))
		started bool // the extents' creation is committed
	)
	opt := smallOpts(diskfs.Inject(mem, diskfs.InjectorFunc(func(op diskfs.Op) error {
		if op.Kind&diskfs.OpMutating == 0 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if started && rng.IntN(4) == 0 {
			var p point
			for w := range writers {
				p.acked[w] = acked[w].Load() // before the crash copy: a lower bound
			}
			p.fs = mem.Crash(diskfs.CrashMode(rng.IntN(3)), rng)
			points = append(points, p)
		}
		return nil
	})))
	opt.CompactBytes = 2 << 10
	s := mustOpen(t, "/dp", opt)
	ids := make([]uint64, writers)
	data := make([][]byte, writers)
	for w := range writers {
		ids[w], _ = s.NewExtent(KindLarge)
		data[w] = randBytes(rand.New(rand.NewPCG(uint64(w), 63)), appends*600)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	started = true
	mu.Unlock()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appends {
				if _, err := s.Append(ids[w], int64(i*600), data[w][i*600:(i+1)*600]); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 2 || i == appends-1 {
					if err := s.Sync(); err != nil {
						t.Error(err)
						return
					}
					acked[w].Store(int64((i + 1) * 600))
				}
			}
		}()
	}
	wg.Wait()
	s.Close()
	if len(points) < 20 {
		t.Fatalf("only %d crash points", len(points))
	}
	for i, p := range points {
		s, err := Open("/dp", smallOpts(p.fs))
		if err != nil {
			t.Fatalf("point %d: %v", i, err)
		}
		for w := range writers {
			info, err := s.Stat(ids[w])
			if err != nil {
				t.Fatalf("point %d: writer %d: %v", i, w, err)
			}
			if info.Size < p.acked[w] {
				t.Fatalf("point %d: writer %d: %d bytes after recovery, %d were acknowledged", i, w, info.Size, p.acked[w])
			}
			if got := readAll(t, s, ids[w], 4096); !bytes.Equal(got, data[w][:info.Size]) {
				t.Fatalf("point %d: writer %d: recovered bytes differ from what was written", i, w)
			}
		}
		if bad, _ := s.Scrub(context.Background(), ScrubOptions{}); len(bad) > 0 {
			t.Fatalf("point %d: %+v", i, bad)
		}
		s.Close()
	}
	t.Logf("%d crash points", len(points))
}
