package checker

import (
	"hash/maphash"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// MaxConfigurations bounds the configurations search keeps at once; past
// it a key is undecided, as past its time bound.
const MaxConfigurations = 1 << 18

// config is one way the operations so far may have been ordered: the state
// they leave, which of the pending operations (called, not returned)
// already took effect (lin), and which of those that never return did
// (unk). Both are sorted.
type config struct {
	state    any
	lin, unk []int32
}

// configSet holds configurations, none dominated by another: of two with
// the same state and the same lin, the one whose unk is a subset of the
// other's can do everything the other can (an operation that never
// returns need never take effect), so only it is kept. Without this, every
// subset of a run's Unknown operations would be a configuration of its own.
type configSet struct {
	model porcupine.Model
	seed  maphash.Seed
	byKey map[uint64][]int
	all   []config
	gone  []bool // all[i] was dominated by a later one
	live  int
}

func newConfigSet(m porcupine.Model, seed maphash.Seed) *configSet {
	return &configSet{model: m, seed: seed, byKey: map[uint64][]int{}}
}

func (s *configSet) key(c config) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	var b [8]byte
	put := func(v uint64) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	put(s.model.Hash(c.state))
	for _, id := range c.lin {
		put(uint64(id))
	}
	return h.Sum64()
}

// add adds c unless a configuration there dominates it (or equals it),
// dropping those c dominates; it reports whether c was added.
func (s *configSet) add(c config) bool {
	k := s.key(c)
	same := s.byKey[k][:0:0]
	for _, i := range s.byKey[k] {
		if s.gone[i] {
			continue
		}
		o := s.all[i]
		if !slices.Equal(o.lin, c.lin) || !s.model.Equal(o.state, c.state) {
			same = append(same, i)
			continue
		}
		if subset(o.unk, c.unk) {
			return false
		}
		if subset(c.unk, o.unk) {
			s.gone[i] = true
			s.live--
			continue
		}
		same = append(same, i)
	}
	s.byKey[k] = append(same, len(s.all))
	s.all = append(s.all, c)
	s.gone = append(s.gone, false)
	s.live++
	return true
}

// each calls f for every configuration not dominated.
func (s *configSet) each(f func(c config)) {
	for i, c := range s.all {
		if !s.gone[i] {
			f(c)
		}
	}
}

// subset reports whether sorted a is a subset of sorted b.
func subset(a, b []int32) bool {
	if len(a) > len(b) {
		return false
	}
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			return false
		}
	}
	return true
}

// searchLinearizable decides whether ops are linearizable under model. It
// walks the calls and returns in time order (a call before a return at the
// same time, as porcupine orders them) keeping every configuration the
// operations so far allow; at an operation's return, a configuration in
// which it has not yet taken effect must apply pending operations until it
// has, and the configurations that cannot are dropped. An operation whose
// Return is never stays pending to the end and need not take effect.
//
// readOnly marks operations that never change the state (reads, stats, a
// failure that only says a precondition did not hold). Each is applied the
// first moment a configuration's state allows it: that is always allowed,
// since an operation that changes nothing constrains nothing that follows
// it, and it keeps overlapping reads (a listing's observations, widened by
// the staleness a mount may show) from multiplying the configurations as
// they do porcupine's search, which tries them in every order.
//
// It returns Ok, Illegal with the index of the operation whose return no
// configuration survived, or Unknown when the deadline passed or more than
// MaxConfigurations were needed at once.
//
// class(i), if not nil, is a comparable value equal for operations that
// do the same thing (the same input and outcome). Of pending operations
// that never return and are of one class, only the first not yet applied
// is tried: called and unbounded alike, they are interchangeable, so the
// configurations count how many of a class took effect, not which.
func searchLinearizable(model porcupine.Model, ops []porcupine.Operation, readOnly func(i int) bool, class func(i int) any, deadline time.Time) (porcupine.CheckResult, int) {
	type event struct {
		at   int64
		ret  bool
		op   int32
		call int64
	}
	events := make([]event, 0, 2*len(ops))
	for i, op := range ops {
		events = append(events, event{at: op.Call, op: int32(i)})
		if op.Return != never {
			events = append(events, event{at: op.Return, ret: true, op: int32(i), call: op.Call})
		}
	}
	sort.SliceStable(events, func(a, b int) bool {
		if events[a].at != events[b].at {
			return events[a].at < events[b].at
		}
		return !events[a].ret && events[b].ret
	})
	seed := maphash.MakeSeed()
	var pending []int32 // called, not yet returned (sorted)
	cur := newConfigSet(model, seed)
	cur.add(config{state: model.Init()})

	// settle applies, in c, every pending read-only operation that c's
	// state allows.
	settle := func(c config) config {
		for _, id := range pending {
			if !readOnly(int(id)) || ops[id].Return == never || containsID(c.lin, id) {
				continue // a read that never returns shows nothing
			}
			if ok, _ := model.Step(c.state, ops[id].Input, ops[id].Output); ok {
				c.lin = insertID(c.lin, id)
			}
		}
		return c
	}
	for n, ev := range events {
		if n%256 == 0 && time.Now().After(deadline) {
			return porcupine.Unknown, -1
		}
		if !ev.ret {
			pending = insertID(pending, ev.op)
			if readOnly(int(ev.op)) {
				next := newConfigSet(model, seed)
				cur.each(func(c config) { next.add(settle(c)) })
				cur = next
			}
			continue
		}
		// ev.op returns: every surviving configuration has applied it.
		next := newConfigSet(model, seed)
		var stack []config
		seen := newConfigSet(model, seed)
		cur.each(func(c config) {
			if seen.add(c) {
				stack = append(stack, c)
			}
		})
		for len(stack) > 0 {
			if seen.live > MaxConfigurations || len(seen.all)%1024 == 0 && time.Now().After(deadline) {
				return porcupine.Unknown, -1
			}
			c := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if containsID(c.lin, ev.op) {
				next.add(config{state: c.state, lin: removeID(c.lin, ev.op), unk: c.unk})
				continue
			}
			// Apply one more pending operation, each in turn.
			var tried []any // classes of never-returning ones tried
			for _, id := range pending {
				if containsID(c.lin, id) || containsID(c.unk, id) || readOnly(int(id)) && id != ev.op {
					continue // read-only ones are applied by settle
				}
				if ops[id].Return == never && class != nil {
					k := class(int(id))
					if slices.Contains(tried, k) {
						continue
					}
					tried = append(tried, k)
				}
				ok, state := model.Step(c.state, ops[id].Input, ops[id].Output)
				if !ok {
					continue
				}
				d := config{state: state, lin: c.lin, unk: c.unk}
				if ops[id].Return == never {
					d.unk = insertID(c.unk, id)
				} else {
					d.lin = insertID(c.lin, id)
				}
				d = settle(d)
				if seen.add(d) {
					stack = append(stack, d)
				}
			}
		}
		pending = removeID(pending, ev.op)
		if next.live == 0 {
			return porcupine.Illegal, int(ev.op)
		}
		cur = next
	}
	return porcupine.Ok, -1
}

func containsID(s []int32, id int32) bool {
	_, ok := slices.BinarySearch(s, id)
	return ok
}

// insertID and removeID return a new slice (configurations share theirs).
func insertID(s []int32, id int32) []int32 {
	i, ok := slices.BinarySearch(s, id)
	if ok {
		return s
	}
	out := make([]int32, 0, len(s)+1)
	return append(append(append(out, s[:i]...), id), s[i:]...)
}

func removeID(s []int32, id int32) []int32 {
	i, ok := slices.BinarySearch(s, id)
	if !ok {
		return s
	}
	return slices.Delete(slices.Clone(s), i, i+1)
}
