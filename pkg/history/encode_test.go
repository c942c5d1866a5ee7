package history

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBlockRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		v          uint64
		size, want int
	}{
		{1, 16, 16},
		{42, 64, 64},
		{1<<64 - 1, 4096, 4096},
		{0x0102030405060708, 17, 32}, // rounded up, not refused
		{7, 0, 16},
		{7, -5, 16},
		{0, 64, 64}, // 0 is "never written": zeros
	} {
		b := EncodeBlock(tc.v, tc.size)
		if len(b) != tc.want {
			t.Errorf("EncodeBlock(%d, %d): %d bytes, want %d", tc.v, tc.size, len(b), tc.want)
		}
		if v, ok := DecodeBlock(b); !ok || v != tc.v {
			t.Errorf("DecodeBlock(EncodeBlock(%d, %d)) = %d, %v", tc.v, tc.size, v, ok)
		}
		if v, ok := DecodeBlockSize(b, tc.size); !ok || v != tc.v {
			t.Errorf("DecodeBlockSize(EncodeBlock(%d, %d)) = %d, %v", tc.v, tc.size, v, ok)
		}
	}
}

func TestBlockRejected(t *testing.T) {
	a, b := EncodeBlock(0x1111, 64), EncodeBlock(0x2222, 64)
	garbage := make([]byte, 64)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	cells := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"torn at cell 2", cells(a[:32], b[32:])},
		{"zero tail", cells(a[:48], make([]byte, 16))},
		{"zero head", cells(make([]byte, 16), a[16:])},
		{"cells swapped", cells(a[16:32], a[:16], a[32:])},
		{"shifted one cell", cells(a[16:], a[:16])},
		{"odd length", a[:40]},
		{"one byte", []byte{1}},
		{"garbage", garbage},
		{"value without check", cells(a[:8], make([]byte, 8))},
		{"encoded zero value", cells(make([]byte, 8), a[8:16])},
		{"flipped check bit", func() []byte { c := bytes.Clone(a); c[63] ^= 0x80; return c }()},
		{"flipped value bit", func() []byte { c := bytes.Clone(a); c[16] ^= 1; return c }()},
	} {
		if v, ok := DecodeBlock(tc.b); ok {
			t.Errorf("%s: decoded as %d", tc.name, v)
		}
	}
}

// TestBlockTornEveryByte tears two values' blocks at every byte offset (and
// the same for a one-cell block): the result decodes only when it equals one
// of the two whole blocks, never as a third value.
func TestBlockTornEveryByte(t *testing.T) {
	for _, size := range []int{16, 48} {
		for _, pair := range [][2]uint64{{1, 2}, {0x1111, 0x2222}, {1<<64 - 1, 1}, {0xff00ff00, 0x00ff00ff}} {
			a, b := EncodeBlock(pair[0], size), EncodeBlock(pair[1], size)
			for k := 0; k <= len(a); k++ {
				for _, torn := range [][]byte{bytes.Join([][]byte{a[:k], b[k:]}, nil), bytes.Join([][]byte{b[:k], a[k:]}, nil)} {
					v, ok := DecodeBlock(torn)
					if ok && !bytes.Equal(torn, a) && !bytes.Equal(torn, b) {
						t.Errorf("size %d, values %v, torn at %d: decoded as %d", size, pair, k, v)
					}
					if ok && v != pair[0] && v != pair[1] {
						t.Errorf("size %d, values %v, torn at %d: decoded as third value %d", size, pair, k, v)
					}
				}
				zeroTorn := bytes.Join([][]byte{a[:k], make([]byte, len(a)-k)}, nil)
				// All zeros is "never written", which no tear can be told from.
				if v, ok := DecodeBlock(zeroTorn); ok && !allZero(zeroTorn) && !bytes.Equal(zeroTorn, a) {
					t.Errorf("size %d: value %d cut to zeros at %d decoded as %d", size, pair[0], k, v)
				}
			}
		}
	}
}

func TestBlockEmptyAndSize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      []byte
		size   int
		want   uint64
		wantOK bool
	}{
		{"empty file", nil, 64, 0, true},
		{"zeros of the size", make([]byte, 64), 64, 0, true},
		{"value of the size", EncodeBlock(9, 64), 64, 9, true},
		{"whole block cut short", EncodeBlock(9, 64)[:32], 64, 0, false},
		{"zeros cut short", make([]byte, 32), 64, 0, false},
		{"block too long", EncodeBlock(9, 128), 64, 0, false},
	} {
		v, ok := DecodeBlockSize(tc.b, tc.size)
		if v != tc.want || ok != tc.wantOK {
			t.Errorf("%s: DecodeBlockSize = %d, %v; want %d, %v", tc.name, v, ok, tc.want, tc.wantOK)
		}
	}
}

func TestRecords(t *testing.T) {
	rec := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, EncodeRecord(v)...)
		}
		return b
	}
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 4; return c }
	garbage := make([]byte, 2*RecordSize)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name   string
		b      []byte
		want   []uint64
		wantOK bool
	}{
		{"empty", nil, nil, true},
		{"one", rec(5), []uint64{5}, true},
		{"in order", rec(3, 1, 2, 1<<63), []uint64{3, 1, 2, 1 << 63}, true},
		{"torn tail", rec(3, 1, 2)[:3*RecordSize-5], nil, false},
		{"partial record then whole", append(rec(3)[:20], rec(4)...), nil, false},
		{"zero record", append(rec(3), make([]byte, RecordSize)...), nil, false},
		{"record of 0", rec(0), nil, false},
		{"bad magic", flip(rec(7), 0), nil, false},
		{"bad value", flip(rec(7), 9), nil, false},
		{"bad first check", flip(rec(7), 17), nil, false},
		{"bad second check", flip(rec(7), 30), nil, false},
		{"garbage", garbage, nil, false},
		{"register block", EncodeBlock(7, 32), nil, false},
	} {
		vs, ok := DecodeRecords(tc.b)
		if ok != tc.wantOK || !slices.Equal(vs, tc.want) {
			t.Errorf("%s: DecodeRecords = %v, %v; want %v, %v", tc.name, vs, ok, tc.want, tc.wantOK)
		}
	}
	if len(EncodeRecord(1)) != RecordSize {
		t.Errorf("EncodeRecord: %d bytes, want %d", len(EncodeRecord(1)), RecordSize)
	}
}
