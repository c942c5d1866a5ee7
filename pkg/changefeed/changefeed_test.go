package changefeed

import (
	"slices"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

func TestOf(t *testing.T) {
	op := func(o any) *metapb.Op {
		switch o := o.(type) {
		case *metapb.CreateDentry:
			return &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: o}}
		case *metapb.DeleteDentry:
			return &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: o}}
		case *metapb.ReplaceDentry:
			return &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: o}}
		case *metapb.SettleDentry:
			return &metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: o}}
		case *metapb.TouchDir:
			return &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: o}}
		case *metapb.Link:
			return &metapb.Op{Op: &metapb.Op_Link{Link: o}}
		case *metapb.AppendExtents:
			return &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: o}}
		case *metapb.CreateInode:
			return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: o}}
		case *metapb.Fence:
			return &metapb.Op{Op: &metapb.Op_Fence{Fence: o}}
		case *metapb.PurgeDentries:
			return &metapb.Op{Op: &metapb.Op_PurgeDentries{PurgeDentries: o}}
		case *metapb.SetRouting:
			return &metapb.Op{Op: &metapb.Op_SetRouting{SetRouting: o}}
		}
		t.Fatalf("no case for %T", o)
		return nil
	}
	cases := []struct {
		name       string
		ops        []*metapb.Op
		wantNames  []Name
		wantInodes []uint64
		wantReset  bool
	}{
		{"create", []*metapb.Op{op(&metapb.CreateInode{}), op(&metapb.CreateDentry{Parent: 1, Name: []byte("a"), Ino: 9}), op(&metapb.TouchDir{Ino: 1})},
			[]Name{{1, "a"}}, []uint64{1}, false},
		{"rename over", []*metapb.Op{op(&metapb.DeleteDentry{Parent: 1, Name: []byte("a")}), op(&metapb.ReplaceDentry{Parent: 2, Name: []byte("b"), Ino: 9}), op(&metapb.Link{Ino: 7, Delta: -1})},
			[]Name{{1, "a"}, {2, "b"}}, []uint64{7}, false},
		{"settle", []*metapb.Op{op(&metapb.SettleDentry{Parent: 2, Name: []byte("b"), Ino: 9, Id: 5})}, []Name{{2, "b"}}, nil, false},
		{"close", []*metapb.Op{op(&metapb.AppendExtents{Ino: 9, Size: 4096})}, nil, []uint64{9}, false},
		{"fence", []*metapb.Op{op(&metapb.Fence{Parent: 3})}, nil, nil, false},
		{"migration", []*metapb.Op{op(&metapb.PurgeDentries{})}, nil, nil, true},
		{"routing", []*metapb.Op{op(&metapb.SetRouting{})}, nil, nil, true},
		{"unknown op", []*metapb.Op{{}}, nil, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			names, inodes, reset := Of(&metapb.Txn{Ops: c.ops})
			if !slices.Equal(names, c.wantNames) || !slices.Equal(inodes, c.wantInodes) || reset != c.wantReset {
				t.Fatalf("Of = %v %v %v, want %v %v %v", names, inodes, reset, c.wantNames, c.wantInodes, c.wantReset)
			}
		})
	}
}

func TestLogSince(t *testing.T) {
	const me, other = 10, 20
	type add struct {
		index, origin uint64
		names         []Name
		inodes        []uint64
		reset         bool
	}
	type step struct {
		add      *add
		advance  uint64
		restored bool
		// since
		cursor, origin uint64
		want           Batch
	}
	since := func(cursor, origin uint64, want Batch) step { return step{cursor: cursor, origin: origin, want: want} }
	cases := []struct {
		name  string
		max   int
		steps []step
	}{
		{"a new caller gets every change of a log that vouches for them all", 0, []step{
			{add: &add{index: 5, origin: other, names: []Name{{1, "a"}}}},
			since(0, me, Batch{Cursor: 5, Names: []Name{{1, "a"}}}),
		}},
		{"a caller answered at 0 by an empty log is not reset by the first change", 0, []step{
			since(0, me, Batch{}),
			{add: &add{index: 1, origin: me, inodes: []uint64{7}}},
			{add: &add{index: 2, origin: other, inodes: []uint64{8}}},
			since(0, me, Batch{Cursor: 2, Inodes: []uint64{8}}),
		}},
		{"a new caller of a log with evicted history is reset to the last index", 2, []step{
			{add: &add{index: 3, origin: other, inodes: []uint64{4}}},
			{add: &add{index: 5, origin: other, inodes: []uint64{5, 6}}},
			since(0, me, Batch{Cursor: 5, Reset: true}),
		}},
		{"own changes are left out, others' listed once", 0, []step{
			{add: &add{index: 3, origin: me, names: []Name{{1, "mine"}}, inodes: []uint64{1}}},
			{add: &add{index: 4, origin: other, names: []Name{{1, "a"}}, inodes: []uint64{1}}},
			{add: &add{index: 4, origin: 0, inodes: []uint64{1, 9}}},
			since(2, me, Batch{Cursor: 4, Names: []Name{{1, "a"}}, Inodes: []uint64{1, 9}}),
			since(3, me, Batch{Cursor: 4, Names: []Name{{1, "a"}}, Inodes: []uint64{1, 9}}),
			since(4, me, Batch{Cursor: 4}),
		}},
		{"origin 0 asks for everything", 0, []step{
			{add: &add{index: 3, origin: me, names: []Name{{1, "mine"}}}},
			since(2, 0, Batch{Cursor: 3, Names: []Name{{1, "mine"}}}),
		}},
		{"entries without changes move the cursor", 0, []step{
			{add: &add{index: 3, origin: other, inodes: []uint64{4}}},
			{advance: 8},
			since(3, me, Batch{Cursor: 8}),
			since(2, me, Batch{Cursor: 8, Inodes: []uint64{4}}),
		}},
		{"a reset record resets every caller, own or not", 0, []step{
			{add: &add{index: 3, origin: me, reset: true}},
			{add: &add{index: 4, origin: other, inodes: []uint64{4}}},
			since(2, me, Batch{Cursor: 4, Reset: true}),
			since(3, me, Batch{Cursor: 4, Inodes: []uint64{4}}),
		}},
		{"evicted history resets older cursors", 4, []step{
			{add: &add{index: 3, origin: other, inodes: []uint64{4}}},    // 2 items
			{add: &add{index: 4, origin: other, inodes: []uint64{5}}},    // 4 items
			{add: &add{index: 5, origin: other, inodes: []uint64{6, 7}}}, // 7: index 3 and 4 go
			since(2, me, Batch{Cursor: 5, Reset: true}),
			since(3, me, Batch{Cursor: 5, Reset: true}),
			since(4, me, Batch{Cursor: 5, Inodes: []uint64{6, 7}}),
		}},
		{"a restored snapshot resets until the next entry, then vouches from there", 0, []step{
			{add: &add{index: 3, origin: other, inodes: []uint64{4}}},
			{restored: true},
			since(3, me, Batch{Cursor: 3, Reset: true}),
			{add: &add{index: 20, origin: other, inodes: []uint64{5}}},
			since(3, me, Batch{Cursor: 20, Reset: true}),
			since(19, me, Batch{Cursor: 20, Inodes: []uint64{5}}),
		}},
		{"a new caller of an empty log waits like any other", 0, []step{
			since(0, me, Batch{}),
		}},
		{"a cursor ahead of this replica resets", 0, []step{
			{advance: 5},
			since(9, me, Batch{Cursor: 5, Reset: true}),
		}},
		{"more than the limit resets", 0, []step{
			{add: &add{index: 3, origin: other, inodes: []uint64{1, 2, 3, 4, 5}}},
			since(2, me, Batch{Cursor: 3, Reset: true}),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewLog(c.max)
			for i, s := range c.steps {
				switch {
				case s.add != nil:
					l.Add(s.add.index, s.add.origin, s.add.names, s.add.inodes, s.add.reset)
				case s.advance != 0:
					l.Advance(s.advance)
				case s.restored:
					l.Restored()
				default:
					got := l.Since(s.cursor, s.origin, 4)
					slices.Sort(got.Inodes)
					if got.Cursor != s.want.Cursor || got.Reset != s.want.Reset || !slices.Equal(got.Names, s.want.Names) || !slices.Equal(got.Inodes, s.want.Inodes) {
						t.Fatalf("step %d: Since(%d, %d) = %+v, want %+v", i, s.cursor, s.origin, got, s.want)
					}
				}
			}
		})
	}
}

func TestLogWait(t *testing.T) {
	l := NewLog(0)
	mine, stopMine := l.Wait(10)
	defer stopMine()
	any, stopAny := l.Wait(0)
	defer stopAny()
	l.Add(1, 10, nil, []uint64{1}, false)
	select {
	case <-mine:
		t.Fatal("a waiter was woken by its own change")
	default:
	}
	select {
	case <-any:
	default:
		t.Fatal("a waiter of every change was not woken")
	}
	l.Add(2, 20, nil, []uint64{1}, false)
	select {
	case <-mine:
	default:
		t.Fatal("a waiter was not woken by another session's change")
	}
}
