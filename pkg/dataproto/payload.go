package dataproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Error is a response with a code other than CodeOK, as a Go error.
type Error struct {
	Op   Op
	Code Code
	// Msg is the server's explanation (at most MaxMessage bytes).
	Msg string
	// Header is the whole response header: Size, Arg and Epoch carry
	// code-specific details (the replica's size for CodeOffsetMismatch, the
	// leader for CodeNotLeader, the partition's epoch for CodeStaleEpoch).
	Header Header
}

// Error names the op, the code and the server's message.
func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("data node: %v partition %d: %v", e.Op, e.Header.Partition, e.Code)
	}
	return fmt.Sprintf("data node: %v partition %d: %v: %s", e.Op, e.Header.Partition, e.Code, e.Msg)
}

// CodeOf returns the code of an *Error in err's chain, CodeOK for nil, and
// CodeInternal for any other error.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	for e := err; e != nil; {
		if pe, ok := e.(*Error); ok {
			return pe.Code
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return CodeInternal
}

// responseError turns an error response into an *Error.
func responseError(h *Header, payload []byte) error {
	if h.Code == CodeOK {
		return nil
	}
	msg := payload
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage]
	}
	s := string(msg)
	if !utf8.ValidString(s) {
		s = fmt.Sprintf("%q", s)
	}
	return &Error{Op: h.Op, Code: h.Code, Msg: s, Header: *h}
}

// ExtentEntry describes one extent in an OpListExtents response.
type ExtentEntry struct {
	ID   uint64
	Kind uint8
	// Size is the bytes written, Committed the bytes durable on that
	// replica, Punched the bytes of punched holes.
	Size, Committed, Punched int64
}

// ExtentEntryLen is the encoded size of an ExtentEntry.
const ExtentEntryLen = 33

// MaxExtentEntries is how many entries fit in one response.
const MaxExtentEntries = MaxPayload / ExtentEntryLen

// AppendExtentEntries encodes entries after dst.
func AppendExtentEntries(dst []byte, entries []ExtentEntry) []byte {
	for _, e := range entries {
		dst = binary.LittleEndian.AppendUint64(dst, e.ID)
		dst = append(dst, e.Kind)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Size))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Committed))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Punched))
	}
	return dst
}

// DecodeExtentEntries decodes a listing; it fails on a length that is not a
// whole number of entries or on negative sizes.
func DecodeExtentEntries(b []byte) ([]ExtentEntry, error) {
	if len(b)%ExtentEntryLen != 0 {
		return nil, fmt.Errorf("%w: extent list of %d bytes", ErrBadHeader, len(b))
	}
	out := make([]ExtentEntry, 0, len(b)/ExtentEntryLen)
	le := binary.LittleEndian
	for ; len(b) > 0; b = b[ExtentEntryLen:] {
		e := ExtentEntry{ID: le.Uint64(b), Kind: b[8]}
		s, c, p := le.Uint64(b[9:]), le.Uint64(b[17:]), le.Uint64(b[25:])
		if s > math.MaxInt64 || c > math.MaxInt64 || p > math.MaxInt64 {
			return nil, fmt.Errorf("%w: extent %d: size above 2^63", ErrBadHeader, e.ID)
		}
		e.Size, e.Committed, e.Punched = int64(s), int64(c), int64(p)
		out = append(out, e)
	}
	return out, nil
}

// AppendChecksums encodes block CRCs after dst.
func AppendChecksums(dst []byte, crcs []uint32) []byte {
	for _, c := range crcs {
		dst = binary.LittleEndian.AppendUint32(dst, c)
	}
	return dst
}

// DecodeChecksums decodes block CRCs.
func DecodeChecksums(b []byte) ([]uint32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: checksum list of %d bytes", ErrBadHeader, len(b))
	}
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out, nil
}

// ErrBadChunk: an OpWriteChunk payload too short to hold a fingerprint and
// at least one byte.
var ErrBadChunk = errors.New("dataproto: malformed chunk payload")

// SplitChunk splits an OpWriteChunk payload into the fingerprint it starts
// with and the chunk's bytes (which alias p). It fails on a payload with no
// chunk byte or a chunk above MaxChunk; it does not check the fingerprint
// against the bytes (the data node does, with SHA-256).
func SplitChunk(p []byte) (fp [FingerprintLen]byte, data []byte, err error) {
	switch {
	case len(p) <= FingerprintLen:
		return fp, nil, fmt.Errorf("%w: %d bytes, want a %d-byte fingerprint and at least one byte", ErrBadChunk, len(p), FingerprintLen)
	case len(p) > MaxChunkPayload:
		return fp, nil, fmt.Errorf("%w: chunk of %d bytes above MaxChunk (%d)", ErrBadChunk, len(p)-FingerprintLen, MaxChunk)
	}
	copy(fp[:], p)
	return fp, p[FingerprintLen:], nil
}
