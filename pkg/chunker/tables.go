package chunker

// The tables below are computed in the package from fixed constants instead
// of being read from a dependency or math/rand, so no library or Go release
// can move a cut point. TestGearTableGolden and TestRabinTablesGolden pin
// them; the golden cut-point tests pin their use.

// gearSeed seeds the SplitMix64 stream that fills the gear table ("cairncdc"
// in ASCII).
const gearSeed = 0x636169726e636463

// splitMix64 is the SplitMix64 generator: a Weyl sequence with increment
// 0x9e3779b97f4a7c15 followed by a 64-bit finalizer (xor-shift 30, multiply,
// xor-shift 27, multiply, xor-shift 31). It is tiny, fully specified by these
// constants, and its outputs pass common statistical test batteries, which is
// all a gear table needs.
type splitMix64 struct{ state uint64 }

func (s *splitMix64) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

var gear = newGearTable()

func newGearTable() [256]uint64 {
	var t [256]uint64
	g := splitMix64{state: gearSeed}
	for i := range t {
		t[i] = g.next()
	}
	return t
}

// GearTable returns a copy of the FastCDC1 gear table: entry i is the i-th
// output (0-based) of SplitMix64 seeded with 0x636169726e636463.
func GearTable() [256]uint64 { return gear }

// RabinPolynomial is the Rabin1 modulus: an irreducible polynomial of degree
// 53 over GF(2), bit k holding the coefficient of x^k. It is the first
// irreducible one drawn by SplitMix64 seeded with 0x636169726e726162
// ("cairnrab"), each draw masked to 53 bits and given the x^53 and x^0
// terms; TestRabinPolynomialIrreducible checks irreducibility.
const RabinPolynomial uint64 = 0x3a6d062061d079

const (
	rabinDegree = 53
	// RabinWindow is the Rabin1 window in bytes, the VarFS paper's value.
	RabinWindow = 48
	rabinMask   = 1<<rabinDegree - 1
	rabinShift  = rabinDegree - 8
)

// rabinMod[t] is t·x^53 mod P: the reduction of the byte pushed out of the
// top when the fingerprint is shifted left by 8. rabinOut[b] is
// b·x^(8·(RabinWindow-1)) mod P: the contribution of byte b when it is the
// oldest byte of the window and about to leave it.
var rabinMod, rabinOut = newRabinTables()

func newRabinTables() (mod, out [256]uint64) {
	for i := range 256 {
		mod[i] = polyMulX(uint64(i), rabinDegree, RabinPolynomial)
		out[i] = polyMulX(uint64(i), 8*(RabinWindow-1), RabinPolynomial)
	}
	return mod, out
}

// polyMulX returns a·x^k mod p for deg(a) < deg(p) = 53.
func polyMulX(a uint64, k int, p uint64) uint64 {
	for range k {
		a <<= 1
		if a>>rabinDegree&1 == 1 {
			a ^= p
		}
	}
	return a
}
