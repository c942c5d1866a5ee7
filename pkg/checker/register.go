package checker

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairnfs/cairn/pkg/history"
)

// regInput is a register operation as the model sees it: a write of v, or
// a read that returned v.
type regInput struct {
	write bool
	v     uint64
}

// registerModel is a register holding a uint64, 0 before any write: a
// write always succeeds and sets it, a read must return it.
var registerModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(uint64), input.(regInput)
		if in.write {
			return true, in.v
		}
		return in.v == s, s
	},
	Equal: func(a, b any) bool { return a.(uint64) == b.(uint64) },
	Hash:  func(s any) uint64 { return s.(uint64) },
	DescribeOperation: func(input, _ any) string {
		in := input.(regInput)
		if in.write {
			return fmt.Sprintf("write %d", in.v)
		}
		return fmt.Sprintf("read = %d", in.v)
	},
}

// checkRegister checks the writes and reads of one register file, ops in
// start order. Writes are told apart by their values, which the workload
// keeps unique per key; that is what lets a read name the write it saw.
func checkRegister(key string, ops []history.Op, timeout time.Duration) keyResult {
	c := newCollector()
	written := map[uint64][]history.Op{} // value -> writes that may have written it (ok or unknown)
	failed := map[uint64]history.Op{}    // value -> a failed write of it
	seen := map[uint64]history.Op{}      // value -> first write of it, any outcome
	dup := false
	hostTorn, hostEarly := 0, 0
	var lin []history.Op // what porcupine checks: ok and unknown writes, ok readable reads
	var spans [][2]int64 // when each of lin may take effect
	var final *history.Op
	for _, op := range ops {
		if op.Kind == history.Write {
			if op.Value == 0 {
				c.add(BadHistory, key, "a write of value 0, which stands for \"never written\": its reads cannot be told from an empty file's", op)
				continue
			}
			if first, ok := seen[op.Value]; ok {
				dup = true
				c.add(BadHistory, key, fmt.Sprintf("value %d written twice: reads of it cannot name their write", op.Value), first, op)
			} else {
				seen[op.Value] = op
			}
			if op.Outcome == history.Fail {
				failed[op.Value] = op
				continue
			}
			written[op.Value] = append(written[op.Value], op)
			lin = append(lin, op)
			spans = append(spans, [2]int64{op.Start, op.End})
			continue
		}
		if op.Corrupt {
			if tornOnHost(ops, op) {
				hostTorn++
			} else {
				c.add(Corrupt, key, fmt.Sprintf("a read at %d returned bytes that decode as no value (torn, zeroed or foreign)", op.Start), op)
			}
			continue
		}
		if op.Outcome != history.OK {
			continue // a read that returned nothing shows nothing
		}
		sp := [2]int64{openedAfter(ops, op), op.End}
		if wr, ok := earlyOnHost(ops, op); ok {
			hostEarly++
			if wr.Outcome != history.OK {
				// The host's cache showed a write that never said it
				// was stored (it timed out): the read tells nothing of
				// what other hosts may read.
				continue
			}
			sp[1] = wr.End
		}
		lin = append(lin, op)
		spans = append(spans, sp)
		if op.Final && (final == nil || op.Start >= final.Start) {
			o := op
			final = &o
		}
	}
	for _, r := range lin {
		if r.Kind != history.Read || r.Value == 0 || len(written[r.Value]) > 0 {
			continue
		}
		if w, ok := failed[r.Value]; ok {
			c.add(PhantomRead, key, fmt.Sprintf("a read at %d returned %d, written only by a write that failed (%s)", r.Start, r.Value, w.Errno), r, w)
		} else {
			c.add(PhantomRead, key, fmt.Sprintf("a read at %d returned %d, which no write to %s wrote", r.Start, r.Value, key), r)
		}
	}
	if final != nil && !dup {
		lostWrite(c, key, *final, written, lin)
	}
	res := keyResult{hostTorn: hostTorn, hostEarly: hostEarly}
	if !c.has(PhantomRead, key) && !c.has(LostWrite, key) {
		// Writes of 0 are left out above: the model's 0 is the file
		// never written, which no write can bring back.
		verdict, stuck, shown := linearize(registerModel, lin, func(i int) (int64, int64) { return spans[i][0], spans[i][1] }, func(i int) any {
			return regInput{write: lin[i].Kind == history.Write, v: lin[i].Value}
		}, func(i int) bool { return lin[i].Kind != history.Write }, func(i int) any {
			return regInput{write: lin[i].Kind == history.Write, v: lin[i].Value}
		}, timeout, func(s, o history.Op) int {
			if o.Kind == history.Write && o.Value == s.Value {
				return 2 // the write of the value the stuck read returned
			}
			return 1
		})
		switch verdict {
		case porcupine.Illegal:
			what := "no order of its writes and reads explains them"
			if stuck >= 0 {
				what = fmt.Sprintf("no order of its writes and reads explains %s (a value already overwritten, not yet written, or reads going backwards)", lin[stuck])
			}
			c.add(StaleRead, key, what, shown...)
		case porcupine.Unknown:
			res.undecided = true
		}
	}
	res.anomalies = c.anomalies()
	return res
}

// lostWrite reports a LostWrite if the last final read f returned a value
// (or 0) whose write, acknowledged, ended before some other acknowledged
// write began, which itself ended before f began: the later write must
// come between, so f cannot return the older value; it is gone. A value
// from an Unknown write proves nothing: it may have landed any time after
// it started, after the later write too.
func lostWrite(c *collector, key string, f history.Op, written map[uint64][]history.Op, lin []history.Op) {
	var w1 *history.Op
	if f.Value != 0 {
		ws := written[f.Value]
		if len(ws) != 1 || ws[0].Outcome != history.OK {
			return // phantom (reported), or an unknown write
		}
		w1 = &ws[0]
	}
	var w2 *history.Op
	for i := range lin {
		w := &lin[i]
		if w.Kind != history.Write || w.Outcome != history.OK || w.End >= f.Start {
			continue
		}
		if w1 != nil && w.Start <= w1.End {
			continue
		}
		if w2 == nil || w.End > w2.End {
			w2 = w
		}
	}
	if w2 == nil {
		return
	}
	if w1 == nil {
		c.add(LostWrite, key, fmt.Sprintf("the final read at %d found the file empty, but the write of %d was acknowledged at %d, before it began",
			f.Start, w2.Value, w2.End), *w2, f)
		return
	}
	c.add(LostWrite, key, fmt.Sprintf("the final read at %d returned %d, but the write of %d, begun at %d after that one was acknowledged, was acknowledged at %d, before the final read began",
		f.Start, f.Value, w2.Value, w2.Start, w2.End), *w1, *w2, f)
}

// openedAfter is the earliest time read r may take effect: just after the
// last acknowledged write of its register that ended before r began. The
// workload's read is an open, a read and a close, and Cairn promises
// close-to-open: an open sees every change closed before it, and a change
// still being written (one whose close had not returned) may show or not.
// So r must follow every write that ended before it began, but not a read
// that did: another host may have read a write still in progress (its
// bytes reach the data nodes before its close records the new Version),
// while r, opened before that close, keeps its host's cached pages of the
// Version before. The writes stay in one order that every read agrees
// with, so two reads that began after both of two writes ended must not
// disagree on which came last; and a process's reads do not go backwards
// (r follows the process's own earlier operations). An earlier read of
// the process that returned the same value as r does not hold r back: a
// host that keeps its cached Version serves that value again and again
// while another host's reads already see a write still in progress, and
// r showing the same value as the read before it cannot go backwards.
func openedAfter(ops []history.Op, r history.Op) int64 {
	var after int64
	for _, o := range ops {
		if o.End >= r.Start || o.End+1 <= after {
			continue
		}
		again := o.Kind == history.Read && o.Outcome == history.OK && !o.Corrupt && o.Value == r.Value
		if o.Process == r.Process && !again || o.Kind == history.Write && o.Outcome == history.OK {
			after = o.End + 1
		}
	}
	return after
}

// earlyOnHost reports whether read r returned the value of a write by a
// process on r's host that was still running when r ended, and if so
// which. Linux copies a buffered write into the host's page
// cache before the file system is asked to store it, so a reader on the
// same host may see it before any other host can (a local ext4 file shows
// the same). Such a read shows what its host's cache held, not when the
// write took effect for everyone: the checker lets it take effect as late
// as its write's end, and still requires that its value was current then
// (a write whose outcome is unknown may never have been stored: such a
// read is not checked).
func earlyOnHost(ops []history.Op, r history.Op) (history.Op, bool) {
	if r.Host == "" || r.Value == 0 {
		return history.Op{}, false
	}
	for _, w := range ops {
		if w.Kind == history.Write && w.Host == r.Host && w.Value == r.Value &&
			w.Outcome != history.Fail && w.Start <= r.End && w.End > r.End {
			return w, true
		}
	}
	return history.Op{}, false
}

// tornOnHost reports whether read r ran while a write of the same register
// by a process on r's host was running (any outcome; an unknown one may
// run on after its worker stopped waiting): the host's page cache may
// have torn it (Report.HostTorn).
func tornOnHost(ops []history.Op, r history.Op) bool {
	if r.Host == "" {
		return false
	}
	for _, w := range ops {
		if w.Kind != history.Write || w.Host != r.Host || w.Start > r.End {
			continue
		}
		if w.Outcome == history.Unknown || w.End >= r.Start {
			return true
		}
	}
	return false
}
