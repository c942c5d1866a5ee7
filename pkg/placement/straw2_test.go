package placement

import (
	"math"
	"testing"
)

func TestLog2FixedMatchesLog2(t *testing.T) {
	inputs := []uint64{1, 2, 3, 5, 7, 1000, 1 << 20, 1<<20 + 1, 123456789, 1<<53 - 1, 1 << 53, math.MaxUint64}
	// Plus a deterministic sweep over all magnitudes.
	for x := uint64(1); x < 1<<62; x = x*3 + 1 {
		inputs = append(inputs, x)
	}
	for _, x := range inputs {
		got := float64(log2Fixed(x)) / (1 << fracBits)
		want := math.Log2(float64(x))
		// Truncating 40 fractional bits loses < 2^-40; the squarings'
		// truncation adds a few more ulps of that.
		if math.Abs(got-want) > 1e-11 {
			t.Errorf("log2Fixed(%d) = %.15f, want %.15f", x, got, want)
		}
	}
	if got := log2Fixed(0); got != 0 {
		t.Errorf("log2Fixed(0) = %d, want 0", got)
	}
}

func TestStraw2DrawRange(t *testing.T) {
	// Draws are ≤ 0 and never NaN for any positive finite weight, including
	// extreme ones.
	weights := []float64{math.SmallestNonzeroFloat64, 1e-300, 1e-9, 1, 1e9, math.MaxFloat64}
	for _, w := range weights {
		for key := uint64(0); key < 1000; key++ {
			d := straw2Draw(key, key*7+1, w)
			if math.IsNaN(d) || d > 0 {
				t.Fatalf("straw2Draw(%d, %d, %g) = %g, want ≤ 0 and not NaN", key, key*7+1, w, d)
			}
		}
	}
}

func TestDrawHashDistinctPerKey(t *testing.T) {
	// drawHash is a bijection of id for a fixed key, so no two nodes can
	// tie on the hash; check it on sequential ids, the common case.
	for _, key := range []uint64{0, 1, 42, math.MaxUint64} {
		seen := make(map[uint64]uint64)
		for id := uint64(0); id < 10000; id++ {
			h := drawHash(key, id)
			if prev, ok := seen[h]; ok {
				t.Fatalf("key %d: drawHash collides for ids %d and %d", key, prev, id)
			}
			seen[h] = id
		}
	}
}

func TestDrawHashBitBalance(t *testing.T) {
	// Each output bit should be set about half the time over sequential
	// keys and ids, the inputs the master actually uses. 40,000 samples:
	// σ = 100, so ±600 is 6σ.
	var ones [64]int
	const samples = 40000
	for key := uint64(0); key < samples/100; key++ {
		for id := uint64(1); id <= 100; id++ {
			h := drawHash(key, id)
			for b := range 64 {
				ones[b] += int(h >> b & 1)
			}
		}
	}
	for b, c := range ones {
		if c < samples/2-600 || c > samples/2+600 {
			t.Errorf("bit %d set %d of %d times", b, c, samples)
		}
	}
}

func TestDrawGolden(t *testing.T) {
	// Pins the hash and the fixed-point logarithm bit for bit: placements
	// must not change with the Go version, the CPU or the process.
	tests := []struct {
		key, id  uint64
		w        float64
		hash     uint64
		drawBits uint64
	}{
		{0, 0, 1, 0xbe08cce75cf1194b, 0xc25b83359e974000},
		{0, 1, 1, 0xbae00a0e55522d52, 0xc25d0f779e060000},
		{1, 0, 1, 0x17dbca337fd5696d, 0xc28b63763311b800},
		{12345, 678, 3.5, 0xef9bcf94ca1aba02, 0xc21bee15270b6db7},
		{math.MaxUint64, math.MaxUint64, 1e-3, 0x1a469222245f63e1, 0xc329a8b062620d70},
	}
	for _, tt := range tests {
		if got := drawHash(tt.key, tt.id); got != tt.hash {
			t.Errorf("drawHash(%d, %d) = %#x, want %#x", tt.key, tt.id, got, tt.hash)
		}
		if got := straw2Draw(tt.key, tt.id, tt.w); math.Float64bits(got) != tt.drawBits {
			t.Errorf("straw2Draw(%d, %d, %g) = %g (%#x), want %g (%#x)", tt.key, tt.id, tt.w,
				got, math.Float64bits(got), math.Float64frombits(tt.drawBits), tt.drawBits)
		}
	}
}
