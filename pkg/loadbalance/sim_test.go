package loadbalance_test

// A simulator of the master's balancing loop: synthetic namespaces are
// placed with hybridindex under the current exception table, each MP's
// statistics are computed from the placement, Plan runs, its changes are
// applied (the records of the changed names move), and so on until Plan has
// nothing to do; then Shrink runs once.

import (
	"cmp"
	"flag"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	lb "github.com/cairnfs/cairn/pkg/loadbalance"
)

var long = flag.Bool("long", false, "simulate namespaces of 4M files and 256 MPs too")

// rng is splitmix64: the namespaces depend only on their seed, on every
// platform and Go version.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	x := uint64(*r)
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// intn is uniform in [0, n) (multiply-shift; the bias is below 2^-40 for
// the n used here).
func (r *rng) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// chance is true with probability num/den.
func (r *rng) chance(num, den int) bool { return r.intn(den) < num }

// namespace is a set of file records grouped by name: the records named
// names[i] are in directories parents[off[i]:off[i+1]].
type namespace struct {
	desc    string
	names   []string
	off     []int
	parents []uint64
}

func (ns *namespace) files() int { return len(ns.parents) }

func (ns *namespace) count(i int) uint64 { return uint64(ns.off[i+1] - ns.off[i]) }

type builder struct {
	names   []string
	shared  map[string]int32
	fname   []int32
	fparent []uint64
	dirs    uint64
}

func newBuilder() *builder { return &builder{shared: map[string]int32{}, dirs: 1} }

// dir returns a new directory's inode number (1 is the root).
func (b *builder) dir() uint64 { b.dirs++; return b.dirs }

// name interns a name that may occur in many directories.
func (b *builder) name(s string) int32 {
	if id, ok := b.shared[s]; ok {
		return id
	}
	id := int32(len(b.names))
	b.names = append(b.names, s)
	b.shared[s] = id
	return id
}

// unique adds a name the caller guarantees occurs once.
func (b *builder) unique(s string) int32 {
	b.names = append(b.names, s)
	return int32(len(b.names) - 1)
}

func (b *builder) file(parent uint64, name int32) {
	b.fparent = append(b.fparent, parent)
	b.fname = append(b.fname, name)
}

// build groups the files by name (a counting sort).
func (b *builder) build(desc string) *namespace {
	ns := &namespace{desc: desc, names: b.names, off: make([]int, len(b.names)+1)}
	for _, n := range b.fname {
		ns.off[n+1]++
	}
	for i := range b.names {
		ns.off[i+1] += ns.off[i]
	}
	ns.parents = make([]uint64, len(b.fparent))
	next := slices.Clone(ns.off[:len(b.names)])
	for i, n := range b.fname {
		ns.parents[next[n]] = b.fparent[i]
		next[n]++
	}
	return ns
}

func randomName(r *rng, buf []byte) string {
	const hexdigits = "0123456789abcdef"
	buf = buf[:0]
	x := r.next()
	for range 16 {
		buf = append(buf, hexdigits[x&15])
		x >>= 4
	}
	return string(buf)
}

// uniformNS: random 16-hex-digit names, 100 files per directory on average.
func uniformNS(files int, seed uint64) *namespace {
	r, b := rng(seed), newBuilder()
	dirs := make([]uint64, max(1, files/100))
	for i := range dirs {
		dirs[i] = b.dir()
	}
	var buf [16]byte
	for range files {
		b.file(dirs[r.intn(len(dirs))], b.unique(randomName(&r, buf[:])))
	}
	return b.build("uniform random names")
}

// hotNS: one name (__init__.py) in 5% of all files, one per directory; the
// other 19 files of each directory have random names.
func hotNS(files int, seed uint64) *namespace {
	r, b := rng(seed), newBuilder()
	hot := b.name("__init__.py")
	var buf [16]byte
	for range max(1, files/20) {
		d := b.dir()
		b.file(d, hot)
		for range 19 {
			b.file(d, b.unique(randomName(&r, buf[:])))
		}
	}
	return b.build("one name in 5% of files")
}

// linuxNS imitates a source tree: directories of 1..31 files (16 on
// average); Makefile in 53% of them, Kconfig in 30%, README in 5%,
// .gitignore in 6% (Linux 6.8: 2,945 Makefiles and 1,690 Kconfigs in
// 88,936 files); the rest drawn from 50,000 .c/.h names with a
// Zipf–Mandelbrot frequency 1/(rank + 40), so the commonest source name is
// in about 0.3% of files, and each name occurs at most once per directory.
func linuxNS(files int, seed uint64) *namespace {
	r, b := rng(seed), newBuilder()
	const vocab = 50000
	cum := make([]uint64, vocab)
	var sum uint64
	for i := range cum {
		sum += (1 << 40) / uint64(i+40)
		cum[i] = sum
	}
	vocabIDs := make([]int32, vocab)
	for i := range vocabIDs {
		vocabIDs[i] = -1
	}
	special := []struct {
		name     string
		num, den int
	}{{"Makefile", 53, 100}, {"Kconfig", 30, 100}, {"README", 5, 100}, {".gitignore", 6, 100}}
	var inDir []int32
	for n := 0; n < files; {
		d := b.dir()
		size := 1 + r.intn(31)
		inDir = inDir[:0]
		for _, s := range special {
			if r.chance(s.num, s.den) {
				inDir = append(inDir, b.name(s.name))
			}
		}
		for tries := 0; len(inDir) < size && tries < 4*size; tries++ {
			u := uint64(r.intn(int(sum)))
			k, _ := slices.BinarySearch(cum, u+1)
			if vocabIDs[k] < 0 {
				ext := ".c"
				if k%5 >= 3 {
					ext = ".h"
				}
				vocabIDs[k] = b.name("src" + strconv.Itoa(k) + ext)
			}
			if !slices.Contains(inDir, vocabIDs[k]) {
				inDir = append(inDir, vocabIDs[k])
			}
		}
		for _, id := range inDir {
			b.file(d, id)
		}
		n += len(inDir)
	}
	return b.build("Linux-source-like tree")
}

// fewNS: 100 distinct names (shards), each present in a directory with its
// own probability between 30% and 100%, so hash variance dominates.
func fewNS(files int, seed uint64) *namespace {
	r, b := rng(seed), newBuilder()
	ids := make([]int32, 100)
	prob := make([]int, 100)
	for i := range ids {
		ids[i] = b.name(fmt.Sprintf("shard-%03d.tfrecord", i))
		prob[i] = 300 + r.intn(701)
	}
	for n := 0; n < files; {
		d := b.dir()
		for i, id := range ids {
			if r.chance(prob[i], 1000) {
				b.file(d, id)
				n++
			}
		}
	}
	return b.build("100 distinct names")
}

// dlNS: an image dataset, 1000 files with unique names per class directory.
func dlNS(files int, _ uint64) *namespace {
	b := newBuilder()
	for class := 0; class*1000 < files; class++ {
		d := b.dir()
		for i := range 1000 {
			b.file(d, b.unique(fmt.Sprintf("n%08d_%d.JPEG", class, i)))
		}
	}
	return b.build("DL dataset (1000 per dir)")
}

// sim places a namespace under a table and reports what the MPs would.
type sim struct {
	ns    *namespace
	tab   *hybridindex.Table
	slot  []int32 // hashed slot of each name
	order []int32 // names by record count, most first
}

func newSim(ns *namespace, tab *hybridindex.Table) *sim {
	s := &sim{ns: ns, tab: tab, slot: make([]int32, len(ns.names)), order: make([]int32, len(ns.names))}
	for i, n := range ns.names {
		s.slot[i] = int32(hybridindex.SlotOf(n, len(tab.Slots)))
		s.order[i] = int32(i)
	}
	slices.SortStableFunc(s.order, func(a, b int32) int { return cmp.Compare(ns.count(int(b)), ns.count(int(a))) })
	return s
}

// placement counts records per MP and, per exception name, per MP.
type placement struct {
	load map[uint64]uint64
	exc  map[string]map[uint64]uint64
}

func (s *sim) place() placement {
	p := placement{load: map[uint64]uint64{}, exc: map[string]map[uint64]uint64{}}
	for _, mp := range s.tab.Slots {
		p.load[mp] += 0
	}
	for i, name := range s.ns.names {
		r, ok := s.tab.Exceptions.Get(name)
		if !ok {
			p.load[s.tab.Slots[s.slot[i]]] += s.ns.count(i)
			continue
		}
		per := map[uint64]uint64{}
		if r.Kind == hybridindex.Override {
			per[r.MP] = s.ns.count(i)
		} else {
			for _, parent := range s.ns.parents[s.ns.off[i]:s.ns.off[i+1]] {
				mp, _ := s.tab.Route(parent, name)
				per[mp]++
			}
		}
		for mp, n := range per {
			p.load[mp] += n
		}
		p.exc[name] = per
	}
	return p
}

// stats is what each MP reports: record count, top-k hashed names, counts
// of every exception name.
func (s *sim) stats(p placement, k int) []lb.MPStats {
	mps := s.tab.MPs()
	idx := map[uint64]int{}
	out := make([]lb.MPStats, len(mps))
	for i, mp := range mps {
		idx[mp] = i
		out[i] = lb.MPStats{MP: mp, Inodes: p.load[mp], TableVersion: s.tab.Exceptions.Version()}
	}
	full := 0
	for _, n := range s.order {
		if full == len(mps) {
			break
		}
		name := s.ns.names[n]
		if _, ok := s.tab.Exceptions.Get(name); ok {
			continue
		}
		st := &out[idx[s.tab.Slots[s.slot[n]]]]
		if len(st.Top) < k {
			st.Top = append(st.Top, lb.NameCount{Name: name, Count: s.ns.count(int(n))})
			if len(st.Top) == k {
				full++
			}
		}
	}
	for _, name := range s.tab.Exceptions.Names() {
		for mp, n := range p.exc[name] {
			out[idx[mp]].Exceptions = append(out[idx[mp]].Exceptions, lb.NameCount{Name: name, Count: n})
		}
	}
	return out
}

// shares returns the largest and smallest share of records on one MP.
func shares(p placement, files int) (hi, lo float64) {
	var mx, mn uint64
	first := true
	for _, l := range p.load {
		if first || l > mx {
			mx = l
		}
		if first || l < mn {
			mn = l
		}
		first = false
	}
	return float64(mx) / float64(files), float64(mn) / float64(files)
}

// outcome is one row of the Table 3 analogue.
type outcome struct {
	desc                 string
	files, distinct, mps int
	beforeMax, beforeMin float64
	afterMax, afterMin   float64
	pathWalk, override   int
	twoHop               float64 // share of records under path-walk entries
	rounds, changes      int
	removed              int // by Shrink
	shrunkMax            float64
	limit                float64 // (1+ε)/N
}

func (o outcome) row() string {
	pct := func(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }
	return fmt.Sprintf("| %s | %d | %d | %d | %s | %s | %s | %s | %d | %d | %s | %d | %d |",
		o.desc, o.files, o.distinct, o.mps, pct(o.beforeMax), pct(o.beforeMin),
		pct(o.afterMax), pct(o.afterMin), o.pathWalk, o.override, pct(o.twoHop), o.rounds, o.removed)
}

const tableHeader = "| namespace | files | distinct names | MPs | max before | min before | max after | min after | path-walk entries | override entries | records behind path-walk | rounds | removed by shrink |\n" +
	"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"

func table(rows []outcome) string {
	var b strings.Builder
	b.WriteString(tableHeader + "\n")
	for _, o := range rows {
		b.WriteString(o.row() + "\n")
	}
	return b.String()
}

// maxRounds bounds the master's plan–migrate–report loop.
const maxRounds = 20

// master runs the balancing loop as the master would, over a simulated
// volume whose records move as soon as the table changes.
type master struct {
	s    *sim
	tab  *hybridindex.Table
	opts lb.Options
	k    int // top-k reported by each MP
}

func newMaster(ns *namespace, nMPs int, opts lb.Options) (*master, error) {
	ids := make([]uint64, nMPs)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	slots, err := hybridindex.NewSlots(ids, 4096)
	if err != nil {
		return nil, err
	}
	tab := &hybridindex.Table{Slots: slots, Exceptions: hybridindex.NewExceptionTable()}
	return &master{s: newSim(ns, tab), tab: tab, opts: opts, k: nMPs}, nil
}

// setNamespace replaces the simulated namespace (the volume grew).
func (m *master) setNamespace(ns *namespace) { m.s = newSim(ns, m.tab) }

// converge plans, applies and re-places until Plan has nothing to do.
// It returns the rounds and changes made.
func (m *master) converge() (rounds, changes int, err error) {
	for rounds < maxRounds {
		res, err := lb.Plan(m.s.stats(m.s.place(), m.k), m.tab, m.opts)
		if err != nil {
			return rounds, changes, fmt.Errorf("round %d: %w", rounds, err)
		}
		if len(res.Changes) == 0 {
			break
		}
		if err := lb.Apply(m.tab.Exceptions, res.Changes); err != nil {
			return rounds, changes, err
		}
		rounds++
		changes += len(res.Changes)
	}
	return rounds, changes, nil
}

// shrink runs Shrink once and applies it.
func (m *master) shrink() (lb.Result, error) {
	res, err := lb.Shrink(m.s.stats(m.s.place(), m.k), m.tab, m.opts)
	if err != nil {
		return res, fmt.Errorf("shrink: %w", err)
	}
	return res, lb.Apply(m.tab.Exceptions, res.Changes)
}

// twoHop is the share of records whose name has a path-walk entry.
func (m *master) twoHop() float64 {
	var n uint64
	for i, name := range m.s.ns.names {
		if r, ok := m.tab.Exceptions.Get(name); ok && r.Kind == hybridindex.PathWalk {
			n += m.s.ns.count(i)
		}
	}
	return float64(n) / float64(m.s.ns.files())
}

func limitShare(opts lb.Options, nMPs int) float64 {
	eps := opts.Epsilon
	if eps == 0 {
		eps = 0.1
	}
	return (1 + eps) / float64(nMPs)
}

// balance runs the master's loop from an empty exception table on nMPs
// MPs, then one Shrink.
func balance(ns *namespace, nMPs int, opts lb.Options) (outcome, error) {
	m, err := newMaster(ns, nMPs, opts)
	if err != nil {
		return outcome{}, err
	}
	o := outcome{desc: ns.desc, files: ns.files(), distinct: len(ns.names), mps: nMPs, limit: limitShare(opts, nMPs)}
	o.beforeMax, o.beforeMin = shares(m.s.place(), ns.files())
	if o.rounds, o.changes, err = m.converge(); err != nil {
		return o, err
	}
	o.afterMax, o.afterMin = shares(m.s.place(), ns.files())
	o.pathWalk, o.override = countKinds(m.tab.Exceptions)
	o.twoHop = m.twoHop()
	res, err := m.shrink()
	if err != nil {
		return o, err
	}
	o.removed = len(res.Changes)
	o.shrunkMax, _ = shares(m.s.place(), ns.files())
	return o, nil
}

func countKinds(et *hybridindex.ExceptionTable) (pathWalk, override int) {
	for _, n := range et.Names() {
		if r, _ := et.Get(n); r.Kind == hybridindex.PathWalk {
			pathWalk++
		} else {
			override++
		}
	}
	return pathWalk, override
}

// merge returns the union of namespaces; the directories of each keep
// their own inode numbers, offset so that they do not collide.
func merge(desc string, nss ...*namespace) *namespace {
	b := newBuilder()
	var offset uint64
	for _, ns := range nss {
		var maxDir uint64
		for i, name := range ns.names {
			id := b.name(name)
			for _, p := range ns.parents[ns.off[i]:ns.off[i+1]] {
				b.file(p+offset, id)
				maxDir = max(maxDir, p)
			}
		}
		offset += maxDir
	}
	return b.build(desc)
}
