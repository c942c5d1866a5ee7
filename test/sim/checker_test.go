package sim

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairnfs/cairn/pkg/checker"
	"github.com/cairnfs/cairn/pkg/history"
)

// TestCheckerCatchesBadHistories takes the history of a run without
// faults, which must check clean, and breaks it the ways a broken file
// system would: each broken copy must be caught. A checker that passed
// anything would pass every seed.
func TestCheckerCatchesBadHistories(t *testing.T) {
	if !ownProcess(t) {
		return
	}
	dir := t.TempDir()
	var ops []history.Op
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		res, err := Run(ctx, RunConfig{Seed: 7, Dir: dir, MaxFaults: -1, Duration: 20 * time.Second, Settle: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ops = res.Ops
		Drain()
	})
	if rep := checker.Check(ops, checker.Options{}); !rep.Valid() {
		t.Fatalf("a run without faults: %s", rep)
	}
	// last returns the index of the last op matching keep.
	last := func(ops []history.Op, keep func(history.Op) bool) int {
		for i := len(ops) - 1; i >= 0; i-- {
			if keep(ops[i]) {
				return i
			}
		}
		t.Fatal("the run has no operation of the kind a mutation needs")
		return -1
	}
	final := func(kind history.Kind) func(history.Op) bool {
		return func(op history.Op) bool { return op.Final && op.Kind == kind && op.Outcome == history.OK }
	}
	for _, m := range []struct {
		name   string
		mutate func(ops []history.Op)
	}{
		{"a final read returns a value never written", func(ops []history.Op) {
			ops[last(ops, final(history.Read))].Value = 1<<63 | 12345
		}},
		{"a final read returns an overwritten value", func(ops []history.Op) {
			i := last(ops, final(history.Read))
			// The register's first acknowledged write, if a later write
			// replaced it.
			var writes []uint64
			for _, op := range ops {
				if op.Kind == history.Write && op.Key == ops[i].Key && op.Outcome == history.OK {
					writes = append(writes, op.Value)
				}
			}
			if len(writes) < 2 || writes[0] == ops[i].Value {
				t.Skip("the register was written fewer than twice")
			}
			ops[i].Value = writes[0]
		}},
		{"an acknowledged append is lost", func(ops []history.Op) {
			i := last(ops, func(op history.Op) bool { return final(history.ReadAppends)(op) && len(op.Values) > 0 })
			ops[i].Values = ops[i].Values[:len(ops[i].Values)-1]
		}},
		{"a read returns bytes of no write", func(ops []history.Op) {
			ops[last(ops, final(history.Read))].Corrupt = true
		}},
		{"a listing shows a name never created", func(ops []history.Op) {
			i := last(ops, final(history.List))
			ops[i].Names = append(slices.Clone(ops[i].Names), "never-created")
			slices.Sort(ops[i].Names)
		}},
		{"a created name is missing from a listing", func(ops []history.Op) {
			i := last(ops, func(op history.Op) bool { return final(history.List)(op) && len(op.Names) > 0 })
			ops[i].Names = ops[i].Names[1:]
		}},
	} {
		t.Run(m.name, func(t *testing.T) {
			bad := make([]history.Op, len(ops))
			for i, op := range ops {
				bad[i] = op.Clone()
			}
			m.mutate(bad)
			if rep := checker.Check(bad, checker.Options{}); rep.Valid() {
				t.Fatalf("not caught: %s", rep)
			} else {
				t.Logf("caught: %s", rep)
			}
		})
	}
}
