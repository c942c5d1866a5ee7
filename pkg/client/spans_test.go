package client

import (
	"math/rand/v2"
	"testing"
)

func TestSpansAgainstBitmap(t *testing.T) {
	const size = 200
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 200 {
		var x spans
		var bits [size]bool
		for range 1 + rng.IntN(20) {
			s := uint64(rng.IntN(size))
			e := s + uint64(rng.IntN(30))
			if e > size {
				e = size
			}
			x.add(s, e)
			for b := s; b < e; b++ {
				bits[b] = true
			}
		}
		// The set is sorted, disjoint, merged, and holds exactly the bits.
		for k, r := range x.rs {
			if r.s >= r.e || (k > 0 && x.rs[k-1].e >= r.s) {
				t.Fatalf("round %d: ranges not sorted, disjoint and merged: %v", round, x.rs)
			}
		}
		for s := uint64(0); s < size; s++ {
			for e := s; e <= min(s+12, size); e++ {
				want := false
				for b := s; b < e; b++ {
					want = want || bits[b]
				}
				if got := x.overlaps(s, e); got != want {
					t.Fatalf("round %d: overlaps(%d, %d) = %v, want %v; set %v", round, s, e, got, want, x.rs)
				}
			}
		}
	}
}
