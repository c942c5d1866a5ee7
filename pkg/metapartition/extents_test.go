package metapartition

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// phys is one physical byte: offset off of extent eid (partition 7).
type phys struct{ eid, off uint64 }

// TestExtentMapRandom checks extent maps against a byte-by-byte reference:
// random writes (mostly of new physical bytes, sometimes rewriting the
// bytes a range already maps to, sometimes several overlapping keys in one
// op) and truncates, after which every file byte must map where the
// reference says, and the free list must hold exactly the physical bytes
// that were referenced once and are not any more, each once.
func TestExtentMapRandom(t *testing.T) {
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			p := newRoot(t)
			mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg))
			ref := map[uint64]phys{} // file offset -> physical byte
			everMapped := map[phys]bool{}
			// Physical bytes come from three extents by bump allocation:
			// never reused, sometimes contiguous with the previous write
			// (then the keys must merge), sometimes not.
			next := map[uint64]uint64{}
			var size uint64
			for step := range 60 {
				if rng.IntN(6) == 0 {
					size = uint64(rng.IntN(300))
					mustRun(t, p, int64(step), truncate(2, size))
					for off := range ref {
						if off >= size {
							delete(ref, off)
						}
					}
					continue
				}
				var keys []*metapb.ExtentKey
				for range 1 + rng.IntN(3) {
					off, n := uint64(rng.IntN(250)), uint64(1+rng.IntN(60))
					if rng.IntN(3) == 0 { // around the end: appends and tail overwrites
						off = max(size, 2) - uint64(rng.IntN(3))
					}
					eid := uint64(1 + rng.IntN(3))
					k := ek(off, eid, next[eid], n)
					next[eid] += n + uint64(rng.IntN(2))
					if b, ok := ref[off]; ok && rng.IntN(4) == 0 {
						// Rewrite in place: the same physical bytes again,
						// as far as they continue the mapping at off.
						k = ek(off, b.eid, b.off, 1)
						for k.Size < n {
							nb, ok := ref[off+k.Size]
							if !ok || nb != (phys{b.eid, b.off + k.Size}) {
								break
							}
							k.Size++
						}
					}
					keys = append(keys, k)
					for i := range k.Size {
						ref[k.FileOffset+i] = phys{k.ExtentId, k.ExtentOffset + i}
						everMapped[phys{k.ExtentId, k.ExtentOffset + i}] = true
					}
					size = max(size, k.FileOffset+k.Size)
				}
				mustRun(t, p, int64(step), appendExtents(2, 0, keys...))
			}
			in := mustInode(t, p, 2)
			if in.Size != size {
				t.Fatalf("size %d, reference %d", in.Size, size)
			}
			got := map[uint64]phys{}
			for i, k := range in.Extents {
				if i > 0 {
					prev := in.Extents[i-1]
					if prev.FileOffset+prev.Size > k.FileOffset {
						t.Fatalf("extents overlap or are unsorted: %v", in.Extents)
					}
					if prev.FileOffset+prev.Size == k.FileOffset && prev.ExtentId == k.ExtentId && prev.ExtentOffset+prev.Size == k.ExtentOffset {
						t.Fatalf("contiguous keys not merged: %v %v", prev, k)
					}
				}
				for j := range k.Size {
					got[k.FileOffset+j] = phys{k.ExtentId, k.ExtentOffset + j}
				}
			}
			if !maps.Equal(got, ref) {
				t.Fatalf("file map differs from the reference:\n got %v\nwant %v", got, ref)
			}
			live := map[phys]bool{}
			for _, b := range ref {
				live[b] = true
			}
			freed := map[phys]bool{}
			for _, f := range p.FreeList() {
				for j := range f.Size {
					b := phys{f.ExtentID, f.ExtentOffset + j}
					if freed[b] {
						t.Fatalf("byte %v freed twice", b)
					}
					if live[b] {
						t.Fatalf("byte %v freed but still mapped", b)
					}
					freed[b] = true
				}
			}
			for b := range everMapped {
				if !live[b] && !freed[b] {
					t.Fatalf("byte %v no longer mapped but never freed", b)
				}
			}
			if len(freed)+len(live) != len(everMapped) {
				t.Fatalf("freed %d + live %d != ever mapped %d", len(freed), len(live), len(everMapped))
			}
		})
	}
}
