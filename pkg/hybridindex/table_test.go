package hybridindex

import (
	"errors"
	"slices"
	"strconv"
	"testing"
)

func TestRoute(t *testing.T) {
	slots, err := NewSlots([]uint64{10, 20, 30, 40}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	et := NewExceptionTable()
	must(t, et.Set("Makefile", Redirect{Kind: PathWalk}))
	must(t, et.Set("data.bin", Redirect{Kind: Override, MP: 30}))
	tab := &Table{Slots: slots, Exceptions: et}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		parent uint64
		name   string
		mp     uint64
		kind   Kind
	}{
		// "README" is slot 1939 of 4096: the second quarter, MP 20.
		{1, "README", 20, Hashed},
		{99, "README", 20, Hashed},
		// "Kconfig" is slot 3362: MP 40.
		{1, "Kconfig", 40, Hashed},
		// Path-walk slots of Makefile under parents 1 and 2: 1004 and 189.
		{1, "Makefile", 10, PathWalk},
		{2, "Makefile", 10, PathWalk},
		{1 << 40, "data.bin", 30, Override},
	}
	for _, tc := range tests {
		mp, kind := tab.Route(tc.parent, tc.name)
		if mp != tc.mp || kind != tc.kind {
			t.Errorf("Route(%d, %q) = %d, %v; want %d, %v", tc.parent, tc.name, mp, kind, tc.mp, tc.kind)
		}
	}
	// Path-walk spreads one name over all MPs.
	seen := map[uint64]int{}
	for p := range uint64(400) {
		mp, _ := tab.Route(p, "Makefile")
		seen[mp]++
	}
	for _, mp := range []uint64{10, 20, 30, 40} {
		if seen[mp] < 60 {
			t.Errorf("path-walk Makefile under 400 parents: MP %d got %d", mp, seen[mp])
		}
	}
	// Without the exception table every name is hashed.
	plain := &Table{Slots: slots}
	if mp, kind := plain.Route(1, "Makefile"); kind != Hashed || mp != 20 {
		t.Errorf("Route without exceptions = %d, %v; want 20 (slot 1073), hashed", mp, kind)
	}
	var empty *Table
	if mp, _ := empty.Route(1, "x"); mp != 0 {
		t.Errorf("nil table routes to %d", mp)
	}
	if mp, _ := (&Table{}).Route(1, "x"); mp != 0 {
		t.Errorf("table without slots routes to %d", mp)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	et := NewExceptionTable()
	must(t, et.Set("x", Redirect{Kind: Override, MP: 9}))
	tests := []struct {
		desc string
		tab  *Table
		ok   bool
	}{
		{"ok", &Table{Slots: []uint64{1, 2, 9}, Exceptions: et}, true},
		{"nil", nil, false},
		{"no slots", &Table{}, false},
		{"owner 0", &Table{Slots: []uint64{1, 0}}, false},
		{"override to an MP without slots", &Table{Slots: []uint64{1, 2}, Exceptions: et}, false},
		{"too many slots", &Table{Slots: make([]uint64, MaxSlots+1)}, false},
	}
	for _, tc := range tests {
		err := tc.tab.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidTable)) {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.desc, err, tc.ok)
		}
	}
}

func TestNewSlots(t *testing.T) {
	tests := []struct {
		mps   []uint64
		slots int
		want  []uint64 // nil: error
	}{
		// The cluster map's test: 3 MPs, 8 slots.
		{[]uint64{1, 2, 3}, 8, []uint64{1, 1, 1, 2, 2, 2, 3, 3}},
		{[]uint64{7}, 3, []uint64{7, 7, 7}},
		{[]uint64{5, 4}, 4, []uint64{5, 5, 4, 4}},
		{[]uint64{1, 2, 3}, 3, []uint64{1, 2, 3}},
		{nil, 8, nil},
		{[]uint64{1, 2, 3}, 2, nil},
		{[]uint64{1, 1}, 8, nil},
		{[]uint64{0, 1}, 8, nil},
		{[]uint64{1}, MaxSlots + 1, nil},
	}
	for _, tc := range tests {
		got, err := NewSlots(tc.mps, tc.slots)
		if tc.want == nil {
			if !errors.Is(err, ErrInvalidTable) {
				t.Errorf("NewSlots(%v, %d) = %v, %v; want ErrInvalidTable", tc.mps, tc.slots, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("NewSlots(%v, %d) = %v, %v; want %v", tc.mps, tc.slots, got, err, tc.want)
		}
	}
}

func TestRebalanceSmall(t *testing.T) {
	tests := []struct {
		desc      string
		slots     []uint64
		mps       []uint64
		want      []uint64
		wantMoved []int
	}{
		{"balanced: nothing moves", []uint64{1, 1, 2, 2}, []uint64{1, 2}, []uint64{1, 1, 2, 2}, nil},
		{"add one MP", []uint64{1, 1, 1, 2, 2, 2}, []uint64{1, 2, 3}, []uint64{1, 1, 3, 2, 2, 3}, []int{2, 5}},
		{"remove an MP", []uint64{1, 1, 2, 2, 3, 3}, []uint64{1, 3}, []uint64{1, 1, 1, 3, 3, 3}, []int{2, 3}},
		// 7 slots over 2: the MP that already has more keeps the extra one.
		{"ceil goes to the larger owner", []uint64{1, 2, 2, 2, 2, 2, 2}, []uint64{1, 2}, []uint64{1, 2, 2, 2, 2, 1, 1}, []int{5, 6}},
		{"replace all", []uint64{1, 1, 2, 2}, []uint64{3, 4}, []uint64{3, 3, 4, 4}, []int{0, 1, 2, 3}},
	}
	for _, tc := range tests {
		got, moved, err := Rebalance(tc.slots, tc.mps)
		if err != nil || !slices.Equal(got, tc.want) || !slices.Equal(moved, tc.wantMoved) {
			t.Errorf("%s: Rebalance(%v, %v) = %v, %v, %v; want %v, %v", tc.desc, tc.slots, tc.mps, got, moved, err, tc.want, tc.wantMoved)
		}
	}
	if _, _, err := Rebalance([]uint64{1, 2}, []uint64{1, 2, 3}); !errors.Is(err, ErrInvalidTable) {
		t.Errorf("more MPs than slots: %v", err)
	}
}

func TestRebalanceGrow(t *testing.T) {
	tests := []struct{ from, to, slots int }{
		{3, 4, 4096},
		{16, 17, 4096},
		{16, 32, 4096},
		{5, 64, 4096},
		{7, 8, 1000},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.from)+"to"+strconv.Itoa(tc.to), func(t *testing.T) {
			var mps []uint64
			for i := range tc.to {
				mps = append(mps, uint64(i+1))
			}
			old, err := NewSlots(mps[:tc.from], tc.slots)
			must(t, err)
			got, moved, err := Rebalance(old, mps)
			must(t, err)
			// Exactly the new MPs' fair share moves, and only onto new MPs.
			base := tc.slots / tc.to
			wantMoved := (tc.to - tc.from) * base
			if len(moved) < wantMoved || len(moved) > wantMoved+tc.to {
				t.Errorf("moved %d slots, want about %d", len(moved), wantMoved)
			}
			isNew := func(mp uint64) bool { return mp > uint64(tc.from) }
			for i := range old {
				changed := old[i] != got[i]
				if changed != slices.Contains(moved, i) {
					t.Fatalf("slot %d: changed=%v but moved list says %v", i, changed, !changed)
				}
				if changed && !isNew(got[i]) {
					t.Fatalf("slot %d moved between old MPs %d -> %d", i, old[i], got[i])
				}
			}
			share := (&Table{Slots: got}).SlotShare()
			for _, mp := range mps {
				if share[mp] != base && share[mp] != base+1 {
					t.Errorf("MP %d owns %d slots, want %d or %d", mp, share[mp], base, base+1)
				}
			}
			// Rebalancing a balanced table moves nothing.
			if _, again, _ := Rebalance(got, mps); len(again) != 0 {
				t.Errorf("second Rebalance moved %d slots", len(again))
			}
		})
	}
}
