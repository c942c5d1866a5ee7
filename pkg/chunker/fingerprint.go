package chunker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// FingerprintSize is the encoded size of a [Fingerprint] in bytes.
const FingerprintSize = 1 + sha256.Size

// Fingerprint names a chunk: byte 0 is the [Algorithm] that cut it and bytes
// 1..32 are the SHA-256 of its content. The hash covers the content only, so
// a data node can verify a chunk with plain SHA-256; the prefix keeps
// fingerprints of different algorithms from ever comparing equal. The zero
// value names no chunk.
type Fingerprint [FingerprintSize]byte

// Sum returns the fingerprint of data cut by alg.
func Sum(alg Algorithm, data []byte) Fingerprint {
	var f Fingerprint
	f[0] = byte(alg)
	h := sha256.Sum256(data)
	copy(f[1:], h[:])
	return f
}

// Algorithm returns the algorithm id stored in f.
func (f Fingerprint) Algorithm() Algorithm { return Algorithm(f[0]) }

// IsZero reports whether f is the zero value.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// String returns f as 66 lower-case hex digits, the algorithm byte first.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// MarshalText encodes f as [Fingerprint.String] does.
func (f Fingerprint) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText decodes what [Fingerprint.MarshalText] produced, with the
// checks of [ParseFingerprint].
func (f *Fingerprint) UnmarshalText(text []byte) error {
	p, err := ParseFingerprint(string(text))
	if err != nil {
		return err
	}
	*f = p
	return nil
}

// ParseFingerprint decodes the output of [Fingerprint.String] (either hex
// case). It rejects wrong lengths, non-hex digits and algorithm ids this
// package does not know, so a parsed fingerprint always names a real
// algorithm.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	if len(s) != 2*FingerprintSize {
		return f, fmt.Errorf("parse fingerprint %q: length %d, want %d", s, len(s), 2*FingerprintSize)
	}
	if _, err := hex.Decode(f[:], []byte(s)); err != nil {
		return Fingerprint{}, fmt.Errorf("parse fingerprint %q: %w", s, err)
	}
	if !f.Algorithm().Valid() {
		return Fingerprint{}, fmt.Errorf("parse fingerprint %q: unknown algorithm %d", s, f[0])
	}
	return f, nil
}
