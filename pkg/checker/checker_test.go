package checker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/history"
)

// Constructors of hand-made histories: process p, times [s, e], outcome ok
// unless wrapped in unknown, fail or final.

func mk(p int, kind history.Kind, key string, s, e int64) history.Op {
	return history.Op{Process: p, Host: fmt.Sprintf("c%d", p), Kind: kind, Key: key, Start: s, End: e, Outcome: history.OK}
}

func w(p int, key string, v uint64, s, e int64) history.Op {
	op := mk(p, history.Write, key, s, e)
	op.Value = v
	return op
}

func r(p int, key string, v uint64, s, e int64) history.Op {
	op := mk(p, history.Read, key, s, e)
	op.Value = v
	return op
}

func ap(p int, key string, v uint64, s, e int64) history.Op {
	op := mk(p, history.Append, key, s, e)
	op.Value = v
	return op
}

func ra(p int, key string, vs []uint64, s, e int64) history.Op {
	op := mk(p, history.ReadAppends, key, s, e)
	op.Values = vs
	return op
}

func nameOp(p int, kind history.Kind, dir, name string, s, e int64) history.Op {
	op := mk(p, kind, dir, s, e)
	op.Name = name
	return op
}

func rn(p int, dir, from, to string, s, e int64) history.Op {
	op := nameOp(p, history.Rename, dir, from, s, e)
	op.To = to
	return op
}

func st(p int, dir, name string, exists bool, s, e int64) history.Op {
	op := nameOp(p, history.Stat, dir, name, s, e)
	if exists {
		op.Value = 1
	}
	return op
}

func ls(p int, dir string, names []string, s, e int64) history.Op {
	op := mk(p, history.List, dir, s, e)
	op.Names = names
	return op
}

func unknown(op history.Op) history.Op {
	op.Outcome = history.Unknown
	op.Errno = "ETIMEDOUT"
	if op.Kind == history.Read || op.Kind == history.Stat {
		op.Value = 0
	}
	return op
}

func fail(op history.Op, errno string) history.Op {
	op.Outcome = history.Fail
	op.Errno = errno
	return op
}

func final(op history.Op) history.Op {
	op.Final = true
	return op
}

func corrupt(op history.Op) history.Op {
	op.Corrupt = true
	op.Value = 0
	op.Values = nil
	return op
}

const (
	cr = history.Create
	ul = history.Unlink
)

// found lists a report's anomalies as "class key", sorted.
func found(rep Report) []string {
	var out []string
	for _, a := range rep.Anomalies {
		out = append(out, string(a.Class)+" "+a.Key)
	}
	slices.Sort(out)
	return out
}

func TestCheck(t *testing.T) {
	u64 := func(vs ...uint64) []uint64 { return vs }
	names := func(ns ...string) []string { return ns }
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want []string // "class key", sorted; none for a good history
	}{
		// Registers, good.
		{"register sequential", []history.Op{w(1, "r", 1, 0, 10), r(2, "r", 1, 20, 30), w(1, "r", 2, 40, 50), final(r(2, "r", 2, 60, 70))}, nil},
		{"register concurrent reads see either", []history.Op{
			w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 50), r(2, "r", 1, 25, 30), r(3, "r", 2, 31, 35), r(2, "r", 2, 40, 45), final(r(4, "r", 2, 60, 70))}, nil},
		{"register unknown write that happened", []history.Op{w(1, "r", 1, 0, 10), unknown(w(1, "r", 2, 20, 30)), final(r(2, "r", 2, 40, 50))}, nil},
		{"register unknown write that never did", []history.Op{w(1, "r", 1, 0, 10), unknown(w(1, "r", 2, 20, 30)), final(r(2, "r", 1, 40, 50))}, nil},
		{"register unknown write landing late", []history.Op{unknown(w(1, "r", 1, 0, 10)), w(2, "r", 2, 20, 30), final(r(3, "r", 1, 40, 50))}, nil},
		{"register failed write", []history.Op{w(1, "r", 1, 0, 10), fail(w(1, "r", 2, 20, 30), "ENOSPC"), final(r(2, "r", 1, 40, 50))}, nil},
		{"register unknown and failed reads", []history.Op{w(1, "r", 1, 0, 10), unknown(r(2, "r", 0, 5, 15)), fail(r(3, "r", 0, 20, 25), "EIO"), final(r(2, "r", 1, 40, 50))}, nil},
		{"register never written", []history.Op{r(1, "r", 0, 0, 10), final(r(1, "r", 0, 20, 30))}, nil},
		{"register write concurrent with final", []history.Op{w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 50), final(r(2, "r", 1, 30, 40))}, nil},
		// Registers, bad.
		{"lost write", []history.Op{w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 30), final(r(2, "r", 1, 40, 50))}, []string{"lost-write r"}},
		{"lost write, file empty", []history.Op{w(1, "r", 1, 0, 10), final(r(2, "r", 0, 20, 30))}, []string{"lost-write r"}},
		{"stale read", []history.Op{w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 30), r(2, "r", 1, 40, 50)}, []string{"stale-read r"}},
		{"reads going backwards", []history.Op{w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 100), r(2, "r", 2, 30, 40), r(2, "r", 1, 50, 60)}, []string{"stale-read r"}},
		{"read from the future", []history.Op{r(2, "r", 1, 0, 10), w(1, "r", 1, 20, 30)}, []string{"stale-read r"}},
		{"phantom read", []history.Op{w(1, "r", 1, 0, 10), r(2, "r", 7, 20, 30)}, []string{"phantom-read r"}},
		{"phantom read of a failed write", []history.Op{w(1, "r", 1, 0, 10), fail(w(1, "r", 2, 20, 30), "ENOSPC"), r(2, "r", 2, 40, 50)}, []string{"phantom-read r"}},
		{"corrupt read", []history.Op{w(1, "r", 1, 0, 10), corrupt(r(2, "r", 0, 20, 30))}, []string{"corrupt r"}},
		{"corrupt read during another host's write", []history.Op{w(1, "r", 1, 0, 10), w(3, "r", 2, 15, 40), corrupt(r(2, "r", 0, 20, 30))}, []string{"corrupt r"}},
		{"write of 0", []history.Op{w(1, "r", 0, 0, 10), r(2, "r", 0, 20, 30)}, []string{"bad-history r"}},
		{"value written twice", []history.Op{w(1, "r", 1, 0, 10), w(1, "r", 1, 20, 30), final(r(2, "r", 1, 40, 50))}, []string{"bad-history r"}},

		// Appends, good.
		{"appends in order", []history.Op{ap(1, "a", 1, 0, 10), ra(2, "a", u64(1), 12, 15), ap(1, "a", 2, 20, 30), ra(2, "a", u64(1, 2), 35, 40),
			ap(1, "a", 3, 50, 60), final(ra(2, "a", u64(1, 2, 3), 70, 80))}, nil},
		{"unknown appends present and absent", []history.Op{ap(1, "a", 1, 0, 10), unknown(ap(1, "a", 2, 20, 30)), unknown(ap(1, "a", 3, 40, 50)),
			ap(1, "a", 4, 60, 70), final(ra(2, "a", u64(1, 2, 4), 80, 90))}, nil},
		{"unknown append landing after the next", []history.Op{ap(1, "a", 1, 0, 10), unknown(ap(1, "a", 2, 20, 30)), ap(1, "a", 3, 40, 50),
			ra(2, "a", u64(1, 3), 55, 58), final(ra(2, "a", u64(1, 3, 2), 60, 70))}, nil},
		{"failed append absent", []history.Op{ap(1, "a", 1, 0, 10), fail(ap(1, "a", 2, 20, 30), "ENOSPC"), final(ra(2, "a", u64(1), 40, 50))}, nil},
		{"append concurrent with final", []history.Op{ap(1, "a", 1, 0, 10), ap(1, "a", 2, 20, 50), final(ra(2, "a", u64(1), 30, 40))}, nil},
		{"no final read", []history.Op{ap(1, "a", 1, 0, 10), ap(1, "a", 2, 20, 30), ra(2, "a", u64(1), 40, 50)}, nil},
		{"empty file", []history.Op{final(ra(2, "a", nil, 40, 50))}, nil},
		// Appends, bad.
		{"lost append", []history.Op{ap(1, "a", 1, 0, 10), ap(1, "a", 2, 20, 30), final(ra(2, "a", u64(1), 40, 50))}, []string{"lost-append a"}},
		{"record read then gone", []history.Op{ap(1, "a", 1, 0, 10), unknown(ap(1, "a", 2, 20, 30)), ra(2, "a", u64(1, 2), 35, 38),
			final(ra(2, "a", u64(1), 40, 50))}, []string{"lost-append a"}},
		{"duplicate append", []history.Op{ap(1, "a", 1, 0, 10), ap(1, "a", 2, 20, 30), final(ra(2, "a", u64(1, 2, 2), 40, 50))}, []string{"duplicate-append a"}},
		{"reordered append", []history.Op{ap(1, "a", 1, 0, 10), ap(1, "a", 2, 20, 30), final(ra(2, "a", u64(2, 1), 40, 50))}, []string{"reordered-append a"}},
		{"earlier read not a prefix", []history.Op{ap(1, "a", 1, 0, 10), unknown(ap(1, "a", 2, 20, 30)), unknown(ap(1, "a", 3, 40, 50)),
			ra(2, "a", u64(1, 3), 55, 58), final(ra(2, "a", u64(1, 2, 3), 60, 70))}, []string{"reordered-append a"}},
		{"phantom append", []history.Op{ap(1, "a", 1, 0, 10), final(ra(2, "a", u64(1, 9), 40, 50))}, []string{"phantom-append a"}},
		{"phantom append of a failed append", []history.Op{ap(1, "a", 1, 0, 10), fail(ap(1, "a", 2, 20, 30), "ENOSPC"),
			final(ra(2, "a", u64(1, 2), 40, 50))}, []string{"phantom-append a"}},
		{"record read before its append", []history.Op{ra(2, "a", u64(1), 0, 5), ap(1, "a", 1, 10, 20)}, []string{"phantom-append a"}},
		{"corrupt read-appends", []history.Op{ap(1, "a", 1, 0, 10), corrupt(ra(2, "a", nil, 20, 30))}, []string{"corrupt a"}},
		{"two appenders", []history.Op{ap(1, "a", 1, 0, 10), ap(2, "a", 2, 20, 30), final(ra(3, "a", u64(1, 2), 40, 50))}, []string{"bad-history a"}},

		// Names, good.
		{"names sequential", []history.Op{nameOp(1, cr, "d", "a", 0, 10), fail(nameOp(1, cr, "d", "a", 20, 30), "EEXIST"), st(1, "d", "a", true, 40, 50),
			rn(1, "d", "a", "b", 60, 70), fail(nameOp(1, ul, "d", "a", 80, 90), "ENOENT"), fail(rn(1, "d", "a", "c", 100, 110), "ENOENT"),
			ls(1, "d", names("b"), 120, 130), rn(1, "d", "b", "b", 135, 138), nameOp(1, ul, "d", "b", 140, 150), st(1, "d", "b", false, 160, 170),
			fail(st(1, "d", "b", false, 175, 178), "ENOENT"), ls(1, "d", nil, 180, 190)}, nil},
		{"rename replaces", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, cr, "d", "b", 20, 30), rn(1, "d", "a", "b", 40, 50),
			final(ls(2, "d", names("b"), 60, 70))}, nil},
		{"names concurrent creates", []history.Op{nameOp(1, cr, "d", "a", 0, 20), fail(nameOp(2, cr, "d", "a", 5, 25), "EEXIST"), st(3, "d", "a", true, 30, 40)}, nil},
		{"names concurrent create and stat", []history.Op{nameOp(1, cr, "d", "a", 0, 20), st(2, "d", "a", false, 5, 10), st(3, "d", "a", true, 12, 15)}, nil},
		{"unknown create that happened", []history.Op{unknown(nameOp(1, cr, "d", "a", 0, 10)), st(2, "d", "a", true, 20, 30), ls(2, "d", names("a"), 40, 50)}, nil},
		{"unknown create that never did", []history.Op{unknown(nameOp(1, cr, "d", "a", 0, 10)), st(2, "d", "a", false, 20, 30), nameOp(2, cr, "d", "a", 40, 50)}, nil},
		{"unknown unlink and rename", []history.Op{nameOp(1, cr, "d", "a", 0, 10), unknown(rn(1, "d", "a", "b", 20, 30)), unknown(nameOp(1, ul, "d", "b", 40, 50)),
			ls(2, "d", names("b"), 60, 70), ls(2, "d", nil, 80, 90)}, nil},
		{"create failing for another reason", []history.Op{fail(nameOp(1, cr, "d", "a", 0, 10), "ENOSPC"), st(2, "d", "a", false, 20, 30)}, nil},
		{"unknown stat and list", []history.Op{unknown(st(1, "d", "a", true, 0, 10)), unknown(ls(2, "d", names("zz"), 0, 10))}, nil},
		// Names, bad.
		{"create twice", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(2, cr, "d", "a", 20, 30)}, []string{"names-not-linearizable d"}},
		{"create EEXIST on an empty directory", []history.Op{fail(nameOp(1, cr, "d", "a", 0, 10), "EEXIST")}, []string{"names-not-linearizable d"}},
		{"unlink of an absent name", []history.Op{nameOp(1, ul, "d", "a", 0, 10)}, []string{"names-not-linearizable d"}},
		{"rename of an absent name", []history.Op{rn(1, "d", "a", "b", 0, 10)}, []string{"names-not-linearizable d"}},
		{"rename ENOENT of a present name", []history.Op{nameOp(1, cr, "d", "a", 0, 10), fail(rn(1, "d", "a", "b", 20, 30), "ENOENT")}, []string{"names-not-linearizable d"}},
		{"name back after unlink", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30), st(2, "d", "a", true, 40, 50)}, []string{"names-not-linearizable d"}},
		{"old name after rename", []history.Op{nameOp(1, cr, "d", "a", 0, 10), rn(1, "d", "a", "b", 20, 30), st(2, "d", "a", true, 40, 50)}, []string{"names-not-linearizable d"}},
		{"list during a rename shows both names (readdir is no snapshot)", []history.Op{nameOp(1, cr, "d", "a", 0, 10),
			rn(2, "d", "a", "b", 20, 40), ls(3, "d", names("a", "b"), 15, 45), final(ls(3, "d", names("b"), 50, 60))}, nil},
		{"list after a rename shows both names", []history.Op{nameOp(1, cr, "d", "a", 0, 10),
			rn(2, "d", "a", "b", 20, 30), ls(3, "d", names("a", "b"), 35, 45)}, []string{"names-not-linearizable d"}},
		{"list with a name never created", []history.Op{nameOp(1, cr, "d", "a", 0, 10), ls(2, "d", names("a", "ghost"), 20, 30)}, []string{"names-not-linearizable d"}},
		{"list missing a name", []history.Op{nameOp(1, cr, "d", "a", 0, 10), final(ls(2, "d", nil, 20, 30))}, []string{"names-not-linearizable d"}},
		{"list naming one twice", []history.Op{nameOp(1, cr, "d", "a", 0, 10), ls(2, "d", names("a", "a"), 20, 30)}, []string{"names-not-linearizable d"}},

		// Histories that are wrong themselves.
		{"malformed op", []history.Op{w(1, "r", 1, 10, 5)}, []string{"bad-history r"}},
		{"process running two ops at once", []history.Op{w(1, "r", 1, 0, 10), r(1, "r", 1, 5, 15)}, []string{"bad-history r"}},
		{"process on two hosts", []history.Op{w(1, "r", 1, 0, 10), func() history.Op { op := r(1, "r", 1, 20, 30); op.Host = "elsewhere"; return op }()}, []string{"bad-history r"}},
		{"key used as file and directory", []history.Op{w(1, "k", 1, 0, 10), nameOp(2, cr, "k", "a", 0, 10)}, []string{"bad-history k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.ops, Options{Timeout: 10 * time.Second})
			if got := found(rep); !slices.Equal(got, tc.want) {
				t.Errorf("found %q, want %q\n%s", got, tc.want, rep)
			}
			if len(rep.Undecided) > 0 {
				t.Errorf("undecided: %v", rep.Undecided)
			}
			for _, a := range rep.Anomalies {
				if a.Detail == "" || len(a.Ops) == 0 || len(a.Ops) > MaxAnomalyOps {
					t.Errorf("anomaly %s %s: detail %q, %d ops", a.Class, a.Key, a.Detail, len(a.Ops))
				}
			}
		})
	}
}

func TestReport(t *testing.T) {
	ops := []history.Op{
		w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 30), final(r(2, "r", 1, 40, 50)),
		fail(w(3, "q", 5, 0, 10), "ENOSPC"), unknown(w(3, "q", 6, 20, 30)),
		ap(4, "a", 1, 0, 10), final(ra(5, "a", nil, 20, 30)), r(6, "r", 2, 60, 70), r(6, "r", 1, 80, 90),
	}
	rep := Check(ops, Options{})
	if rep.Ops != 9 || rep.OK != 7 || rep.Failed != 1 || rep.Unknown != 1 || rep.Keys != 3 {
		t.Errorf("counts: %+v", rep)
	}
	if rep.Valid() {
		t.Error("Valid with anomalies")
	}
	s := rep.String()
	for _, want := range []string{"9 ops (7 ok, 1 failed, 1 unknown) over 3 keys: 2 anomalies", "lost-write r: ", "lost-append a: "} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	// The final read is the lost write's evidence; the later stale read is
	// not reported again as stale, being the same key's loss.
	if got := found(rep); !slices.Equal(got, []string{"lost-append a", "lost-write r"}) {
		t.Errorf("found %q", got)
	}
	if s := Check(nil, Options{}).String(); !strings.Contains(s, "0 ops (0 ok, 0 failed, 0 unknown) over 0 keys: no anomaly") {
		t.Errorf("empty history: %q", s)
	}
}

// TestStaleReadWitness checks that a linearizability failure shows the read
// that cannot be placed and the write of the value it returned, even when
// that write is far back.
func TestStaleReadWitness(t *testing.T) {
	ops := []history.Op{w(1, "r", 1, 0, 10), w(1, "r", 2, 20, 30)}
	for i := range 40 {
		ops = append(ops, r(2, "r", 2, int64(40+10*i), int64(45+10*i)))
	}
	stale := r(3, "r", 1, 1000, 1010)
	ops = append(ops, stale)
	rep := Check(ops, Options{})
	if len(rep.Anomalies) != 1 || rep.Anomalies[0].Class != StaleRead {
		t.Fatalf("found %q, want one stale read", found(rep))
	}
	a := rep.Anomalies[0]
	if !slices.ContainsFunc(a.Ops, func(op history.Op) bool { return op.Process == 3 }) ||
		!slices.ContainsFunc(a.Ops, func(op history.Op) bool { return op.Kind == history.Write && op.Value == 1 }) {
		t.Errorf("witness lacks the stale read or the write it saw: %v", a.Ops)
	}
	if !strings.Contains(a.Detail, stale.String()) {
		t.Errorf("detail does not name the stale read: %s", a.Detail)
	}
}

// TestUndecided gives the search no time at all for a history of many
// unknown writes, all possibly in effect at once, and reads that no order
// explains. The key is undecided, not an anomaly.
func TestUndecided(t *testing.T) {
	var ops []history.Op
	const n = 60
	for i := range n {
		ops = append(ops, unknown(w(i, "r", uint64(i+1), 0, 1)))
	}
	for i := range n {
		ops = append(ops, r(n, "r", uint64(i+1), int64(10+10*i), int64(15+10*i)))
	}
	ops = append(ops, r(n, "r", 1, 10000, 10001)) // needs write 1 after all the others: impossible
	rep := Check(ops, Options{Timeout: time.Nanosecond})
	if len(rep.Anomalies) != 0 {
		t.Errorf("anomalies on a timed-out search: %s", rep)
	}
	// Given time, the search decides it: write 1 cannot take effect twice.
	if rep := Check(ops, Options{}); len(rep.Anomalies) != 1 || rep.Anomalies[0].Class != StaleRead {
		t.Errorf("with time: %s, want one stale read", rep)
	}
	if !slices.Equal(rep.Undecided, []string{"r"}) {
		t.Errorf("undecided %v, want [r]", rep.Undecided)
	}
}

// TestBadHistoryMerged checks that bad history found both across keys (a
// process running two operations at once) and within one (a value written
// twice) is one anomaly of the key, saying both.
func TestBadHistoryMerged(t *testing.T) {
	rep := Check([]history.Op{w(1, "r", 1, 0, 10), w(1, "r", 1, 5, 15)}, Options{})
	if got := found(rep); !slices.Equal(got, []string{"bad-history r"}) {
		t.Fatalf("found %q", got)
	}
	if d := rep.Anomalies[0].Detail; !strings.Contains(d, "process 1 started") || !strings.Contains(d, "value 1 written twice") {
		t.Errorf("detail %q lacks one of the two", d)
	}
}

// TestNameStaleness: a view of a directory may lag its changes by
// Options.NameStaleness, no more, and changes themselves get no slack.
func TestNameStaleness(t *testing.T) {
	cr, ul := history.Create, history.Unlink
	for _, tc := range []struct {
		name      string
		ops       []history.Op
		staleness time.Duration
		want      []string
	}{
		{"stat within the staleness", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30),
			st(2, "d", "a", true, 35, 40)}, 10, nil},
		{"stat past the staleness", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30),
			st(2, "d", "a", true, 45, 50)}, 10, []string{"names-not-linearizable d"}},
		{"no staleness", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30),
			st(2, "d", "a", true, 35, 40)}, 0, []string{"names-not-linearizable d"}},
		{"a listing within it", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30),
			ls(2, "d", []string{"a"}, 35, 40)}, 10, nil},
		{"a failed create within it", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30),
			fail(nameOp(2, cr, "d", "a", 35, 40), "EEXIST")}, 10, nil},
		{"a change gets no slack", []history.Op{nameOp(1, cr, "d", "a", 0, 10), nameOp(1, ul, "d", "a", 20, 30),
			nameOp(2, ul, "d", "a", 35, 40)}, 10, []string{"names-not-linearizable d"}},
	} {
		rep := Check(tc.ops, Options{Timeout: 10 * time.Second, NameStaleness: tc.staleness})
		if got := found(rep); !slices.Equal(got, tc.want) {
			t.Errorf("%s: found %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHostEarly: a read that saw a write still running on its own host may
// have seen the host's page cache; it may take effect as late as the
// write's end. In each case c2 writes 2 over [15,40] and a process reads 2
// at [20,22], before c1's write of 3 over [24,26]; a final read of 2 then
// puts c1's write before c2's, which only the slack explains.
func TestHostEarly(t *testing.T) {
	onHost := func(op history.Op, host string) history.Op { op.Host = host; return op }
	tail := []history.Op{onHost(w(5, "r", 3, 24, 26), "c1"), onHost(r(6, "r", 2, 45, 50), "c1")}
	for _, tc := range []struct {
		name      string
		ops       []history.Op
		early     int
		anomalies int
	}{
		{"read on the writer's host", append([]history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c2"), onHost(r(4, "r", 2, 20, 22), "c2")}, tail...), 1, 0},
		{"read on another host", append([]history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c2"), onHost(r(4, "r", 2, 20, 22), "c3")}, tail...), 0, 1},
		{"the value read again after it was overwritten", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c2"), onHost(r(4, "r", 2, 20, 22), "c2"), onHost(w(5, "r", 3, 41, 45), "c1"), onHost(r(2, "r", 2, 50, 55), "c1")}, 1, 1},
		{"the write timed out: the host's cache says nothing of other hosts", []history.Op{w(1, "r", 1, 0, 10), onHost(unknown(w(3, "r", 2, 15, 40)), "c2"), onHost(r(4, "r", 2, 20, 22), "c2"), onHost(r(6, "r", 1, 45, 50), "c1")}, 1, 0},
		{"the same write acknowledged: the old value after it is stale", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c2"), onHost(r(4, "r", 2, 20, 22), "c2"), onHost(r(6, "r", 1, 45, 50), "c1")}, 1, 1},
		{"write ended before the read did", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 21), "c2"), onHost(r(4, "r", 2, 20, 22), "c2"), onHost(r(2, "r", 1, 25, 30), "c1")}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.ops, Options{})
			if rep.HostEarly != tc.early || len(rep.Anomalies) != tc.anomalies {
				t.Errorf("%d early on their host, %d anomalies; want %d, %d: %s", rep.HostEarly, len(rep.Anomalies), tc.early, tc.anomalies, rep)
			}
		})
	}
}

// TestCloseToOpen: a read must see every write that ended before it began
// (closed before its open), but may miss one still being written even
// after another host's read saw it, again and again; the writes keep one
// order all reads agree with, and a process's reads do not go backwards.
func TestCloseToOpen(t *testing.T) {
	onHost := func(op history.Op, host string) history.Op { op.Host = host; return op }
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want []string
	}{
		{"old value while the write is open, after another host saw the new", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c3"), onHost(r(2, "r", 2, 20, 22), "c2"), onHost(r(4, "r", 1, 25, 30), "c1")}, nil},
		{"old value twice while the write is open, after another host saw the new", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c3"), onHost(r(2, "r", 2, 20, 22), "c2"), onHost(r(4, "r", 1, 23, 24), "c1"), onHost(r(4, "r", 1, 25, 30), "c1")}, nil},
		{"old value after the write closed", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 24), "c3"), onHost(r(2, "r", 2, 20, 22), "c2"), onHost(r(4, "r", 1, 25, 30), "c1")}, []string{"stale-read r"}},
		{"two hosts disagree on which of two closed writes came last", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c3"), onHost(w(5, "r", 3, 16, 41), "c4"), onHost(r(2, "r", 2, 50, 55), "c2"), onHost(r(4, "r", 3, 56, 60), "c1")}, []string{"stale-read r"}},
		{"a process's reads going backwards while the write is open", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c3"), onHost(r(2, "r", 2, 20, 22), "c2"), onHost(r(2, "r", 1, 25, 30), "c2")}, []string{"stale-read r"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := found(Check(tc.ops, Options{})); !slices.Equal(got, tc.want) {
				t.Errorf("found %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHostTorn: a read torn while a process on its own host overwrote the
// register is the host's page cache (Report.HostTorn), not an anomaly; the
// same read with the write on another host, or after the write ended, is.
func TestHostTorn(t *testing.T) {
	onHost := func(op history.Op, host string) history.Op { op.Host = host; return op }
	for _, tc := range []struct {
		name      string
		ops       []history.Op
		torn      int
		anomalies int
	}{
		{"during a write on its host", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 40), "c2"), corrupt(r(2, "r", 0, 20, 30))}, 1, 0},
		{"during an unknown write on its host", []history.Op{w(1, "r", 1, 0, 10), onHost(unknown(w(3, "r", 2, 15, 16)), "c2"), corrupt(r(2, "r", 0, 20, 30))}, 1, 0},
		{"after the write on its host ended", []history.Op{w(1, "r", 1, 0, 10), onHost(w(3, "r", 2, 15, 18), "c2"), corrupt(r(2, "r", 0, 20, 30))}, 0, 1},
		{"during a write on another host", []history.Op{w(1, "r", 1, 0, 10), w(3, "r", 2, 15, 40), corrupt(r(2, "r", 0, 20, 30))}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.ops, Options{})
			if rep.HostTorn != tc.torn || len(rep.Anomalies) != tc.anomalies {
				t.Errorf("%d torn on their host, %d anomalies; want %d, %d: %s", rep.HostTorn, len(rep.Anomalies), tc.torn, tc.anomalies, rep)
			}
		})
	}
}
