package checker

import (
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnfs/cairn/pkg/history"
)

// nameInput is a name operation as the set-of-names model sees it, its
// result folded in. Names are numbered per directory: a and b index the
// bits of the state.
type nameInput struct {
	kind    history.Kind
	outcome history.Outcome
	a, b    int  // Name, and To for a rename
	strict  bool // a Fail whose errno says the precondition did not hold
	exists  bool // a stat's answer (a listing is one stat per name)
	display string
}

// nameSeed hashes states; any seed will do, equal states hash equally.
var nameSeed = maphash.MakeSeed()

// nameModel is a directory as a set of names, initially empty; its state is
// a bitset in a string (immutable, comparable with ==). The directory must
// be empty when the run starts: the model does not guess what was there.
//
// An Unknown operation (which porcupine returns at infinity, see never)
// always steps, and takes effect if its precondition holds. That covers
// every way it may have gone: it happened (where porcupine places it), it
// failed for want of its precondition (a failed create, unlink or rename
// changes nothing, as the model's step does when the precondition does not
// hold), or it never happened (porcupine may place it after every other
// operation, where nothing observes its effect). A Fail with the errno of
// the precondition (EEXIST for create, ENOENT for unlink and rename; or
// none recorded) says the precondition did not hold; a Fail with another
// errno (EIO, ENOSPC) only says nothing changed.
var nameModel = porcupine.Model{
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(string), input.(nameInput)
		switch in.kind {
		case history.Create:
			switch in.outcome {
			case history.OK:
				return !hasName(s, in.a), withName(s, in.a, true)
			case history.Fail:
				return !in.strict || hasName(s, in.a), s
			}
			return true, withName(s, in.a, true)
		case history.Unlink:
			switch in.outcome {
			case history.OK:
				return hasName(s, in.a), withName(s, in.a, false)
			case history.Fail:
				return !in.strict || !hasName(s, in.a), s
			}
			return true, withName(s, in.a, false)
		case history.Rename:
			switch in.outcome {
			case history.OK:
				return hasName(s, in.a), renamed(s, in.a, in.b)
			case history.Fail:
				return !in.strict || !hasName(s, in.a), s
			}
			if !hasName(s, in.a) {
				return true, s
			}
			return true, renamed(s, in.a, in.b)
		}
		return hasName(s, in.a) == in.exists, s // Stat
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	Hash:  func(s any) uint64 { return maphash.String(nameSeed, s.(string)) },
	DescribeOperation: func(input, _ any) string {
		return input.(nameInput).display
	},
}

func hasName(s string, i int) bool { return s[i/8]&(1<<(i%8)) != 0 }

func withName(s string, i int, on bool) string {
	if hasName(s, i) == on {
		return s
	}
	b := []byte(s)
	b[i/8] ^= 1 << (i % 8)
	return string(b)
}

// renamed moves a to b, replacing b; renaming a name to itself changes
// nothing, as rename(2) does.
func renamed(s string, a, b int) string {
	if a == b {
		return s
	}
	return withName(withName(s, a, false), b, true)
}

// checkNames checks the name operations of one directory, ops in start
// order, for linearizability against nameModel. A stat or list that did not
// return an answer shows nothing and is left out, but a stat that failed
// with ENOENT is taken as the answer "absent".
//
// An observation (a stat, each name of a listing, a failure that says a
// name was or was not there) may see the directory as it was up to
// staleness before it began: it is checked as if it began that much
// earlier.
func checkNames(key string, ops []history.Op, timeout, staleness time.Duration) keyResult {
	c := newCollector()
	index := map[string]int{}
	intern := func(n string) int {
		i, ok := index[n]
		if !ok {
			i = len(index)
			index[n] = i
		}
		return i
	}
	// Every name first, so that a listing can speak of each.
	for _, op := range ops {
		for _, n := range append([]string{op.Name, op.To}, op.Names...) {
			if n != "" {
				intern(n)
			}
		}
	}
	var lin []history.Op
	var inputs []nameInput
	for _, op := range ops {
		in := nameInput{kind: op.Kind, outcome: op.Outcome, display: op.String()}
		switch op.Kind {
		case history.Create, history.Unlink, history.Rename:
			in.a = intern(op.Name)
			if op.Kind == history.Rename {
				in.b = intern(op.To)
			}
			if op.Outcome == history.Fail {
				want := "ENOENT"
				if op.Kind == history.Create {
					want = "EEXIST"
				}
				in.strict = op.Errno == "" || op.Errno == want
			}
		case history.Stat:
			in.a = intern(op.Name)
			switch {
			case op.Outcome == history.OK:
				in.exists = op.Value == 1
			case op.Outcome == history.Fail && op.Errno == "ENOENT":
				in.outcome = history.OK
			default:
				continue
			}
		case history.List:
			if op.Outcome != history.OK {
				continue
			}
			sorted := slices.Clone(op.Names)
			slices.Sort(sorted)
			if i := dupAt(sorted); i >= 0 {
				c.add(NamesNotLinearizable, key, fmt.Sprintf("a listing at %d names %q twice", op.Start, sorted[i]), op)
				continue
			}
			// A listing is not a snapshot: readdir(3) may or may not
			// show an entry added or removed while it runs (POSIX), and
			// a directory's entries are spread over partitions read one
			// after another. So each name's presence in it is one
			// observation, at its own moment within the listing.
			for _, n := range slices.Sorted(maps.Keys(index)) {
				i := index[n]
				st := op
				st.Start = max(0, st.Start-int64(staleness))
				st.Kind, st.Name, st.Names, st.Value = history.Stat, n, nil, 0
				if slices.Contains(sorted, n) {
					st.Value = 1
				}
				lin = append(lin, st)
				inputs = append(inputs, nameInput{kind: history.Stat, outcome: history.OK, a: i, exists: st.Value == 1,
					display: fmt.Sprintf("%s (%q in it: %v)", op, n, st.Value == 1)})
			}
			continue
		}
		if op.Kind == history.Stat || in.strict {
			op.Start = max(0, op.Start-int64(staleness))
		}
		lin = append(lin, op)
		inputs = append(inputs, in)
	}
	empty := string(make([]byte, (len(index)+7)/8))
	model := nameModel
	model.Init = func() any { return empty }
	res := keyResult{}
	readOnly := func(i int) bool {
		in := inputs[i]
		return in.kind == history.Stat || in.outcome == history.Fail
	}
	class := func(i int) any {
		in := inputs[i]
		in.display = ""
		return in
	}
	verdict, stuck, shown := linearize(model, lin, nil, func(i int) any { return inputs[i] }, readOnly, class, timeout, func(s, o history.Op) int {
		if touches(o, s.Name) || touches(o, s.To) {
			return 1
		}
		return 0
	})
	switch verdict {
	case porcupine.Illegal:
		what := "no order of its name operations explains them"
		if stuck >= 0 {
			what = fmt.Sprintf("no order of its name operations explains %s", lin[stuck])
		}
		c.add(NamesNotLinearizable, key, what, shown...)
	case porcupine.Unknown:
		res.undecided = true
	}
	res.anomalies = c.anomalies()
	return res
}

// touches reports whether o acts on or looks at entry n.
func touches(o history.Op, n string) bool {
	return n != "" && (o.Name == n || o.To == n)
}

// dupAt returns the index of a name that sorted holds twice, or -1.
func dupAt(sorted []string) int {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return i
		}
	}
	return -1
}
