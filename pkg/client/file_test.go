package client

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

func key(off, size, ext, extOff uint64) *metapb.ExtentKey {
	return &metapb.ExtentKey{FileOffset: off, Size: size, PartitionId: 1, ExtentId: ext, ExtentOffset: extOff}
}

// resolve maps every file byte in [0, n) to (extent, extent offset), 0 for
// a hole.
func resolve(keys []*metapb.ExtentKey, n uint64) [][2]uint64 {
	out := make([][2]uint64, n)
	for _, k := range keys {
		for i := uint64(0); i < k.Size && k.FileOffset+i < n; i++ {
			out[k.FileOffset+i] = [2]uint64{k.ExtentId, k.ExtentOffset + i}
		}
	}
	return out
}

// TestOverlay checks that overlay agrees with painting keys byte by byte
// in write order, and keeps the map sorted and non-overlapping.
func TestOverlay(t *testing.T) {
	const n = 64
	for seed := uint64(0); seed < 2000; seed++ {
		var keys, all []*metapb.ExtentKey
		x := seed*6364136223846793005 + 1442695040888963407
		next := func(m uint64) uint64 { x = x*6364136223846793005 + 1442695040888963407; return (x >> 33) % m }
		for i := uint64(0); i < 6; i++ {
			k := key(next(n-1), 1+next(20), i+1, next(1000))
			all = append(all, k)
			keys = overlay(keys, k)
		}
		want := resolve(all, n)
		got := resolve(keys, n)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d: byte %d maps to %v, want %v", seed, i, got[i], want[i])
			}
		}
		for i := 1; i < len(keys); i++ {
			if keys[i-1].FileOffset+keys[i-1].Size > keys[i].FileOffset {
				t.Fatalf("seed %d: keys overlap or are unsorted: %v", seed, keys)
			}
		}
		cut := next(n)
		c := cutKeys(keys, cut)
		gc := resolve(c, n)
		for i := range gc {
			w := got[i]
			if uint64(i) >= cut {
				w = [2]uint64{}
			}
			if gc[i] != w {
				t.Fatalf("seed %d: after cut at %d byte %d maps to %v, want %v", seed, cut, i, gc[i], w)
			}
		}
	}
}
