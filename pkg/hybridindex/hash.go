package hybridindex

import (
	"math/bits"
)

// HashVersion identifies the placement function: the hash of a name, the hash
// of a (parent, name) pair and the reduction of a hash to a slot. Records are
// stored where version 1 puts them, so any change to these functions is a
// data migration, not a refactoring: a new function needs a new version
// number, recorded per volume, and a move of every record. The golden-value
// tests pin version 1.
const HashVersion = 1

// XXH64 primes from the xxHash specification.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// xxh64 is XXH64 (xxHash, 64-bit, as specified in xxhash_spec.md) over b.
// It is implemented here rather than imported so that the placement of
// records cannot change with a dependency upgrade, and generically so that
// hashing a string needs no copy.
func xxh64[T ~string | ~[]byte](b T, seed uint64) uint64 {
	n := len(b)
	var h uint64
	if n >= 32 {
		v1 := seed + prime1 + prime2
		v2 := seed + prime2
		v3 := seed
		v4 := seed - prime1
		for len(b) >= 32 {
			v1 = xxRound(v1, le64(b[0:8]))
			v2 = xxRound(v2, le64(b[8:16]))
			v3 = xxRound(v3, le64(b[16:24]))
			v4 = xxRound(v4, le64(b[24:32]))
			b = b[32:]
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) +
			bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = xxMerge(h, v1)
		h = xxMerge(h, v2)
		h = xxMerge(h, v3)
		h = xxMerge(h, v4)
	} else {
		h = seed + prime5
	}
	h += uint64(n)
	for len(b) >= 8 {
		h ^= xxRound(0, le64(b[0:8]))
		h = bits.RotateLeft64(h, 27)*prime1 + prime4
		b = b[8:]
	}
	if len(b) >= 4 {
		h ^= le32(b[0:4]) * prime1
		h = bits.RotateLeft64(h, 23)*prime2 + prime3
		b = b[4:]
	}
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i]) * prime5
		h = bits.RotateLeft64(h, 11) * prime1
	}
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

func xxRound(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func xxMerge(acc, val uint64) uint64 {
	acc ^= xxRound(0, val)
	return acc*prime1 + prime4
}

func le64[T ~string | ~[]byte](b T) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func le32[T ~string | ~[]byte](b T) uint64 {
	_ = b[3]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

// Hash is the placement hash of a name (HashVersion 1): XXH64 of the name's
// bytes with seed 0. Names are hashed as raw bytes, with no Unicode
// normalization or case folding, exactly as POSIX compares them.
func Hash(name string) uint64 {
	return xxh64(name, 0)
}

// HashParent is the path-walk hash of a name under a parent directory
// (HashVersion 1): XXH64, seed 0, of the parent inode number as 8
// little-endian bytes followed by the name's bytes. Equal names under
// different parents hash independently, which is what spreads a hot name.
func HashParent(parent uint64, name string) uint64 {
	// A stack buffer covers every valid name; longer (invalid) names are
	// still hashed, on the heap, so that the function is total.
	var stack [8 + MaxNameLen]byte
	var buf []byte
	if len(name) <= MaxNameLen {
		buf = stack[:8+len(name)]
	} else {
		buf = make([]byte, 8+len(name))
	}
	for i := range 8 {
		buf[i] = byte(parent >> (8 * i))
	}
	copy(buf[8:], name)
	return xxh64(buf, 0)
}

// SlotOfHash reduces a hash to a slot in [0, slots) by taking the high 64
// bits of hash × slots (Lemire's multiply-shift). Each slot is thus a
// contiguous range of hash values, decided by the hash's best-mixed top
// bits, and doubling the slot count splits slot s into slots 2s and 2s+1:
// a volume's slot table could be refined without rehashing by giving both
// halves the old owner. It returns -1 when slots ≤ 0.
func SlotOfHash(hash uint64, slots int) int {
	if slots <= 0 {
		return -1
	}
	hi, _ := bits.Mul64(hash, uint64(slots))
	return int(hi)
}

// SlotOf is the slot of a name placed by filename hashing, in [0, slots),
// or -1 when slots ≤ 0.
func SlotOf(name string, slots int) int {
	return SlotOfHash(Hash(name), slots)
}

// SlotOfParent is the slot of a name under a path-walk redirection, in
// [0, slots), or -1 when slots ≤ 0.
func SlotOfParent(parent uint64, name string, slots int) int {
	return SlotOfHash(HashParent(parent, name), slots)
}
