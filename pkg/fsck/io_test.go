package fsck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// memVolume serves a snapshot as Scanner and Applier, in pages of two
// records, and applies the ops PlanRepair emits. failTxn makes the first
// n Txn calls fail in transport (after applying, when applyThenFail).
type memVolume struct {
	s             *Snapshot
	failScan      error
	failTxn       int
	applyThenFail bool
	ids           []uint64 // request ids seen, in order
	applied       map[uint64]bool
}

func (m *memVolume) part(id uint64) (*PartitionSnapshot, error) {
	for i := range m.s.Partitions {
		if m.s.Partitions[i].ID == id {
			return &m.s.Partitions[i], nil
		}
	}
	return nil, fmt.Errorf("no partition %d", id)
}

func (m *memVolume) ScanInodes(_ context.Context, part, after uint64, _ uint32) ([]*metapb.Inode, bool, error) {
	if m.failScan != nil {
		return nil, false, m.failScan
	}
	p, err := m.part(part)
	if err != nil {
		return nil, false, err
	}
	ins := slices.Clone(p.Inodes)
	slices.SortFunc(ins, func(a, b *metapb.Inode) int { return int(a.Ino) - int(b.Ino) })
	var out []*metapb.Inode
	for _, in := range ins {
		if in.Ino > after {
			if len(out) == 2 {
				return out, true, nil
			}
			out = append(out, in)
		}
	}
	return out, false, nil
}

func (m *memVolume) ScanDentries(_ context.Context, part, afterParent uint64, afterName []byte, _ uint32) ([]*metapb.Dentry, bool, error) {
	p, err := m.part(part)
	if err != nil {
		return nil, false, err
	}
	ds := slices.Clone(p.Dentries)
	slices.SortFunc(ds, func(a, b *metapb.Dentry) int {
		if a.Parent != b.Parent {
			return int(a.Parent) - int(b.Parent)
		}
		return strings.Compare(string(a.Name), string(b.Name))
	})
	var out []*metapb.Dentry
	for _, d := range ds {
		if dentryAfter(d, afterParent, afterName) {
			if len(out) == 2 {
				return out, true, nil
			}
			out = append(out, d)
		}
	}
	return out, false, nil
}

func (m *memVolume) GetInode(_ context.Context, part, ino uint64) (*metapb.Inode, error) {
	p, err := m.part(part)
	if err != nil {
		return nil, err
	}
	for _, in := range p.Inodes {
		if in.Ino == ino {
			return in, nil
		}
	}
	return nil, fmt.Errorf("inode %d: %w", ino, ErrNoInode)
}

func (m *memVolume) Txn(_ context.Context, part uint64, txn *metapb.Txn) (*metapb.TxnResult, error) {
	m.ids = append(m.ids, txn.RequestId)
	fail := m.failTxn > 0
	m.failTxn--
	if fail && !m.applyThenFail {
		return nil, errors.New("connection refused")
	}
	if m.applied == nil {
		m.applied = map[uint64]bool{}
	}
	if !m.applied[txn.RequestId] {
		p, err := m.part(part)
		if err != nil {
			return nil, err
		}
		for _, op := range txn.Ops {
			switch o := op.Op.(type) {
			case *metapb.Op_Link:
				in, _ := m.GetInode(context.Background(), part, o.Link.Ino)
				in.Nlink = uint32(int64(in.Nlink) + int64(o.Link.Delta))
			case *metapb.Op_TouchDir:
				in, _ := m.GetInode(context.Background(), part, o.TouchDir.Ino)
				in.Nlink = uint32(int64(in.Nlink) + int64(o.TouchDir.NlinkDelta))
			case *metapb.Op_Evict:
				p.Inodes = slices.DeleteFunc(p.Inodes, func(in *metapb.Inode) bool { return in.Ino == o.Evict.Ino })
			case *metapb.Op_DeleteDentry:
				p.Dentries = slices.DeleteFunc(p.Dentries, func(d *metapb.Dentry) bool {
					return d.Parent == o.DeleteDentry.Parent && string(d.Name) == string(o.DeleteDentry.Name)
				})
			default:
				return &metapb.TxnResult{Errno: 22, Message: fmt.Sprintf("unsupported %T", o)}, nil
			}
		}
		m.applied[txn.RequestId] = true
	}
	if fail {
		return nil, errors.New("deadline exceeded")
	}
	return &metapb.TxnResult{}, nil
}

func layoutOf(s *Snapshot) *Layout {
	l := &Layout{Volume: s.Volume, Routing: s.Routing}
	for _, p := range s.Partitions {
		l.Partitions = append(l.Partitions, PartitionSnapshot{ID: p.ID, InodeStart: p.InodeStart, InodeEnd: p.InodeEnd})
	}
	return l
}

func TestCollectPagesEverything(t *testing.T) {
	want := base().snapshot()
	m := &memVolume{s: want}
	var progress []Progress
	got, err := Collect(context.Background(), m, layoutOf(want), func(p Progress) { progress = append(progress, p) })
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got.Partitions {
		w := want.Partitions[i]
		if len(p.Inodes) != len(w.Inodes) || len(p.Dentries) != len(w.Dentries) {
			t.Fatalf("partition %d: got %d inodes %d dentries, want %d and %d", p.ID, len(p.Inodes), len(p.Dentries), len(w.Inodes), len(w.Dentries))
		}
	}
	if fs := Check(got); len(fs) != 0 {
		t.Fatalf("collected clean volume has findings %+v", fs)
	}
	// Every partition reports both kinds, the last report of each done, and
	// counts grow.
	last := map[string]Progress{}
	for _, p := range progress {
		k := fmt.Sprintf("%d/%s", p.Partition, p.Kind)
		if prev, ok := last[k]; ok && (prev.Done || p.Records < prev.Records) {
			t.Fatalf("progress %+v after %+v", p, prev)
		}
		last[k] = p
	}
	if len(last) != 4 {
		t.Fatalf("progress for %d partition/kind pairs, want 4", len(last))
	}
	for k, p := range last {
		if !p.Done {
			t.Fatalf("%s never done", k)
		}
	}
}

func TestCollectError(t *testing.T) {
	s := base().snapshot()
	m := &memVolume{s: s, failScan: errors.New("boom")}
	_, err := Collect(context.Background(), m, layoutOf(s), nil)
	if err == nil || !strings.Contains(err.Error(), "scan inodes of partition") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got %v", err)
	}
}

// stuckScanner returns the same page forever.
type stuckScanner struct{ memVolume }

func (stuckScanner) ScanInodes(context.Context, uint64, uint64, uint32) ([]*metapb.Inode, bool, error) {
	return []*metapb.Inode{{Ino: 1}}, true, nil
}

func TestCollectRefusesNonAdvancingPages(t *testing.T) {
	s := base().snapshot()
	_, err := Collect(context.Background(), &stuckScanner{memVolume{s: s}}, layoutOf(s), nil)
	if err == nil || !strings.Contains(err.Error(), "does not advance") {
		t.Fatalf("got %v", err)
	}
}

func TestApplyRepairsAndRechecksClean(t *testing.T) {
	n := base()
	n.drop(102, "x")        // orphan 103
	n.inodes[3].Nlink++     // file one link too many
	n.inodes[1].Nlink--     // root misses a subdirectory
	n.file(1, "ghost", 150) // dangling name
	delete(n.inodes, 150)   //
	s := n.snapshot()
	m := &memVolume{s: s}
	fs := Check(s)
	plan := PlanRepair(fs, PlanOptions{Now: testNow, Grace: DefaultGrace})
	if len(plan.Actions) != 4 {
		t.Fatalf("plan %+v", plan)
	}
	for i, oc := range Apply(context.Background(), m, plan, ApplyOptions{}) {
		if !oc.Applied {
			t.Fatalf("action %d (%s) not applied: %s", i, plan.Actions[i].Description, oc.Reason)
		}
	}
	again, err := Collect(context.Background(), m, layoutOf(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	if fs := Check(again); len(fs) != 0 {
		t.Fatalf("after repair: %+v", fs)
	}
}

func TestApplyRetriesWithTheSameRequestID(t *testing.T) {
	n := base()
	n.inodes[3].Nlink++
	s := n.snapshot()
	// The first try applies but its answer is lost; the retry must not apply
	// the delta again.
	m := &memVolume{s: s, failTxn: 1, applyThenFail: true}
	next := uint64(40)
	plan := PlanRepair(Check(s), PlanOptions{Now: testNow, Grace: DefaultGrace})
	ocs := Apply(context.Background(), m, plan, ApplyOptions{NewID: func() uint64 { next++; return next }})
	if len(ocs) != 1 || !ocs[0].Applied {
		t.Fatalf("outcomes %+v", ocs)
	}
	if !slices.Equal(m.ids, []uint64{41, 41}) {
		t.Fatalf("request ids %v, want [41 41]", m.ids)
	}
	if in, _ := m.GetInode(context.Background(), 1, 3); in.Nlink != 2 {
		t.Fatalf("nlink %d after retried repair, want 2", in.Nlink)
	}
}

func TestApplySkipsChangedRecords(t *testing.T) {
	cases := []struct {
		name   string
		change func(m *memVolume)
		reason string
	}{
		{"nlink changed", func(m *memVolume) { in, _ := m.GetInode(context.Background(), 1, 3); in.Nlink++ }, "changed since the scan"},
		{"ctime changed", func(m *memVolume) { in, _ := m.GetInode(context.Background(), 1, 3); in.CtimeNs++ }, "changed since the scan"},
		{"evicted", func(m *memVolume) {
			p, _ := m.part(1)
			p.Inodes = slices.DeleteFunc(p.Inodes, func(in *metapb.Inode) bool { return in.Ino == 3 })
		}, "gone since the scan"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := base()
			n.inodes[3].Nlink++
			s := n.snapshot()
			m := &memVolume{s: s}
			plan := PlanRepair(Check(s), PlanOptions{Now: testNow, Grace: DefaultGrace})
			c.change(m)
			ocs := Apply(context.Background(), m, plan, ApplyOptions{})
			if len(ocs) != 1 || ocs[0].Applied || !strings.Contains(ocs[0].Reason, c.reason) {
				t.Fatalf("outcomes %+v, want skipped with %q", ocs, c.reason)
			}
			if len(m.ids) != 0 {
				t.Fatalf("sent %d Txns", len(m.ids))
			}
		})
	}
}

func TestApplyDanglingNameSkippedWhenInodeAppears(t *testing.T) {
	n := base()
	n.file(1, "ghost", 150)
	delete(n.inodes, 150)
	s := n.snapshot()
	m := &memVolume{s: s}
	plan := PlanRepair(Check(s), PlanOptions{Now: testNow, Grace: DefaultGrace})
	p, _ := m.part(2)
	p.Inodes = append(p.Inodes, &metapb.Inode{Ino: 150, Type: fileT, Nlink: 1})
	ocs := Apply(context.Background(), m, plan, ApplyOptions{})
	if len(ocs) != 1 || ocs[0].Applied || !strings.Contains(ocs[0].Reason, "exists now") {
		t.Fatalf("outcomes %+v", ocs)
	}
}

func TestApplyGivesUpAfterAttempts(t *testing.T) {
	n := base()
	n.inodes[3].Nlink++
	s := n.snapshot()
	m := &memVolume{s: s, failTxn: 5}
	plan := PlanRepair(Check(s), PlanOptions{Now: testNow, Grace: DefaultGrace})
	ocs := Apply(context.Background(), m, plan, ApplyOptions{Attempts: 2})
	if len(ocs) != 1 || ocs[0].Applied || !strings.Contains(ocs[0].Reason, "connection refused") || len(m.ids) != 2 {
		t.Fatalf("outcomes %+v after %d tries", ocs, len(m.ids))
	}
}

func TestSweeperReclaimsOrphansSeenTwice(t *testing.T) {
	n := base()
	n.drop(102, "x")    // orphan 103
	n.inodes[3].Nlink++ // not an orphan: the sweeper leaves it
	s := n.snapshot()
	m := &memVolume{s: s}
	var logs []string
	sw := &Sweeper{
		Layout:  func(context.Context) (*Layout, error) { return layoutOf(s), nil },
		Scanner: m, Applier: m,
		Now:  func() time.Time { return testNow },
		Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
	}
	want := []SweepResult{{Found: 1, Waiting: 1}, {Found: 1, Reclaimed: 1}, {}}
	for round, w := range want {
		r, err := sw.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r != w {
			t.Fatalf("round %d: %+v, want %+v", round, r, w)
		}
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "reclaimed") || !strings.Contains(logs[0], "inode 103") {
		t.Fatalf("logs %q", logs)
	}
	if in, _ := m.GetInode(context.Background(), 1, 3); in.Nlink != 3 {
		t.Fatalf("sweeper touched a non-orphan: nlink %d", in.Nlink)
	}
}

func TestSweeperRunStopsWithContext(t *testing.T) {
	s := base().snapshot()
	m := &memVolume{s: s}
	ctx, cancel := context.WithCancel(context.Background())
	rounds := 0
	sw := &Sweeper{
		Layout: func(context.Context) (*Layout, error) {
			if rounds++; rounds == 2 {
				cancel()
			}
			return layoutOf(s), nil
		},
		Scanner: m, Applier: m, Interval: time.Millisecond,
	}
	if err := sw.Run(ctx); !errors.Is(err, context.Canceled) || rounds != 2 {
		t.Fatalf("Run = %v after %d rounds", err, rounds)
	}
}
