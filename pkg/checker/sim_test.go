package checker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/history"
)

// simConfig shapes a simulated run.
type simConfig struct {
	seed                uint64
	procs, ops          int
	regs, files, dirs   int
	unknown, failWrites float64 // probability of an Unknown outcome, of a failed write or append
}

// simulate runs a correct, linearizable system: every operation takes effect
// at one instant, chosen at random within its interval (an Unknown one
// within its interval or up to 200 after it, when its worker no longer
// waits, or never), and sees the state of that instant. The processes'
// intervals overlap at random. After all of it, a final read of every
// register and append file and a final listing of every directory.
func simulate(cfg simConfig) []history.Op {
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	type step struct {
		op      history.Op
		at      int64
		happens bool
	}
	var steps []step
	next := uint64(1)
	names := []string{"n0", "n1", "n2", "n3"}
	for p := range cfg.procs {
		var owned []string // append files p is the one appender of
		for f := p; f < cfg.files; f += cfg.procs {
			owned = append(owned, fmt.Sprintf("a%d", f))
		}
		t := rng.Int64N(20)
		for range cfg.ops / cfg.procs {
			op := history.Op{Process: p, Host: fmt.Sprintf("c%d", p%3), Outcome: history.OK}
			switch x := rng.IntN(12); {
			case x < 2:
				op.Kind, op.Key, op.Value = history.Write, fmt.Sprintf("r%d", rng.IntN(cfg.regs)), next
				next++
			case x < 4:
				op.Kind, op.Key = history.Read, fmt.Sprintf("r%d", rng.IntN(cfg.regs))
			case x < 6 && len(owned) > 0:
				op.Kind, op.Key, op.Value = history.Append, owned[rng.IntN(len(owned))], next
				next++
			case x < 7:
				op.Kind, op.Key = history.ReadAppends, fmt.Sprintf("a%d", rng.IntN(cfg.files))
			default:
				op.Kind = []history.Kind{history.Create, history.Unlink, history.Rename, history.Stat, history.List}[rng.IntN(5)]
				op.Key = fmt.Sprintf("d%d", rng.IntN(cfg.dirs))
				if op.Kind != history.List {
					op.Name = names[rng.IntN(len(names))]
				}
				if op.Kind == history.Rename {
					op.To = names[rng.IntN(len(names))]
				}
			}
			op.Start = t + 1 + rng.Int64N(30)
			op.End = op.Start + 1 + rng.Int64N(150)
			t = op.End
			s := step{op: op, at: op.Start + rng.Int64N(op.End-op.Start+1), happens: true}
			switch u := rng.Float64(); {
			case u < cfg.unknown:
				s.op.Outcome, s.op.Errno = history.Unknown, "ETIMEDOUT"
				s.happens = rng.IntN(2) == 0
				s.at = op.Start + rng.Int64N(op.End-op.Start+200)
			case u < cfg.unknown+cfg.failWrites && (op.Kind == history.Write || op.Kind == history.Append):
				s.op.Outcome, s.op.Errno = history.Fail, "ENOSPC"
				s.happens = false
			}
			steps = append(steps, s)
		}
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })

	regs := map[string]uint64{}
	files := map[string][]uint64{}
	dirs := map[string]map[string]bool{}
	var ops []history.Op
	for _, s := range steps {
		op := s.op
		if !s.happens {
			ops = append(ops, op)
			continue
		}
		d := dirs[op.Key]
		if d == nil && op.Kind.IsName() {
			d = map[string]bool{}
			dirs[op.Key] = d
		}
		observe := op.Outcome == history.OK // an Unknown op's result is not recorded
		switch op.Kind {
		case history.Write:
			regs[op.Key] = op.Value
		case history.Read:
			if observe {
				op.Value = regs[op.Key]
			}
		case history.Append:
			files[op.Key] = append(files[op.Key], op.Value)
		case history.ReadAppends:
			if observe {
				op.Values = slices.Clone(files[op.Key])
			}
		case history.Create:
			if d[op.Name] {
				op = simFail(op, "EEXIST")
			} else {
				d[op.Name] = true
			}
		case history.Unlink, history.Rename:
			if !d[op.Name] {
				op = simFail(op, "ENOENT")
			} else if op.Kind == history.Unlink {
				delete(d, op.Name)
			} else {
				delete(d, op.Name)
				d[op.To] = true
			}
		case history.Stat:
			if observe && d[op.Name] {
				op.Value = 1
			}
		case history.List:
			if observe {
				op.Names = sortedNames(d)
			}
		}
		ops = append(ops, op)
	}

	end := int64(0)
	for _, s := range steps {
		end = max(end, s.op.End, s.at)
	}
	var finals []history.Op
	for i := range cfg.regs {
		key := fmt.Sprintf("r%d", i)
		finals = append(finals, history.Op{Kind: history.Read, Key: key, Value: regs[key]})
	}
	for i := range cfg.files {
		key := fmt.Sprintf("a%d", i)
		finals = append(finals, history.Op{Kind: history.ReadAppends, Key: key, Values: slices.Clone(files[key])})
	}
	for i := range cfg.dirs {
		key := fmt.Sprintf("d%d", i)
		finals = append(finals, history.Op{Kind: history.List, Key: key, Names: sortedNames(dirs[key])})
	}
	for i, f := range finals {
		f.Process, f.Host = i%cfg.procs, fmt.Sprintf("c%d", i%cfg.procs%3)
		f.Start = end + 10 + int64(10*i)
		f.End = f.Start + 5
		f.Outcome, f.Final = history.OK, true
		ops = append(ops, f)
	}
	return ops
}

// simFail turns an operation whose precondition did not hold into its
// failure; an Unknown one stays unknown (its worker never learnt).
func simFail(op history.Op, errno string) history.Op {
	if op.Outcome == history.OK {
		op.Outcome, op.Errno = history.Fail, errno
	}
	return op
}

func sortedNames(d map[string]bool) []string {
	var out []string
	for n := range d {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

var simSmall = simConfig{procs: 5, ops: 500, regs: 3, files: 3, dirs: 2, unknown: 0.05, failWrites: 0.03}

// TestRandomValid checks long random histories of a correct system: the
// checker must find nothing in them, whatever the overlaps and the unknown
// operations that did or did not happen.
func TestRandomValid(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unknown float64
		keys    int
	}{
		{"few unknown", 0.05, 3},
		{"many unknown", 0.3, 3},
		{"one key of each", 0.1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(8) {
				cfg := simSmall
				cfg.seed, cfg.unknown = seed, tc.unknown
				cfg.regs, cfg.files, cfg.dirs = tc.keys, tc.keys, min(tc.keys, 2)
				rep := Check(simulate(cfg), Options{Timeout: 20 * time.Second})
				if !rep.Valid() || len(rep.Undecided) > 0 {
					t.Errorf("seed %d: %s", seed, rep)
				}
				if rep.Unknown == 0 || rep.Failed == 0 {
					t.Errorf("seed %d: the history lacks unknown or failed ops: %s", seed, rep)
				}
			}
		})
	}
}

// TestRandomMutated changes one read in a valid random history, in a way
// that no correct system could have produced, and expects exactly the
// anomaly that names it. This is what shows the checker can fail.
func TestRandomMutated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(ops []history.Op) (string, bool) // the key it broke, or false if the history offers no place
		class  Class
	}{
		{"read of an overwritten value", mutateOverwritten, StaleRead},
		{"read of a value not yet written", mutateFuture, StaleRead},
		{"final read of an older value", mutateFinalOlder, LostWrite},
		{"read of a value never written", mutatePhantom, PhantomRead},
		{"final read missing an acknowledged append", mutateDropAppend, LostAppend},
		{"final read with two appends swapped", mutateSwapAppends, ReorderedAppend},
		{"final read with a record twice", mutateDupAppend, DuplicateAppend},
		{"listing with a name never created", mutateGhostName, NamesNotLinearizable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(3) {
				cfg := simSmall
				cfg.seed = seed
				ops := simulate(cfg)
				key, ok := tc.mutate(ops)
				if !ok {
					t.Fatalf("seed %d: no place to mutate", seed)
				}
				rep := Check(ops, Options{Timeout: 20 * time.Second})
				if got, want := found(rep), []string{string(tc.class) + " " + key}; !slices.Equal(got, want) {
					t.Errorf("seed %d: found %q, want %q\n%s", seed, got, want, rep)
				}
			}
		})
	}
}

func isOK(op history.Op, kind history.Kind) bool {
	return op.Kind == kind && op.Outcome == history.OK && !op.Corrupt
}

// mutateOverwritten makes a non-final read return the value of a write W1
// that another acknowledged write W2 followed, both ended before the read.
func mutateOverwritten(ops []history.Op) (string, bool) {
	for i := range ops {
		rd := &ops[i]
		if !isOK(*rd, history.Read) || rd.Final {
			continue
		}
		for _, w1 := range ops {
			if !isOK(w1, history.Write) || w1.Key != rd.Key || w1.Value == rd.Value {
				continue
			}
			for _, w2 := range ops {
				if isOK(w2, history.Write) && w2.Key == rd.Key && w1.End < w2.Start && w2.End < rd.Start {
					rd.Value = w1.Value
					return rd.Key, true
				}
			}
		}
	}
	return "", false
}

// mutateFuture makes a non-final read return the value of a write that
// began after the read ended.
func mutateFuture(ops []history.Op) (string, bool) {
	for i := range ops {
		rd := &ops[i]
		if !isOK(*rd, history.Read) || rd.Final {
			continue
		}
		for _, w := range ops {
			if w.Kind == history.Write && w.Outcome != history.Fail && w.Key == rd.Key && w.Start > rd.End {
				rd.Value = w.Value
				return rd.Key, true
			}
		}
	}
	return "", false
}

// mutateFinalOlder makes a final read return the value of an acknowledged
// write that another acknowledged write followed.
func mutateFinalOlder(ops []history.Op) (string, bool) {
	for i := range ops {
		f := &ops[i]
		if !isOK(*f, history.Read) || !f.Final {
			continue
		}
		for _, w1 := range ops {
			if !isOK(w1, history.Write) || w1.Key != f.Key || w1.Value == f.Value {
				continue
			}
			for _, w2 := range ops {
				if isOK(w2, history.Write) && w2.Key == f.Key && w1.End < w2.Start {
					f.Value = w1.Value
					return f.Key, true
				}
			}
		}
	}
	return "", false
}

func mutatePhantom(ops []history.Op) (string, bool) {
	for i := range ops {
		if isOK(ops[i], history.Read) && !ops[i].Final {
			ops[i].Value = 1 << 60
			return ops[i].Key, true
		}
	}
	return "", false
}

// finalAppends returns the final read of an append file holding at least n
// records, the first n of them acknowledged appends ordered in real time.
func finalAppends(ops []history.Op, n int) *history.Op {
	byValue := map[uint64]history.Op{}
	for _, op := range ops {
		if op.Kind == history.Append {
			byValue[op.Value] = op
		}
	}
	for i := range ops {
		f := &ops[i]
		if !isOK(*f, history.ReadAppends) || !f.Final || len(f.Values) < n {
			continue
		}
		good := true
		for j := range n {
			a := byValue[f.Values[j]]
			good = good && a.Outcome == history.OK && (j == 0 || byValue[f.Values[j-1]].End < a.Start)
		}
		if good {
			return f
		}
	}
	return nil
}

func mutateDropAppend(ops []history.Op) (string, bool) {
	if f := finalAppends(ops, 2); f != nil {
		f.Values = slices.Delete(slices.Clone(f.Values), 1, 2)
		return f.Key, true
	}
	return "", false
}

func mutateSwapAppends(ops []history.Op) (string, bool) {
	if f := finalAppends(ops, 2); f != nil {
		f.Values = slices.Clone(f.Values)
		f.Values[0], f.Values[1] = f.Values[1], f.Values[0]
		return f.Key, true
	}
	return "", false
}

func mutateDupAppend(ops []history.Op) (string, bool) {
	if f := finalAppends(ops, 1); f != nil {
		f.Values = append(slices.Clone(f.Values), f.Values[0])
		return f.Key, true
	}
	return "", false
}

func mutateGhostName(ops []history.Op) (string, bool) {
	for i := range ops {
		if isOK(ops[i], history.List) && !ops[i].Final {
			ops[i].Names = append(slices.Clone(ops[i].Names), "ghost")
			slices.Sort(ops[i].Names)
			return ops[i].Key, true
		}
	}
	return "", false
}

// TestLargeHistory checks a history of the size of a long run, 20,000
// operations over 50 keys, within a bound far above what it takes (a few
// seconds), to catch a search that blows up.
func TestLargeHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	ops := simulate(simConfig{seed: 42, procs: 20, ops: 20000, regs: 20, files: 20, dirs: 10, unknown: 0.02, failWrites: 0.01})
	start := time.Now()
	rep := Check(ops, Options{Timeout: 30 * time.Second})
	took := time.Since(start)
	t.Logf("%v: %s", took, rep)
	if !rep.Valid() || len(rep.Undecided) > 0 {
		t.Errorf("%s", rep)
	}
	if rep.Keys != 50 || rep.Ops < 20000 {
		t.Errorf("%d ops over %d keys, want 20000+ over 50", rep.Ops, rep.Keys)
	}
	if took > time.Minute {
		t.Errorf("took %v", took)
	}
}

// TestCheckNeverPanics feeds Check histories spoilt at random, field by
// field: whatever it is given, it reports, and does not panic.
func TestCheckNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	kinds := []history.Kind{history.Write, history.Read, history.Append, history.ReadAppends, history.Create,
		history.Unlink, history.Rename, history.Stat, history.List, "bogus", ""}
	outcomes := []history.Outcome{history.OK, history.Fail, history.Unknown, "info", ""}
	for seed := range uint64(20) {
		cfg := simSmall
		cfg.seed = seed
		ops := simulate(cfg)
		for range 50 {
			op := &ops[rng.IntN(len(ops))]
			switch rng.IntN(10) {
			case 0:
				op.Kind = kinds[rng.IntN(len(kinds))]
			case 1:
				op.Outcome = outcomes[rng.IntN(len(outcomes))]
			case 2:
				op.Start, op.End = op.End, op.Start-rng.Int64N(100)
			case 3:
				op.Value = rng.Uint64N(4)
			case 4:
				op.Values = append(op.Values, rng.Uint64N(4), 1<<63)
			case 5:
				op.Names = append(op.Names, "n1", "n1", "")
			case 6:
				op.Name, op.To = op.To, op.Name
			case 7:
				op.Key = []string{"", "r0", "a0", "d0"}[rng.IntN(4)]
			case 8:
				op.Process = rng.IntN(7) - 1
			case 9:
				op.Corrupt, op.Final = !op.Corrupt, !op.Final
			}
		}
		rep := Check(ops, Options{Timeout: time.Second})
		if rep.Ops != len(ops) || rep.Valid() {
			t.Errorf("seed %d: spoilt history passed or miscounted: %s", seed, rep)
		}
	}
}
