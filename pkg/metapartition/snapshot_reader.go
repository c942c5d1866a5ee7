package metapartition

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// snapReader, the snapshot decoder's primitive reads: varints, bounded byte
// strings and record counts, file types, flags and fingerprints, with the
// first error sticking.

// snapReader decodes the snapshot body; the first error sticks and every
// later read returns zero.
type snapReader struct {
	b       []byte
	off     int
	err     error
	version uint64
}

func (r *snapReader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *snapReader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.failf("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *snapReader) i() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.failf("bad varint")
		return 0
	}
	r.off += n
	return v
}

// u32 reads a varint that must fit in 32 bits.
func (r *snapReader) u32(what string) uint32 {
	v := r.u()
	if v > math.MaxUint32 {
		r.failf("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

func (r *snapReader) raw(what string, max int) []byte {
	n := r.u()
	if r.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(r.b)-r.off) {
		r.failf("%s of %d bytes (limit %d, %d left)", what, n, max, len(r.b)-r.off)
		return nil
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b
}

// count reads a record count and bounds it by what the remaining bytes can
// hold (each record takes at least minBytes), so that a corrupt count cannot
// make the decoder loop or allocate beyond the input's size.
func (r *snapReader) count(what string, minBytes int) int {
	n := r.u()
	if r.err != nil {
		return 0
	}
	if n > uint64((len(r.b)-r.off)/minBytes) {
		r.failf("%d %s cannot fit in %d bytes", n, what, len(r.b)-r.off)
		return 0
	}
	return int(n)
}

func (r *snapReader) fileType(what string) metapb.FileType {
	v := r.u()
	t := metapb.FileType(v)
	if v > math.MaxInt32 || !validType(t) {
		r.failf("invalid %s type %d", what, v)
		return 0
	}
	return t
}

// fingerprint reads a raw fingerprint, which must have a non-zero
// algorithm byte (as parseFingerprint requires).
func (r *snapReader) fingerprint(what string) chunker.Fingerprint {
	var fp chunker.Fingerprint
	if r.err != nil {
		return fp
	}
	if len(r.b)-r.off < len(fp) {
		r.failf("%s: fingerprint cut short", what)
		return fp
	}
	copy(fp[:], r.b[r.off:])
	r.off += len(fp)
	if fp[0] == byte(chunker.AlgorithmInvalid) {
		r.failf("%s: fingerprint with algorithm 0", what)
	}
	return fp
}

func (r *snapReader) flag(what string) bool {
	switch v := r.u(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		r.failf("%s flag %d", what, v)
		return false
	}
}
