package checker

import (
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnfs/cairn/pkg/history"
)

// never is the return time of an Unknown operation. Such an operation may
// have taken effect at any point after it started, or not at all; ending it
// after everything else lets porcupine place it anywhere from its start on,
// including after every other operation, where taking effect is the same
// as never taking effect, since nothing observes it there.
const never = math.MaxInt64

// linearize checks ops (one key's) against model, where input(i) is the
// porcupine input of ops[i] (outputs are folded into inputs: the models
// need both in one place), readOnly(i) says ops[i] never changes the
// state and class(i) groups operations that do the same thing (see
// searchLinearizable). It returns the verdict and, when the
// history is Illegal, the index of the first operation no order could
// place and a few operations around it: it, the operations for which
// related returns 2 (at most 5), then the most recent ones for which it
// returns 1. span, if not nil, gives the interval in which ops[i] may take
// effect when it is not [Start, End] (a relaxation the caller explains);
// what is shown keeps the operations as recorded.
func linearize(model porcupine.Model, ops []history.Op, span func(i int) (call, ret int64), input func(i int) any, readOnly func(i int) bool, class func(i int) any, timeout time.Duration,
	related func(stuck, other history.Op) int) (res porcupine.CheckResult, stuck int, shown []history.Op) {
	pops := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		call, ret := op.Start, op.End
		if span != nil {
			call, ret = span(i)
		}
		if op.Outcome == history.Unknown {
			ret = never
		}
		pops[i] = porcupine.Operation{ClientId: op.Process, Input: input(i), Call: call, Return: ret}
	}
	res, stuck = searchLinearizable(model, pops, readOnly, class, time.Now().Add(timeout))
	if res != porcupine.Illegal {
		return res, -1, nil
	}
	if stuck < 0 { // the search did not locate it: show the key's first operations
		return res, -1, ops[:min(len(ops), MaxAnomalyOps)]
	}
	return res, stuck, witness(ops, stuck, related)
}

// witness picks the operations that show why ops[stuck] cannot be placed:
// it, the must-see ones (related 2), then the latest related ones that
// began before it ended, in start order.
func witness(ops []history.Op, stuck int, related func(stuck, other history.Op) int) []history.Op {
	s := ops[stuck]
	var must, near []int
	for i, op := range ops {
		if i == stuck || op.Start > s.End {
			continue
		}
		switch related(s, op) {
		case 2:
			must = append(must, i)
		case 1:
			near = append(near, i)
		}
	}
	must = must[:min(len(must), 5)]
	sort.SliceStable(near, func(a, b int) bool { return ops[near[a]].End > ops[near[b]].End })
	picked := map[int]bool{stuck: true}
	for _, i := range must {
		picked[i] = true
	}
	for _, i := range near {
		if len(picked) >= MaxAnomalyOps {
			break
		}
		picked[i] = true
	}
	var out []history.Op
	for i, op := range ops {
		if picked[i] {
			out = append(out, op)
		}
	}
	return out
}
