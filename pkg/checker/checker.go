// Package checker decides whether a history of file operations (package
// history) shows an anomaly: a lost or stale register write, a phantom or
// corrupt read, a lost, duplicated, reordered or phantom append, or name
// operations that no order of a set of names explains.
//
// A history is judged per key: a register file, an append file, a
// directory. Register files and directories are checked for
// linearizability (search.go: a search over the orders the operations
// allow, as porcupine's, with two reductions that keep histories of many
// overlapping reads and unknown outcomes decidable); before that, the anomalies that can be
// named directly (a value never written, an acknowledged write a final
// read does not see) are looked for, so that a report says what went wrong
// rather than only that no order exists. Append files are checked
// directly: records are unique values from one appender, so their content
// can be compared with what was appended.
//
// The checker is sound in the direction that matters for a test: every
// anomaly it reports is one no correct file system could produce from the
// recorded operations, taking an Unknown operation as one that may have
// happened at any time after it started, or never.
package checker

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/history"
)

// Options tunes Check.
type Options struct {
	// Timeout bounds the linearizability search per key (default 30s); a key
	// whose check times out is reported in Report.Undecided, not as an
	// anomaly.
	Timeout time.Duration
	// NameStaleness is how old a client's view of a directory's names
	// may be (its kernel's cached entries, kept coherent across clients
	// within a bound): a stat, a listing, and a create, unlink or rename
	// that failed for the name's presence or absence may reflect the
	// directory up to this long before they began. Changes themselves
	// (a create, unlink or rename that succeeded) are decided by the
	// servers and get no slack. 0: none, every view is current.
	NameStaleness time.Duration
}

// DefaultTimeout is the search bound per key when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Report is what Check found.
type Report struct {
	Ops, OK, Failed, Unknown int // the operations given, and how many had each outcome
	Keys                     int // registers, append files and directories checked
	Anomalies                []Anomaly
	Undecided                []string // keys whose linearizability search ran out of time
	// HostTorn counts register reads that decoded as no value while a
	// process on the same host was overwriting the register: Linux's page
	// cache does not make a buffered read atomic with respect to a write
	// of the same page, for any file system (a local ext4 or tmpfs file
	// tears such reads too), so these are not anomalies. A torn read with
	// no write on its own host running at the time is (Corrupt).
	HostTorn int
	// HostEarly counts register reads that returned the value of a write
	// still running on their own host: the host's page cache shows a
	// write to its own readers before the file system has stored it, as
	// a local file system's does. The checker lets each such read take
	// effect as late as its write's end, so it still checks the value was
	// current then, but not that other hosts saw it as early. One whose
	// write never said it was stored (timed out) is not checked: it
	// shows the host's cache alone.
	HostEarly int
}

// Valid reports whether no anomaly was found. It does not say that every
// key was proven: see Undecided.
func (r Report) Valid() bool { return len(r.Anomalies) == 0 }

// Anomaly is one thing wrong with a key's operations.
type Anomaly struct {
	Class  Class
	Key    string
	Detail string       // one line a user can act on
	Ops    []history.Op // the operations that show it (at most MaxAnomalyOps)
}

// MaxAnomalyOps caps Anomaly.Ops: enough to see the point, few enough to
// read.
const MaxAnomalyOps = 20

// Class names the kind of an anomaly.
type Class string

// The classes of anomalies. A key gets at most one anomaly per class: the
// first found, its Detail saying how many more of its kind there are.
const (
	// LostWrite: an acknowledged register write that no final read can
	// follow: the final read returns an older value (or 0) although the
	// write completed before the final read began and no later write could
	// explain it.
	LostWrite Class = "lost-write"
	// StaleRead: a register's history is not linearizable (a read returned
	// a value already overwritten before the read began, or reads went
	// backwards).
	StaleRead Class = "stale-read"
	// PhantomRead: a read returned a value never written to that key by
	// any write (ok or unknown).
	PhantomRead Class = "phantom-read"
	// Corrupt: a read whose bytes decode as no value.
	Corrupt Class = "corrupt"
	// LostAppend: an acknowledged append missing from the final
	// read-appends of its file, or a record once read missing from it.
	LostAppend Class = "lost-append"
	// DuplicateAppend: a record appears in a read more often than it was
	// appended.
	DuplicateAppend Class = "duplicate-append"
	// ReorderedAppend: records not in the order they were appended.
	ReorderedAppend Class = "reordered-append"
	// PhantomAppend: a record no append (ok or unknown) of that file wrote,
	// or one only a failed append wrote, or one read before its append
	// began.
	PhantomAppend Class = "phantom-append"
	// NamesNotLinearizable: a directory's name operations are not
	// linearizable against a set-of-names model.
	NamesNotLinearizable Class = "names-not-linearizable"
	// BadHistory: the history itself is malformed, so that some checks
	// cannot be trusted: a malformed operation, two processes appending to
	// one file, a value written twice to a key, a value 0 written, a
	// process running two operations at once.
	BadHistory Class = "bad-history"
)

// classOrder sorts a key's anomalies: what undermines the other checks
// first, then the most specific.
var classOrder = map[Class]int{
	BadHistory: 0, Corrupt: 1, PhantomRead: 2, LostWrite: 3, StaleRead: 4,
	PhantomAppend: 5, LostAppend: 6, DuplicateAppend: 7, ReorderedAppend: 8, NamesNotLinearizable: 9,
}

// family is what a key is, by the kinds of operations on it.
type family int

const (
	register family = iota
	appendFile
	directory
)

func (f family) String() string {
	return [...]string{"register", "append file", "directory"}[f]
}

func familyOf(k history.Kind) family {
	switch {
	case k == history.Write || k == history.Read:
		return register
	case k == history.Append || k == history.ReadAppends:
		return appendFile
	}
	return directory
}

type group struct {
	family family
	key    string
	ops    []history.Op
}

// Check analyses a history and reports every anomaly found. It never
// panics on its input: a malformed operation is reported as BadHistory and
// left out of the other checks. Keys are checked concurrently, each with
// its own linearizability search bounded by opts.Timeout. ops is not modified;
// its order does not matter (examples are picked in order of start time).
func Check(ops []history.Op, opts Options) Report {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rep := Report{Ops: len(ops)}
	bad := newCollector()
	// Sorted, the checks meet operations in real-time order, and pick
	// their examples the same way whatever order ops came in.
	sorted := append([]history.Op(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return opLess(sorted[i], sorted[j]) })
	valid := make([]history.Op, 0, len(ops))
	for _, op := range sorted {
		switch op.Outcome {
		case history.OK:
			rep.OK++
		case history.Fail:
			rep.Failed++
		case history.Unknown:
			rep.Unknown++
		}
		if err := op.Validate(); err != nil {
			bad.add(BadHistory, op.Key, fmt.Sprintf("malformed operation, left out of the checks: %v", err), op)
			continue
		}
		valid = append(valid, op)
	}
	checkProcesses(valid, bad)

	groups := map[family]map[string]*group{}
	for _, op := range valid {
		f := familyOf(op.Kind)
		if groups[f] == nil {
			groups[f] = map[string]*group{}
		}
		g := groups[f][op.Key]
		if g == nil {
			g = &group{family: f, key: op.Key}
			groups[f][op.Key] = g
		}
		g.ops = append(g.ops, op)
	}
	var list []*group
	for _, byKey := range groups {
		for _, g := range byKey {
			list = append(list, g)
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].key != list[j].key {
			return list[i].key < list[j].key
		}
		return list[i].family < list[j].family
	})
	for i := 1; i < len(list); i++ {
		if a, b := list[i-1], list[i]; a.key == b.key {
			bad.add(BadHistory, b.key, fmt.Sprintf("%s is used both as a %s and as a %s", b.key, a.family, b.family), a.ops[0], b.ops[0])
		}
	}
	rep.Keys = len(list)

	results := make([]keyResult, len(list))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(list)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = checkGroup(list[i], timeout, opts.NameStaleness)
			}
		}()
	}
	for i := range list {
		work <- i
	}
	close(work)
	wg.Wait()

	rep.Anomalies = bad.anomalies()
	at := map[[2]string]int{}
	for i, a := range rep.Anomalies {
		at[[2]string{string(a.Class), a.Key}] = i
	}
	for i, res := range results {
		rep.Anomalies = mergeAnomalies(rep.Anomalies, res.anomalies, at)
		if res.undecided {
			rep.Undecided = append(rep.Undecided, list[i].key)
		}
		rep.HostTorn += res.hostTorn
		rep.HostEarly += res.hostEarly
	}
	sort.SliceStable(rep.Anomalies, func(i, j int) bool {
		a, b := rep.Anomalies[i], rep.Anomalies[j]
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		return classOrder[a.Class] < classOrder[b.Class]
	})
	return rep
}

// mergeAnomalies adds more to have, folding an anomaly into one of the
// same class and key already there (bad history found both across keys and
// within one), to keep one per class and key; at indexes have by class and
// key.
func mergeAnomalies(have, more []Anomaly, at map[[2]string]int) []Anomaly {
	for _, m := range more {
		k := [2]string{string(m.Class), m.Key}
		i, ok := at[k]
		if !ok {
			at[k] = len(have)
			have = append(have, m)
			continue
		}
		have[i].Detail += "; " + m.Detail
		have[i].Ops = append(have[i].Ops, m.Ops...)
		have[i].Ops = have[i].Ops[:min(len(have[i].Ops), MaxAnomalyOps)]
	}
	return have
}

type keyResult struct {
	anomalies []Anomaly
	undecided bool
	hostTorn  int
	hostEarly int
}

func checkGroup(g *group, timeout, staleness time.Duration) keyResult {
	switch g.family {
	case register:
		return checkRegister(g.key, g.ops, timeout)
	case appendFile:
		return keyResult{anomalies: checkAppends(g.key, g.ops)}
	}
	return checkNames(g.key, g.ops, timeout, staleness)
}

// opLess orders operations by start, then end, then process: the order in
// which checks meet them and pick their examples.
func opLess(a, b history.Op) bool {
	if a.Start != b.Start {
		return a.Start < b.Start
	}
	if a.End != b.End {
		return a.End < b.End
	}
	return a.Process < b.Process
}

// checkProcesses reports a process seen on two hosts or running two
// operations at once: a worker runs one operation at a time (an Unknown one
// ends when the worker stops waiting), and the append checks rely on one
// process's operations being in real-time order.
func checkProcesses(ops []history.Op, bad *collector) {
	last := map[int]history.Op{}
	for _, op := range ops { // sorted by start
		prev, seen := last[op.Process]
		if seen && prev.Host != op.Host {
			bad.add(BadHistory, op.Key, fmt.Sprintf("process %d runs on hosts %q and %q; a process is one worker", op.Process, prev.Host, op.Host), prev, op)
		}
		if seen && op.Start < max(prev.End, prev.Start) {
			bad.add(BadHistory, op.Key, fmt.Sprintf("process %d started an operation at %d before its previous one ended at %d", op.Process, op.Start, prev.End), prev, op)
		}
		if !seen || max(op.End, op.Start) > max(prev.End, prev.Start) {
			last[op.Process] = op
		}
	}
}

// String is a short human summary: counts, then one line per anomaly and
// the undecided keys.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops (%d ok, %d failed, %d unknown) over %d keys: ", r.Ops, r.OK, r.Failed, r.Unknown, r.Keys)
	switch len(r.Anomalies) {
	case 0:
		b.WriteString("no anomaly")
	case 1:
		b.WriteString("1 anomaly")
	default:
		fmt.Fprintf(&b, "%d anomalies", len(r.Anomalies))
	}
	if len(r.Undecided) > 0 {
		fmt.Fprintf(&b, ", %d keys undecided", len(r.Undecided))
	}
	if r.HostTorn > 0 {
		fmt.Fprintf(&b, "; %d reads torn by a write on their own host (the kernel's page cache, not counted)", r.HostTorn)
	}
	if r.HostEarly > 0 {
		fmt.Fprintf(&b, "; %d reads saw a write still running on their own host (the kernel's page cache; checked as of the write's end)", r.HostEarly)
	}
	b.WriteString("\n")
	for _, a := range r.Anomalies {
		fmt.Fprintf(&b, "  %s %s: %s\n", a.Class, a.Key, a.Detail)
	}
	if len(r.Undecided) > 0 {
		fmt.Fprintf(&b, "  undecided (search timed out): %s\n", strings.Join(r.Undecided, ", "))
	}
	return b.String()
}

// collector keeps the first anomaly of each class and key, and counts the
// others, so that a key with a thousand stale reads is one line, not a
// thousand.
type collector struct {
	found map[[2]string]*Anomaly
	more  map[[2]string]int
	order [][2]string
}

func newCollector() *collector {
	return &collector{found: map[[2]string]*Anomaly{}, more: map[[2]string]int{}}
}

func (c *collector) add(class Class, key, detail string, ops ...history.Op) {
	k := [2]string{string(class), key}
	if c.found[k] != nil {
		c.more[k]++
		return
	}
	if len(ops) > MaxAnomalyOps {
		ops = ops[:MaxAnomalyOps]
	}
	c.found[k] = &Anomaly{Class: class, Key: key, Detail: detail, Ops: append([]history.Op(nil), ops...)}
	c.order = append(c.order, k)
}

func (c *collector) has(class Class, key string) bool {
	return c.found[[2]string{string(class), key}] != nil
}

func (c *collector) anomalies() []Anomaly {
	var out []Anomaly
	for _, k := range c.order {
		a := *c.found[k]
		if n := c.more[k]; n > 0 {
			a.Detail += fmt.Sprintf(" (and %d more like it)", n)
		}
		out = append(out, a)
	}
	return out
}
