package placement

import "math/bits"

// fracBits is the number of fractional bits of log2Fixed. 40 bits keep draws
// of different nodes distinct in practice, while 53<<40 < 2^53 keeps every
// fixed-point logarithm exactly representable as a float64.
const fracBits = 40

// uBits is the number of hash bits used for u, the float64 mantissa width,
// so that u = x/2^53 is a value a float64 could hold exactly.
const uBits = 53

// mix64 is the splitmix64 finalizer: a bijection on uint64 with full
// avalanche, so nearby inputs (sequential partition and node ids) give
// unrelated outputs.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// drawHash returns the 64-bit hash behind node id's straw for key. It is a
// fixed function, identical in every process and on every architecture,
// because placements must be reproducible by whoever recomputes them. For a
// fixed key it is a bijection of id, so two nodes never share a hash.
func drawHash(key, id uint64) uint64 {
	h := mix64(key ^ 0x9e3779b97f4a7c15)
	h = mix64(h ^ id)
	// A third round decorrelates the draws of one node across keys: without
	// it the draws for keys a and b would be mix64 of inputs differing by the
	// same constant for every node.
	return mix64(h + 0xd1b54a32d192ed03)
}

// log2Fixed returns log2(x) for x ≥ 1 in fixed point with fracBits
// fractional bits, truncated. It uses only integer arithmetic (the classic
// bit-by-bit binary logarithm: square the mantissa, and each time it reaches
// 2 emit a 1 bit and halve it), so it is bit-identical everywhere. It
// returns 0 for x = 0 rather than failing; callers never pass 0.
func log2Fixed(x uint64) int64 {
	if x == 0 {
		return 0
	}
	e := bits.Len64(x) - 1
	// m is the mantissa x/2^e in [1, 2), as a fixed-point number with 63
	// fractional bits.
	m := x << (63 - e)
	var frac int64
	for range fracBits {
		// hi:lo = m² with 126 fractional bits, a value in [1, 4).
		hi, lo := bits.Mul64(m, m)
		// b = 1 iff m² ≥ 2: emit b, and keep m²/2 (hi with 63
		// fractional bits) if b = 1, else m² (hi:lo shifted left by one).
		// Branch-free because b is a coin flip the CPU cannot predict.
		b := hi >> 63
		frac = frac<<1 | int64(b)
		m = hi<<(b^1) | lo>>63&(b^1)
	}
	return int64(e)<<fracBits | frac
}

// straw2Draw returns node id's straw2 draw for key given its weight w > 0:
// log2(u)/w with u uniform in (0, 1]. Higher is better. The logarithm is
// exact integer math and the single division is correctly rounded by IEEE
// 754, so the draw is the same on every platform. The result is ≤ 0 and
// never NaN; it may be -Inf for extremely small weights, which then simply
// lose to every ordinary node.
func straw2Draw(key, id uint64, w float64) float64 {
	x := drawHash(key, id)>>(64-uBits) + 1 // uniform in [1, 2^53]
	l := log2Fixed(x) - uBits<<fracBits    // log2(x/2^53) ≤ 0, fixed point
	return float64(l) / w
}
