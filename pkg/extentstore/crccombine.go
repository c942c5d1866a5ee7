package extentstore

// CRC32C of a concatenation from the CRCs of its parts: a Section's
// checksum is made from the stored block CRCs without reading the blocks.
// The arithmetic is over GF(2) polynomials in the reflected bit order of
// hash/crc32's Castagnoli table: appending n zero bytes to a message
// multiplies its CRC register by x^(8n) mod P, so
// crc(A‖B) = crc(A)·x^(8·len(B)) mod P ⊕ crc(B) (the pre- and
// post-inversions of the two CRCs cancel out).

// castagnoliReflected is the Castagnoli polynomial in reflected order.
const castagnoliReflected = 0x82F63B78

// xPow2n[k] is x^(2^k) mod P.
var xPow2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1 (bit 31 is x^0 in reflected order)
	for k := range t {
		t[k] = p
		p = mulModP(p, p)
	}
	return t
}()

// mulModP returns a·b mod P.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// xPowBytes returns x^(8n) mod P.
func xPowBytes(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = mulModP(xPow2n[k&31], p)
		}
	}
	return p
}

// crcCombine returns the CRC32C of A‖B given crcA, crcB and len(B).
func crcCombine(crcA, crcB uint32, lenB int64) uint32 {
	return mulModP(xPowBytes(lenB), crcA) ^ crcB
}
