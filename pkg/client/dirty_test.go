package client

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// checkDirty verifies the buffer's invariants (sorted, non-overlapping,
// non-adjacent, byte count) and that it holds exactly model's bytes, where
// set[i] says whether file byte i is dirty.
func checkDirty(t *testing.T, name string, b *dirtyBuf, model []byte, set []bool) {
	t.Helper()
	total := 0
	for i, r := range b.rs {
		if len(r.data) == 0 {
			t.Fatalf("%s: empty range at %d", name, r.off)
		}
		if i > 0 && b.rs[i-1].end() >= r.off {
			t.Fatalf("%s: ranges %d and %d overlap or touch: [%d,%d) [%d,%d)", name, i-1, i, b.rs[i-1].off, b.rs[i-1].end(), r.off, r.end())
		}
		total += len(r.data)
	}
	if total != b.len() {
		t.Fatalf("%s: len() %d, ranges hold %d", name, b.len(), total)
	}
	got := make([]byte, len(model))
	gotSet := make([]bool, len(model))
	for _, r := range b.rs {
		for i, c := range r.data {
			got[r.off+uint64(i)] = c
			gotSet[r.off+uint64(i)] = true
		}
	}
	for i := range model {
		if gotSet[i] != set[i] || (set[i] && got[i] != model[i]) {
			t.Fatalf("%s: byte %d dirty=%v %d, want dirty=%v %d", name, i, gotSet[i], got[i], set[i], model[i])
		}
	}
}

// TestDirtyBufTable checks merging and replacing on hand-picked cases.
func TestDirtyBufTable(t *testing.T) {
	type w struct {
		off  uint64
		data string
	}
	for _, tc := range []struct {
		name   string
		writes []w
		want   []dirtyRange
	}{
		{"disjoint sorted", []w{{10, "ab"}, {0, "xy"}}, []dirtyRange{{0, []byte("xy")}, {10, []byte("ab")}}},
		{"adjacent merge", []w{{0, "ab"}, {2, "cd"}}, []dirtyRange{{0, []byte("abcd")}}},
		{"adjacent before", []w{{2, "cd"}, {0, "ab"}}, []dirtyRange{{0, []byte("abcd")}}},
		{"later wins inside", []w{{0, "aaaaaa"}, {2, "XY"}}, []dirtyRange{{0, []byte("aaXYaa")}}},
		{"bridge three", []w{{0, "aa"}, {4, "bb"}, {8, "cc"}, {1, "XXXXXXXX"}}, []dirtyRange{{0, []byte("aXXXXXXXXc")}}},
		{"cover all", []w{{2, "aa"}, {6, "bb"}, {0, "0123456789"}}, []dirtyRange{{0, []byte("0123456789")}}},
		{"gap kept", []w{{0, "aa"}, {3, "bb"}}, []dirtyRange{{0, []byte("aa")}, {3, []byte("bb")}}},
	} {
		var b dirtyBuf
		for _, x := range tc.writes {
			b.insert(x.off, []byte(x.data))
		}
		if len(b.rs) != len(tc.want) {
			t.Fatalf("%s: %d ranges, want %d", tc.name, len(b.rs), len(tc.want))
		}
		for i, r := range b.rs {
			if r.off != tc.want[i].off || !bytes.Equal(r.data, tc.want[i].data) {
				t.Fatalf("%s: range %d is %d %q, want %d %q", tc.name, i, r.off, r.data, tc.want[i].off, tc.want[i].data)
			}
		}
	}
}

// TestDirtyBufModel applies seeded random inserts, removes and cuts to the
// buffer and to a byte model, checking the buffer and its overlay after
// every step.
func TestDirtyBufModel(t *testing.T) {
	const n = 96
	for seed := uint64(0); seed < 1500; seed++ {
		x := seed*6364136223846793005 + 1442695040888963407
		next := func(m uint64) uint64 { x = x*6364136223846793005 + 1442695040888963407; return (x >> 33) % m }
		var b dirtyBuf
		model := make([]byte, n)
		set := make([]bool, n)
		for step := 0; step < 12; step++ {
			s := next(n - 1)
			e := min(n, s+1+next(24))
			switch op := next(10); {
			case op < 7:
				p := make([]byte, e-s)
				for i := range p {
					p[i] = byte(1 + next(250))
					model[s+uint64(i)] = p[i]
					set[s+uint64(i)] = true
				}
				b.insert(s, p)
				p[0] = 0 // the buffer must hold a copy
			case op < 9:
				b.remove(s, e)
				for i := s; i < e; i++ {
					set[i] = false
				}
			default:
				b.cut(s)
				for i := s; i < n; i++ {
					set[i] = false
				}
			}
			checkDirty(t, fmt.Sprintf("seed %d step %d", seed, step), &b, model, set)
			// Overlay onto a background of 0xff over a random window.
			os := next(n)
			oe := min(n, os+next(40))
			buf := bytes.Repeat([]byte{0xff}, int(oe-os))
			b.overlay(buf, os)
			for i := os; i < oe; i++ {
				want := byte(0xff)
				if set[i] {
					want = model[i]
				}
				if buf[i-os] != want {
					t.Fatalf("seed %d step %d: overlay [%d,%d) byte %d is %d, want %d", seed, step, os, oe, i, buf[i-os], want)
				}
			}
		}
	}
}

// TestSplitDirty checks that the Overwrite calls cover each dirty byte
// exactly once at the extent position its key maps it to, within maxOp.
func TestSplitDirty(t *testing.T) {
	keys := []*metapb.ExtentKey{key(0, 10, 1, 100), key(10, 5, 2, 0), key(20, 30, 3, 7)}
	for _, tc := range []struct {
		name      string
		rs        []dirtyRange
		maxOp     int
		calls     int
		uncovered uint64
	}{
		{"inside one key", []dirtyRange{{2, []byte("abc")}}, 1 << 20, 1, 0},
		{"across two keys", []dirtyRange{{8, []byte("abcd")}}, 1 << 20, 2, 0},
		{"max op splits", []dirtyRange{{20, bytes.Repeat([]byte{7}, 25)}}, 10, 3, 0},
		{"two ranges one key", []dirtyRange{{21, []byte("a")}, {30, []byte("b")}}, 1 << 20, 2, 0},
		{"over a hole", []dirtyRange{{13, []byte("abcdefgh")}}, 1 << 20, 2, 5},
		{"past the last key", []dirtyRange{{48, []byte("abcd")}}, 1 << 20, 1, 2},
	} {
		ops, unc := splitDirty(tc.rs, keys, tc.maxOp)
		if len(ops) != tc.calls || unc != tc.uncovered {
			t.Fatalf("%s: %d calls, %d uncovered; want %d, %d", tc.name, len(ops), unc, tc.calls, tc.uncovered)
		}
		want := map[[2]uint64]byte{}
		for _, r := range tc.rs {
			m := resolve(keys, r.end())
			for i, c := range r.data {
				if at := m[r.off+uint64(i)]; at[0] != 0 {
					want[at] = c
				}
			}
		}
		got := map[[2]uint64]byte{}
		for _, o := range ops {
			if len(o.data) > tc.maxOp || o.pid != 1 {
				t.Fatalf("%s: call %+v too large or on the wrong partition", tc.name, o)
			}
			for i, c := range o.data {
				at := [2]uint64{o.ext, o.extOff + uint64(i)}
				if _, dup := got[at]; dup {
					t.Fatalf("%s: extent %d offset %d written twice", tc.name, at[0], at[1])
				}
				got[at] = c
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d bytes sent, want %d", tc.name, len(got), len(want))
		}
		for at, c := range want {
			if got[at] != c {
				t.Fatalf("%s: extent %d offset %d is %q, want %q", tc.name, at[0], at[1], got[at], c)
			}
		}
	}
}
