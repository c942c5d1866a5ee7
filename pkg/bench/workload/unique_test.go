package workload

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestUniqueBlocks: every 4 KiB of every block a thread writes differs from
// every other, across blocks, threads and runs, so a deduplicating file
// system stores what it is given.
func TestUniqueBlocks(t *testing.T) {
	seen := map[string]bool{}
	for g := range 2 {
		for run := range 2 {
			th := &Thread{Global: g, Rand: rand.New(rand.NewPCG(1, 1))}
			th.nonce = uint64(run*10+g)*2 + 1 // two runs at the same nanosecond still differ by nonce
			buf := th.Buffer(64 << 10)
			for range 8 {
				th.Unique(buf)
				for off := 0; off < len(buf); off += 4096 {
					k := string(buf[off : off+4096])
					if seen[k] {
						t.Fatalf("thread %d run %d: a 4 KiB piece repeats", g, run)
					}
					seen[k] = true
				}
			}
		}
	}
	small := []byte("tiny")
	th := &Thread{}
	if got := th.Unique(bytes.Clone(small)); !bytes.Equal(got, small) {
		t.Fatalf("a block under 16 bytes is changed: %q", got)
	}
}
