package loadbalance

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/cairnfs/cairn/pkg/hybridindex"
)

// NameCount is a name and a number of records with that name.
type NameCount struct {
	Name  string
	Count uint64
}

// MaxInodesPerMP bounds MPStats.Inodes; it keeps every sum over a volume's
// MPs (at most hybridindex.MaxSlots of them) far from overflowing uint64.
const MaxInodesPerMP = 1 << 40

// MPStats is what one meta partition reports to the master for balancing.
// All counts must be exact or lower bounds taken at one instant (a
// heavy-hitter summary such as Space-Saving reports count − error); an
// overestimate can make the master move more records than predicted.
type MPStats struct {
	// MP is the reporting meta partition's id.
	MP uint64
	// TableVersion is the version of the exception table under which the
	// MP placed its records when it counted them. Plan and Shrink refuse
	// stats of another version: records of changed names may still be
	// migrating, and the counts below would describe neither table.
	TableVersion uint64
	// Inodes is the number of records (one per (parent, name)) the MP holds.
	Inodes uint64
	// Top lists the MP's most frequent names among its hashed records, that
	// is names without an exception-table entry, with their record counts,
	// at least Options.TopK of them when the MP has that many distinct
	// names (FalconFS: k = number of MPs). Any order.
	Top []NameCount
	// Exceptions lists, for every exception-table name of which the MP holds
	// records, how many it holds (names with none may be omitted). This is
	// what lets Shrink predict where the records go when an entry is removed.
	Exceptions []NameCount
}

// Options tune Plan and Shrink. The zero value gives FalconFS's defaults.
type Options struct {
	// Epsilon: the volume is balanced when no MP holds more than (1 + ε) ×
	// the mean number of records. 0 means 0.1.
	Epsilon float64
	// ShrinkEpsilon: Shrink removes an entry only if the MP receiving its
	// records then holds at most (1 + ShrinkEpsilon) × the mean. 0 means
	// Epsilon/2; above Epsilon is invalid. The margin below Epsilon is
	// hysteresis: an entry removed right at the limit would be re-added
	// after a few creates, and each flap migrates every record of the name
	// twice.
	ShrinkEpsilon float64
	// TopK is how many names of each MP's Top are considered. 0 means the
	// number of MPs.
	TopK int
	// MaxChanges bounds the changes one call returns. 0 means 2 × MPs + 16.
	MaxChanges int
	// Seed orders Shrink's visit of the entries (FalconFS: random order).
	// The order depends only on the seed and the names.
	Seed uint64
}

// Op is the kind of a Change.
type Op uint8

const (
	// SetPathWalk makes Name a path-walk entry (replacing any entry).
	SetPathWalk Op = iota + 1
	// SetOverride makes Name an override entry to MP (replacing any entry).
	SetOverride
	// Remove deletes the entry of Name.
	Remove
)

// String returns "set-path-walk", "set-override", "remove" or "op(N)".
func (o Op) String() string {
	switch o {
	case SetPathWalk:
		return "set-path-walk"
	case SetOverride:
		return "set-override"
	case Remove:
		return "remove"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Change is one exception-table edit. Files is the number of records the
// edit is predicted to move between MPs; From is the MP that loses the most
// of them (the overloaded MP for a Set, the old override target or 0 for a
// removed path-walk entry).
type Change struct {
	Op    Op
	Name  string
	MP    uint64 // target of SetOverride, 0 otherwise
	From  uint64
	Files uint64
}

// String formats the change for logs.
func (c Change) String() string {
	if c.Op == SetOverride {
		return fmt.Sprintf("%v %q -> MP %d (%d records from MP %d)", c.Op, c.Name, c.MP, c.Files, c.From)
	}
	return fmt.Sprintf("%v %q (%d records)", c.Op, c.Name, c.Files)
}

// Load is the number of records on one MP.
type Load struct {
	MP     uint64
	Inodes uint64
}

// Stop says why Plan or Shrink stopped.
type Stop uint8

const (
	// Balanced: Plan reached (or started at) a predicted distribution within the limit.
	Balanced Stop = iota + 1
	// NoCandidate: no name on the most loaded MP can be redirected so that
	// the predicted maximum (or, at equal maximum, the total excess over
	// the limit) goes down. New statistics after migration may offer more.
	NoCandidate
	// MaxChanges: Options.MaxChanges was reached.
	MaxChanges
	// TableFull: the next entry would exceed hybridindex.MaxEntries.
	TableFull
	// Shrunk: Shrink visited every entry.
	Shrunk
)

// String returns the stop reason in words.
func (s Stop) String() string {
	switch s {
	case Balanced:
		return "balanced"
	case NoCandidate:
		return "no candidate"
	case MaxChanges:
		return "max changes"
	case TableFull:
		return "table full"
	case Shrunk:
		return "shrunk"
	}
	return fmt.Sprintf("stop(%d)", uint8(s))
}

// Result is the outcome of Plan or Shrink: changes to apply in order, and
// the per-MP record counts before them (as reported) and after them (as
// predicted), both in increasing MP order.
type Result struct {
	Changes []Change
	Before  []Load
	After   []Load
	// Limit is the largest record count an MP may hold and be balanced:
	// ⌊(1 + ε) × total / MPs⌋, with ε = Options.Epsilon for Plan and
	// Options.ShrinkEpsilon for Shrink.
	Limit uint64
	// Balanced reports whether every predicted count in After is ≤ Limit.
	Balanced bool
	// Stop says why the search ended. Plan may have searched past the
	// changes it returns (see Plan).
	Stop Stop
}

// ErrBadStats is wrapped by the errors of Plan and Shrink for statistics
// that are inconsistent with each other or with the table.
var ErrBadStats = errors.New("inconsistent MP statistics")

// ErrStaleStats is wrapped by the errors of Plan and Shrink when an MP
// reports counts taken under another exception-table version. The master
// should wait for fresh statistics (migration may still be running).
var ErrStaleStats = errors.New("MP statistics from another exception-table version")

// ErrBadOptions is wrapped by the errors of Plan and Shrink for invalid
// options (negative, NaN or infinite values).
var ErrBadOptions = errors.New("invalid load-balance options")

// Plan decides which exception-table entries to add so that no MP holds
// more than (1 + ε) × the mean number of records (FalconFS §4.2.2). It
// repeats: take the most loaded MP (ties: lowest id) and the least loaded
// (ties: lowest id); take the most frequent name on the most loaded MP;
// predict the two MPs' counts with a path-walk entry (the name's records
// spread over all MPs in proportion to the slots they own) and with an
// override to the least loaded MP (all of them move there); keep the
// override if it leaves both MPs within the limit, since it keeps one-hop
// access (FalconFS prefers overrides, Appendix A.1), and otherwise the
// method whose larger count of the two is lower, the override at a tie.
// The change is made only if that larger count is below the most loaded
// MP's current count; otherwise the next name on the same MP is tried. It
// stops when balanced, when no name helps, or after Options.MaxChanges.
//
// Judging a step by the two MPs, as the paper does, lets a path-walk entry
// raise a third MP that the next step then relieves (two hot names on two
// MPs: each path-walk adds to the other's MP). Plan therefore returns the
// prefix of its steps whose predicted distribution is best, by lowest
// maximum and then lowest total excess over the limit: the predicted
// maximum after the returned changes is never above the reported one.
//
// Candidates are the MP's Top names and its override entries (which may be
// overridden elsewhere or turned into path-walk entries). Path-walk entries
// are never changed by Plan; Shrink removes those no longer needed.
//
// Plan is deterministic: the result depends only on the arguments, not on
// the order of stats or of names within them. The predictions assume
// path-walk spreads evenly; the master should apply the changes, migrate,
// collect new statistics and call Plan again until it returns no change.
func Plan(stats []MPStats, table *hybridindex.Table, opts Options) (Result, error) {
	m, err := newModel(stats, table, opts, false)
	if err != nil {
		return Result{}, fmt.Errorf("load balance: plan: %w", err)
	}
	res := Result{Before: m.loads(), Limit: m.limit}
	best, bestLoad, bestLen := m.scoreOf(m.load), slices.Clone(m.load), 0
	for {
		hi, lo := m.extremes()
		if m.load[hi] <= m.limit {
			res.Stop = Balanced
			break
		}
		if len(res.Changes) >= m.maxChanges {
			res.Stop = MaxChanges
			break
		}
		ch, stop := m.step(hi, lo)
		if stop != 0 {
			res.Stop = stop
			break
		}
		res.Changes = append(res.Changes, ch)
		if s := m.scoreOf(m.load); s.less(best) {
			best, bestLoad, bestLen = s, slices.Clone(m.load), len(res.Changes)
		}
	}
	res.Changes = res.Changes[:bestLen:bestLen]
	if bestLen == 0 {
		res.Changes = nil
	}
	m.load = bestLoad
	res.After = m.loads()
	res.Balanced = m.balanced()
	return res, nil
}

// Shrink removes exception-table entries that are no longer needed: it
// visits the path-walk entries in an order given by Options.Seed, removing
// each one whose removal leaves the receiving MP within (1 + ShrinkEpsilon)
// × the mean, then the override entries likewise (FalconFS §4.2.2).
// Removing an entry moves all records of the name to the owner of its
// hashed slot, the only MP that gains records; their per-MP counts come
// from MPStats.Exceptions, so the prediction is exact. Removals are judged
// one after another, each on the counts left by the previous ones. So
// Shrink never puts an MP over the shrink limit, never raises an MP that
// is already over it, and keeps a balanced volume balanced; an entry whose
// records are already home (an override to the hashed owner) is always
// removed.
func Shrink(stats []MPStats, table *hybridindex.Table, opts Options) (Result, error) {
	m, err := newModel(stats, table, opts, true)
	if err != nil {
		return Result{}, fmt.Errorf("load balance: shrink: %w", err)
	}
	res := Result{Before: m.loads(), Limit: m.limit, Stop: Shrunk}
	names := m.table.Exceptions.Names()
	order := make([]uint64, len(names))
	for i, n := range names {
		order[i] = mix(opts.Seed ^ hybridindex.Hash(n))
	}
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(order[a], order[b]), cmp.Compare(names[a], names[b]))
	})
	for _, kind := range []hybridindex.Kind{hybridindex.PathWalk, hybridindex.Override} {
		for _, i := range idx {
			if len(res.Changes) >= m.maxChanges {
				res.Stop = MaxChanges
				break
			}
			name := names[i]
			if r, _ := m.et.Get(name); r.Kind != kind {
				continue
			}
			if ch, ok := m.tryRemove(name); ok {
				res.Changes = append(res.Changes, ch)
			}
		}
	}
	res.After = m.loads()
	res.Balanced = m.balanced()
	return res, nil
}

// Apply applies changes, in order, to et. It stops at the first change that
// fails (unknown op, invalid name or redirect, full table) and returns its
// error; earlier changes stay applied, so a caller that needs all or
// nothing applies to a Clone and keeps it only on success. Changes from
// Plan or Shrink apply cleanly to the table they were computed for.
func Apply(et *hybridindex.ExceptionTable, changes []Change) error {
	for i, c := range changes {
		var err error
		switch c.Op {
		case SetPathWalk:
			err = et.Set(c.Name, hybridindex.Redirect{Kind: hybridindex.PathWalk})
		case SetOverride:
			err = et.Set(c.Name, hybridindex.Redirect{Kind: hybridindex.Override, MP: c.MP})
		case Remove:
			et.Delete(c.Name)
		default:
			err = fmt.Errorf("unknown op %v", c.Op)
		}
		if err != nil {
			return fmt.Errorf("load balance: apply change %d (%v): %w", i, c, err)
		}
	}
	return nil
}

// mix is splitmix64's finalizer: Shrink's order is a pseudo-random
// permutation that depends only on the seed and the names.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// part is a name's record count on the MP with index mp.
type part struct {
	mp int
	n  uint64
}

// model is the master's view of the record distribution: per-MP loads and,
// for every name it may move, where that name's records are.
type model struct {
	mps        []uint64 // sorted ids; indexes below refer to this slice
	index      map[uint64]int
	load       []uint64
	slotShare  []uint64 // slots owned per MP
	slots      uint64
	limit      uint64
	maxChanges int
	table      *hybridindex.Table
	et         *hybridindex.ExceptionTable // the table as changed so far
	where      map[string][]part           // candidate and exception names
	cands      [][]NameCount               // per MP: movable names here, most records first
}

func newModel(stats []MPStats, table *hybridindex.Table, opts Options, shrink bool) (*model, error) {
	if err := table.Validate(); err != nil {
		return nil, err
	}
	eps, err := checkOptions(&opts)
	if err != nil {
		return nil, err
	}
	if shrink {
		eps = opts.ShrinkEpsilon
	}
	if len(stats) == 0 {
		return nil, fmt.Errorf("%w: no statistics", ErrBadStats)
	}
	if len(stats) > hybridindex.MaxSlots {
		return nil, fmt.Errorf("%w: %d MPs, at most %d", ErrBadStats, len(stats), hybridindex.MaxSlots)
	}
	m := &model{
		index: make(map[uint64]int, len(stats)),
		table: table,
		et:    table.Exceptions.Clone(),
		where: make(map[string][]part),
		slots: uint64(len(table.Slots)),
	}
	version := table.Exceptions.Version()
	for _, s := range stats {
		if s.MP == 0 {
			return nil, fmt.Errorf("%w: stats of MP 0", ErrBadStats)
		}
		if _, dup := m.index[s.MP]; dup {
			return nil, fmt.Errorf("%w: MP %d reported twice", ErrBadStats, s.MP)
		}
		if s.TableVersion != version {
			return nil, fmt.Errorf("%w: MP %d counted under version %d, table is at %d", ErrStaleStats, s.MP, s.TableVersion, version)
		}
		if s.Inodes > MaxInodesPerMP {
			return nil, fmt.Errorf("%w: MP %d reports %d records, at most %d", ErrBadStats, s.MP, s.Inodes, uint64(MaxInodesPerMP))
		}
		m.index[s.MP] = 0
		m.mps = append(m.mps, s.MP)
	}
	slices.Sort(m.mps)
	for i, mp := range m.mps {
		m.index[mp] = i
	}
	n := len(m.mps)
	m.load = make([]uint64, n)
	m.slotShare = make([]uint64, n)
	for slot, mp := range table.Slots {
		i, ok := m.index[mp]
		if !ok {
			return nil, fmt.Errorf("%w: MP %d owns slot %d but sent no statistics", ErrBadStats, mp, slot)
		}
		m.slotShare[i]++
	}
	for i, share := range m.slotShare {
		// The slot table defines the volume's MPs; an override to an MP
		// without slots would not pass Table.Validate.
		if share == 0 {
			return nil, fmt.Errorf("%w: MP %d sent statistics but owns no slot", ErrBadStats, m.mps[i])
		}
	}
	topK := opts.TopK
	if topK == 0 {
		topK = n
	}
	m.maxChanges = opts.MaxChanges
	if m.maxChanges == 0 {
		m.maxChanges = 2*n + 16
	}
	var total uint64
	m.cands = make([][]NameCount, n)
	for _, s := range stats {
		i := m.index[s.MP]
		m.load[i] = s.Inodes
		total += s.Inodes
		if err := m.addStats(i, s, topK); err != nil {
			return nil, err
		}
	}
	// Overrides are candidates on their target MP, with the records that
	// are already there.
	for name, parts := range m.where {
		r, _ := m.et.Get(name)
		if r.Kind != hybridindex.Override {
			continue
		}
		t := m.index[r.MP]
		for _, p := range parts {
			if p.mp == t {
				m.cands[t] = append(m.cands[t], NameCount{name, p.n})
			}
		}
	}
	for i := range m.cands {
		slices.SortFunc(m.cands[i], byCountDesc)
	}
	m.limit = limitOf(total, n, eps)
	return m, nil
}

func byCountDesc(a, b NameCount) int {
	return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
}

// limitOf is ⌊(1 + eps) × total / n⌋. The float product has no fused
// multiply-add to differ across architectures; total < 2^56 keeps its
// rounding below one record in practice.
func limitOf(total uint64, n int, eps float64) uint64 {
	l := (1 + eps) * float64(total) / float64(n)
	if l >= float64(math.MaxUint64) {
		return math.MaxUint64
	}
	return uint64(l)
}

func checkOptions(o *Options) (float64, error) {
	for _, e := range []struct {
		name string
		v    float64
	}{{"epsilon", o.Epsilon}, {"shrink epsilon", o.ShrinkEpsilon}} {
		if e.v < 0 || math.IsNaN(e.v) || math.IsInf(e.v, 0) {
			return 0, fmt.Errorf("%w: %s %v", ErrBadOptions, e.name, e.v)
		}
	}
	if o.TopK < 0 || o.MaxChanges < 0 {
		return 0, fmt.Errorf("%w: top-k %d, max changes %d", ErrBadOptions, o.TopK, o.MaxChanges)
	}
	if o.Epsilon == 0 {
		o.Epsilon = 0.1
	}
	if o.ShrinkEpsilon == 0 {
		o.ShrinkEpsilon = o.Epsilon / 2
	}
	if o.ShrinkEpsilon > o.Epsilon {
		return 0, fmt.Errorf("%w: shrink epsilon %v above epsilon %v", ErrBadOptions, o.ShrinkEpsilon, o.Epsilon)
	}
	return o.Epsilon, nil
}

// addStats records one MP's Top and Exceptions, checking them against the
// table and against its record count.
func (m *model) addStats(i int, s MPStats, topK int) error {
	var sum uint64
	seen := make(map[string]bool, len(s.Top)+len(s.Exceptions))
	check := func(nc NameCount, what string) error {
		if err := hybridindex.ValidateName(nc.Name); err != nil {
			return fmt.Errorf("%w: MP %d %s: %w", ErrBadStats, s.MP, what, err)
		}
		if seen[nc.Name] {
			return fmt.Errorf("%w: MP %d reports %q twice", ErrBadStats, s.MP, nc.Name)
		}
		seen[nc.Name] = true
		sum += nc.Count // each count ≤ Inodes is checked through the sum
		if sum < nc.Count || sum > s.Inodes {
			return fmt.Errorf("%w: MP %d: name counts exceed its %d records", ErrBadStats, s.MP, s.Inodes)
		}
		return nil
	}
	top := slices.Clone(s.Top)
	slices.SortFunc(top, byCountDesc)
	for _, nc := range top {
		if err := check(nc, "top name"); err != nil {
			return err
		}
		if _, ok := m.et.Get(nc.Name); ok {
			return fmt.Errorf("%w: MP %d reports %q as hashed, but it has an exception entry", ErrBadStats, s.MP, nc.Name)
		}
	}
	for _, nc := range top[:min(topK, len(top))] {
		if nc.Count > 0 {
			m.cands[i] = append(m.cands[i], nc)
			m.where[nc.Name] = append(m.where[nc.Name], part{i, nc.Count})
		}
	}
	for _, nc := range s.Exceptions {
		if err := check(nc, "exception name"); err != nil {
			return err
		}
		if _, ok := m.et.Get(nc.Name); !ok {
			return fmt.Errorf("%w: MP %d reports exception counts for %q, which has no entry", ErrBadStats, s.MP, nc.Name)
		}
		if nc.Count > 0 {
			m.where[nc.Name] = append(m.where[nc.Name], part{i, nc.Count})
		}
	}
	return nil
}

func (m *model) loads() []Load {
	out := make([]Load, len(m.mps))
	for i, mp := range m.mps {
		out[i] = Load{mp, m.load[i]}
	}
	return out
}

func (m *model) balanced() bool {
	return slices.Max(m.load) <= m.limit
}

// extremes returns the indexes of the most and least loaded MPs, the lowest
// index among equals.
func (m *model) extremes() (hi, lo int) {
	for i, l := range m.load {
		if l > m.load[hi] {
			hi = i
		}
		if l < m.load[lo] {
			lo = i
		}
	}
	return hi, lo
}

// score orders distributions: lower maximum first, then lower total excess
// over the limit.
type score struct{ max, excess uint64 }

func (a score) less(b score) bool {
	return a.max < b.max || (a.max == b.max && a.excess < b.excess)
}

func (m *model) scoreOf(load []uint64) score {
	var s score
	for _, l := range load {
		s.max = max(s.max, l)
		if l > m.limit {
			s.excess += l - m.limit
		}
	}
	return s
}

// total returns a name's records over all MPs.
func total(parts []part) uint64 {
	var t uint64
	for _, p := range parts {
		t += p.n
	}
	return t
}

// spread is the path-walk prediction: n records over the MPs in proportion
// to the slots each owns, the remainder one each to the first MPs with slots.
func (m *model) spread(n uint64) []part {
	var out []part
	var given uint64
	for i, s := range m.slotShare {
		if s == 0 {
			continue
		}
		hi, lo := bits.Mul64(n, s)
		q, _ := bits.Div64(hi, lo, m.slots) // hi < slots since s ≤ slots
		out = append(out, part{i, q})
		given += q
	}
	for j := range out {
		if given == n {
			break
		}
		out[j].n++
		given++
	}
	return out
}

// moved returns the loads after a name's records move from parts old to
// parts new, in a fresh slice.
func (m *model) moved(old, new []part) []uint64 {
	load := slices.Clone(m.load)
	for _, p := range old {
		load[p.mp] -= p.n
	}
	for _, p := range new {
		load[p.mp] += p.n
	}
	return load
}

// step makes the first change, in the order Plan documents, that brings
// both the most and the least loaded MP below the most loaded one's
// current count, or returns why there is none.
func (m *model) step(hi, lo int) (Change, Stop) {
	for _, c := range m.cands[hi] {
		old := m.where[c.Name]
		n := total(old)
		if _, exists := m.et.Get(c.Name); !exists && m.et.Len() >= hybridindex.MaxEntries {
			return Change{}, TableFull
		}
		pw := m.spread(n)
		best := Change{Op: SetPathWalk, Name: c.Name, From: m.mps[hi], Files: n - partOn(pw, hi)}
		bestParts, bestLoad := pw, m.moved(old, pw)
		if lo != hi {
			ov := []part{{lo, n}}
			ovLoad := m.moved(old, ov)
			if fits := max(ovLoad[hi], ovLoad[lo]) <= m.limit; fits || max(ovLoad[hi], ovLoad[lo]) <= max(bestLoad[hi], bestLoad[lo]) {
				best = Change{Op: SetOverride, Name: c.Name, MP: m.mps[lo], From: m.mps[hi], Files: n - partOn(old, lo)}
				bestParts, bestLoad = ov, ovLoad
			}
		}
		if max(bestLoad[hi], bestLoad[lo]) >= m.load[hi] {
			continue
		}
		m.commit(best, old, bestParts, bestLoad)
		return best, 0
	}
	return Change{}, NoCandidate
}

func partOn(parts []part, i int) uint64 {
	for _, p := range parts {
		if p.mp == i {
			return p.n
		}
	}
	return 0
}

// commit records a change in the model: new loads, the name's new location
// and its candidacy (override entries stay candidates on their target,
// path-walk and removed entries are no longer candidates).
func (m *model) commit(c Change, old, new []part, load []uint64) {
	m.load = load
	for _, p := range old {
		m.cands[p.mp] = slices.DeleteFunc(m.cands[p.mp], func(nc NameCount) bool { return nc.Name == c.Name })
	}
	m.where[c.Name] = new
	switch c.Op {
	case SetPathWalk:
		_ = m.et.Set(c.Name, hybridindex.Redirect{Kind: hybridindex.PathWalk})
	case SetOverride:
		_ = m.et.Set(c.Name, hybridindex.Redirect{Kind: hybridindex.Override, MP: c.MP})
		t := m.index[c.MP]
		nc := NameCount{c.Name, total(new)}
		at, _ := slices.BinarySearchFunc(m.cands[t], nc, byCountDesc)
		m.cands[t] = slices.Insert(m.cands[t], at, nc)
	case Remove:
		m.et.Delete(c.Name)
	}
}

// tryRemove removes name's entry if the owner of the name's hashed slot,
// the only MP that gains records, stays within the limit.
func (m *model) tryRemove(name string) (Change, bool) {
	old := m.where[name]
	n := total(old)
	home := m.index[m.table.Slots[hybridindex.SlotOf(name, len(m.table.Slots))]]
	load := m.moved(old, []part{{home, n}})
	if load[home] > m.load[home] && load[home] > m.limit {
		return Change{}, false
	}
	from := uint64(0)
	if r, _ := m.et.Get(name); r.Kind == hybridindex.Override {
		from = r.MP
	}
	c := Change{Op: Remove, Name: name, From: from, Files: n - partOn(old, home)}
	m.commit(c, old, []part{{home, n}}, load)
	return c, true
}
