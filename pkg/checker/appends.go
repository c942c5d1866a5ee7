package checker

import (
	"fmt"
	"slices"

	"github.com/cairnfs/cairn/pkg/history"
)

// checkAppends checks the appends and reads of one append file, ops in
// start order. The file only grows, by records of unique values, so every
// read must be a sequence of appended records, each at most as often as it
// was appended, in an order real time allows; and the last final read must
// hold every acknowledged append and every record an earlier read saw, the
// earlier read as its prefix. No porcupine search is needed.
func checkAppends(key string, ops []history.Op) []Anomaly {
	c := newCollector()
	appended := map[uint64][]history.Op{} // value -> appends that may have written it (ok or unknown)
	failed := map[uint64]history.Op{}     // value -> a failed append of it
	seen := map[uint64]history.Op{}       // value -> first append of it, any outcome
	var appenders []history.Op            // the first append of each process
	var reads []history.Op                // ok reads that decoded
	final := -1                           // the last final one of them
	for _, op := range ops {
		if op.Kind == history.Append {
			if !slices.ContainsFunc(appenders, func(a history.Op) bool { return a.Process == op.Process }) {
				appenders = append(appenders, op)
			}
			if op.Value == 0 {
				c.add(BadHistory, key, "an append of record 0, which no read can return (0 is no value)", op)
				continue
			}
			if first, ok := seen[op.Value]; ok {
				c.add(BadHistory, key, fmt.Sprintf("record %d appended twice: reads of it cannot name their append", op.Value), first, op)
			} else {
				seen[op.Value] = op
			}
			if op.Outcome == history.Fail {
				failed[op.Value] = op
			} else {
				appended[op.Value] = append(appended[op.Value], op)
			}
			continue
		}
		if op.Corrupt {
			c.add(Corrupt, key, fmt.Sprintf("a read at %d returned bytes that decode as no records (torn, zeroed or foreign)", op.Start), op)
			continue
		}
		if op.Outcome != history.OK {
			continue // a read that returned nothing shows nothing
		}
		reads = append(reads, op)
		if op.Final && (final < 0 || op.Start >= reads[final].Start) {
			final = len(reads) - 1
		}
	}
	if len(appenders) > 1 {
		procs := make([]int, len(appenders))
		for i, a := range appenders {
			procs[i] = a.Process
		}
		c.add(BadHistory, key, fmt.Sprintf("appended to by processes %v: a file has one appender, or the order of its records means nothing", procs), appenders...)
	}
	for _, r := range reads {
		checkAppendRead(c, key, r, appended, failed)
	}
	if final >= 0 {
		checkFinalAppends(c, key, ops, reads, reads[final], appended)
	}
	return c.anomalies()
}

// checkAppendRead checks one read's records against the appends: each
// written by an append that began before the read ended, no more often than
// appended, and none before a record whose append was acknowledged before
// its own began. An Unknown append constrains nothing by its end: its
// worker stopped waiting, the write may still land.
func checkAppendRead(c *collector, key string, r history.Op, appended map[uint64][]history.Op, failed map[uint64]history.Op) {
	count := map[uint64]int{}
	var latest *history.Op // of the records so far, the append begun last
	reordered := false
	for _, v := range r.Values {
		count[v]++
		ws := appended[v]
		if len(ws) == 0 {
			if w, ok := failed[v]; ok {
				c.add(PhantomAppend, key, fmt.Sprintf("a read at %d returned record %d, appended only by an append that failed (%s)", r.Start, v, w.Errno), r, w)
			} else {
				c.add(PhantomAppend, key, fmt.Sprintf("a read at %d returned record %d, which no append to %s wrote", r.Start, v, key), r)
			}
			continue
		}
		if first := ws[0]; first.Start > r.End { // ws is in start order
			c.add(PhantomAppend, key, fmt.Sprintf("a read that ended at %d returned record %d, whose append began only at %d", r.End, v, first.Start), first, r)
		}
		if count[v] == len(ws)+1 {
			c.add(DuplicateAppend, key, fmt.Sprintf("record %d appears %d times in a read at %d, appended %d time(s)", v, count[v], r.Start, len(ws)), ws[0], r)
		}
		if len(ws) != 1 || count[v] > 1 || reordered {
			// A value appended twice is bad history (which append a copy
			// is cannot be told); a second copy of a record is its
			// duplicate, reported as such, not also out of order.
			continue
		}
		y := ws[0]
		if latest != nil && y.Outcome == history.OK && latest.Start > y.End {
			c.add(ReorderedAppend, key, fmt.Sprintf("record %d precedes record %d in a read at %d, but the append of %d was acknowledged at %d, before the append of %d began at %d",
				latest.Value, y.Value, r.Start, y.Value, y.End, latest.Value, latest.Start), *latest, y, r)
			reordered = true
		}
		if latest == nil || y.Start > latest.Start {
			latest = &ws[0]
		}
	}
}

// checkFinalAppends compares the last final read f with what must be in it:
// every append acknowledged before f began, and every earlier read's records
// as a prefix (a file that only grows shows each reader a prefix of what a
// later reader sees).
func checkFinalAppends(c *collector, key string, ops, reads []history.Op, f history.Op, appended map[uint64][]history.Op) {
	in := map[uint64]bool{}
	for _, v := range f.Values {
		in[v] = true
	}
	var missing []history.Op
	for _, op := range ops {
		if op.Kind == history.Append && op.Outcome == history.OK && op.Value != 0 && op.End < f.Start && !in[op.Value] {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		c.add(LostAppend, key, fmt.Sprintf("%d acknowledged appends missing from the final read at %d, the first record %d, acknowledged at %d",
			len(missing), f.Start, missing[0].Value, missing[0].End), append([]history.Op{f}, missing...)...)
	}
	for _, r := range reads {
		if r.Final || r.End >= f.Start {
			continue // concurrent with f: either may have read first
		}
		for i, v := range r.Values {
			if i < len(f.Values) && f.Values[i] == v {
				continue
			}
			switch {
			case len(appended[v]) == 0:
				// a phantom record, reported as such
			case !in[v]:
				c.add(LostAppend, key, fmt.Sprintf("record %d, read at %d, is missing from the final read at %d: content once read cannot vanish", v, r.Start, f.Start), r, f)
			case i >= len(f.Values):
				// a copy of a record f holds once: r's duplicate, reported as such
			default:
				c.add(ReorderedAppend, key, fmt.Sprintf("a read at %d has record %d at position %d, the final read at %d has %d there: a file's earlier content must be a prefix of its later",
					r.Start, v, i, f.Start, f.Values[i]), r, f)
			}
			break
		}
	}
}
