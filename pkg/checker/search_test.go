package checker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnfs/cairn/pkg/history"
)

// TestSearchAgreesWithPorcupine runs the search and porcupine's on the same
// random histories of the names model and the register model, valid or
// not, with overlapping intervals, failures and unknown outcomes: their
// verdicts must be the same.
func TestSearchAgreesWithPorcupine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	verdicts := map[porcupine.CheckResult]int{}
	for h := range 3000 {
		var model porcupine.Model
		var ops []porcupine.Operation
		var readOnly []bool
		n := 4 + rng.IntN(10)
		if h%2 == 0 {
			model = nameModel
			model.Init = func() any { return string(make([]byte, 1)) }
			for range n {
				in := nameInput{a: rng.IntN(3), b: rng.IntN(3)}
				in.kind = []history.Kind{history.Create, history.Unlink, history.Rename, history.Stat}[rng.IntN(4)]
				in.outcome = []history.Outcome{history.OK, history.OK, history.Fail, history.Unknown}[rng.IntN(4)]
				if in.kind == history.Stat {
					in.outcome, in.exists = history.OK, rng.IntN(2) == 0
				}
				in.strict = in.outcome == history.Fail && rng.IntN(2) == 0
				ops = append(ops, randomInterval(rng, in, in.outcome == history.Unknown))
				readOnly = append(readOnly, in.kind == history.Stat || in.outcome == history.Fail)
			}
		} else {
			model = registerModel
			model.Init = func() any { return uint64(0) }
			for range n {
				in := regInput{write: rng.IntN(2) == 0, v: uint64(rng.IntN(4))}
				ops = append(ops, randomInterval(rng, in, in.write && rng.IntN(4) == 0))
				readOnly = append(readOnly, !in.write)
			}
		}
		want := porcupine.CheckOperations(model, ops)
		class := func(i int) any {
			if in, ok := ops[i].Input.(nameInput); ok {
				in.display = ""
				return in
			}
			return ops[i].Input
		}
		if h%3 == 0 {
			class = nil
		}
		got, stuck := searchLinearizable(model, ops, func(i int) bool { return readOnly[i] }, class, time.Now().Add(time.Minute))
		wantRes := porcupine.Illegal
		if want {
			wantRes = porcupine.Ok
		}
		if got != wantRes {
			t.Fatalf("history %d: search says %v, porcupine %v:\n%v", h, got, wantRes, describe(model, ops))
		}
		if got == porcupine.Illegal && (stuck < 0 || stuck >= len(ops)) {
			t.Fatalf("history %d: illegal without the operation that could not be placed (%d)", h, stuck)
		}
		verdicts[got]++
	}
	if verdicts[porcupine.Ok] < 300 || verdicts[porcupine.Illegal] < 300 {
		t.Errorf("random histories too one-sided to compare: %v", verdicts)
	}
}

// randomInterval places an operation at random in [0, 40), returning
// never when unknown.
func randomInterval(rng *rand.Rand, input any, unknown bool) porcupine.Operation {
	call := rng.Int64N(30)
	ret := call + 1 + rng.Int64N(10)
	if unknown {
		ret = never
	}
	return porcupine.Operation{ClientId: rng.IntN(1000), Input: input, Call: call, Return: ret}
}

func describe(m porcupine.Model, ops []porcupine.Operation) string {
	s := ""
	for i, op := range ops {
		ret := "never"
		if op.Return != never {
			ret = time.Duration(op.Return).String()
		}
		s += m.DescribeOperation(op.Input, nil) + " [" + time.Duration(op.Call).String() + ", " + ret + "]"
		if i < len(ops)-1 {
			s += "\n"
		}
	}
	return s
}
