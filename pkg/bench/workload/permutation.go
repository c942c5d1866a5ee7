package workload

import "math/bits"

// Permutation is a pseudo-random bijection of [0, n) computed on demand: a
// 4-round Feistel network over the smallest even-bit power of two holding n,
// with cycle walking back into range. It needs O(1) memory, so every thread of
// a 100-million-file epoch can walk the same random order without storing it.
type Permutation struct {
	n        uint64
	halfBits uint
	mask     uint64
	key      uint64
}

// NewPermutation returns the permutation of [0, n) selected by key.
func NewPermutation(n, key uint64) Permutation {
	b := uint(bits.Len64(n))
	if b < 2 {
		b = 2
	}
	if b%2 == 1 {
		b++
	}
	return Permutation{n: n, halfBits: b / 2, mask: 1<<(b/2) - 1, key: key}
}

// At returns the i-th element of the permutation (i < n).
func (p Permutation) At(i uint64) uint64 {
	if p.n <= 1 {
		return 0
	}
	x := i
	// Cycle walking: the Feistel network permutes [0, 4n) at most, so the
	// walk returns into [0, n) within a few steps on average; the domain size
	// bounds it in the worst case.
	for steps := uint64(0); steps <= p.mask*p.mask+p.mask; steps++ {
		x = p.feistel(x)
		if x < p.n {
			return x
		}
	}
	return i % p.n // unreachable: a permutation cycle through i returns to range
}

func (p Permutation) feistel(x uint64) uint64 {
	l, r := x>>p.halfBits, x&p.mask
	for round := uint64(0); round < 4; round++ {
		l, r = r, l^(mix(r^p.key^(round*0x9e3779b97f4a7c15))&p.mask)
	}
	return l<<p.halfBits | r
}

// mix is splitmix64's finalizer.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
