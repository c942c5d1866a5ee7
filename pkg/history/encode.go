package history

import "encoding/binary"

// The bytes a workload writes carry their value and a check of it, so that a
// read tells a value from what a broken file system could hand back instead:
// zeros (an extent allocated but never written), a mix of two writes (a torn
// overwrite), another file's or another offset's bytes, garbage. A read that
// decodes is one value as a whole; one that does not is recorded as Corrupt.
//
// The check is check(v) = mix(v ^ salt), where mix is the SplitMix64
// finalizer. mix is a bijection on 64-bit words (each of its steps, an
// xorshift or a multiplication by an odd constant, is), and so is the check
// for a fixed salt; this is what makes a torn cell undecodable rather than
// merely unlikely to decode, see EncodeBlock.

// CellSize is the unit of a register block: a value and its check.
const CellSize = 16

// RecordSize is the size of an append record (EncodeRecord).
const RecordSize = 32

const (
	// blockSalt seeds the check of a block's cells; cell i uses
	// blockSalt*(2i+1), odd and so never zero, and different for every
	// cell, so that a cell moved to another offset no longer checks.
	blockSalt = 0x9e3779b97f4a7c15
	// recordMagic opens every record ("cairnrec" little-endian): zeros
	// and most garbage fail on it before any arithmetic.
	recordMagic = 0x6365726e72696163
	recordSalt1 = 0xd6e8feb86659fd93
	recordSalt2 = 0xa0761d6478bd642f
)

// mix is the SplitMix64 finalizer: a bijection with full avalanche.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func cellCheck(v uint64, i int) uint64 {
	return mix(v ^ blockSalt*(2*uint64(i)+1))
}

// BlockSize returns the size EncodeBlock makes for size: size rounded up to
// a multiple of CellSize, and at least CellSize.
func BlockSize(size int) int {
	if size < CellSize {
		return CellSize
	}
	return (size + CellSize - 1) / CellSize * CellSize
}

// EncodeBlock returns the register block of value v, BlockSize(size) bytes
// (size is meant to be a multiple of 16, at least 16; another is rounded up
// rather than refused). Cell i (16 bytes) holds v little-endian and then
// check_i(v), a bijection of v distinct for every cell. Value 0 means "never
// written", and its block is all zeros, which DecodeBlock reads back as 0.
//
// What this guarantees, with DecodeBlock: a block torn between two values
// at cell boundaries (the sector and page boundaries a file system tears at
// are multiples of 16) has cells of two values and is refused; a cell torn
// at one byte offset inside it holds either a mix of two values' bytes under
// one value's check, or one value under a mix of two checks, and since
// check_i is a bijection it checks only if it equals one write's cell
// whole; a zero cell never checks (0 is no value); a cell moved to another
// offset fails its position's check; garbage checks with probability 2^-64
// per cell.
func EncodeBlock(v uint64, size int) []byte {
	b := make([]byte, BlockSize(size))
	if v == 0 {
		return b
	}
	for i := 0; i*CellSize < len(b); i++ {
		c := b[i*CellSize:]
		binary.LittleEndian.PutUint64(c, v)
		binary.LittleEndian.PutUint64(c[8:], cellCheck(v, i))
	}
	return b
}

// DecodeBlock returns the value a register block carries: v, true for
// exactly one value's block (EncodeBlock of any size); 0, true for an
// all-zero block of a multiple of 16 bytes, or for no bytes at all (a file
// created but never written, or truncated to nothing); ok false for
// anything else: a length that is not a multiple of 16, cells of different
// values, a cell that fails its check, a cell of value 0 among non-zero
// bytes.
func DecodeBlock(b []byte) (v uint64, ok bool) {
	if len(b)%CellSize != 0 {
		return 0, false
	}
	if allZero(b) {
		return 0, true
	}
	v = binary.LittleEndian.Uint64(b)
	if v == 0 {
		return 0, false
	}
	for i := 0; i*CellSize < len(b); i++ {
		c := b[i*CellSize:]
		if binary.LittleEndian.Uint64(c) != v || binary.LittleEndian.Uint64(c[8:]) != cellCheck(v, i) {
			return 0, false
		}
	}
	return v, true
}

// DecodeBlockSize is DecodeBlock for a register of blocks of size bytes
// (as given to EncodeBlock): it also refuses a non-empty b of another
// length, such as a whole block cut short at a cell boundary, which
// DecodeBlock alone cannot tell from a smaller block.
func DecodeBlockSize(b []byte, size int) (v uint64, ok bool) {
	if len(b) != 0 && len(b) != BlockSize(size) {
		return 0, false
	}
	return DecodeBlock(b)
}

// EncodeRecord returns the RecordSize bytes of append record v: a magic
// word, v little-endian, and two checks of v under different salts. v must
// not be 0 (0 is no value): a record of 0 is made but never decodes.
func EncodeRecord(v uint64) []byte {
	b := make([]byte, RecordSize)
	binary.LittleEndian.PutUint64(b, recordMagic)
	binary.LittleEndian.PutUint64(b[8:], v)
	binary.LittleEndian.PutUint64(b[16:], mix(v^recordSalt1))
	binary.LittleEndian.PutUint64(b[24:], mix(v^recordSalt2))
	return b
}

// DecodeRecords returns the records of an append file's bytes, in file
// order; ok is false if the length is not a multiple of RecordSize (an
// append cut short) or any record fails its check (zeros, garbage, a
// record shifted by a partial one before it, a record of 0). No bytes
// decode as no records.
func DecodeRecords(b []byte) (vs []uint64, ok bool) {
	if len(b)%RecordSize != 0 {
		return nil, false
	}
	for off := 0; off < len(b); off += RecordSize {
		r := b[off : off+RecordSize]
		v := binary.LittleEndian.Uint64(r[8:])
		if binary.LittleEndian.Uint64(r) != recordMagic || v == 0 ||
			binary.LittleEndian.Uint64(r[16:]) != mix(v^recordSalt1) ||
			binary.LittleEndian.Uint64(r[24:]) != mix(v^recordSalt2) {
			return nil, false
		}
		vs = append(vs, v)
	}
	return vs, true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
