package grant

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// The token's layout, little-endian:
//
//	version u8 | mode u8 | key id u32 | expires i64 | volume u64 | ino u64 |
//	holder length u8 | holder | range count u16 | ranges (4 × u64 each) |
//	MAC (the first MACLen bytes of HMAC-SHA256 over everything before it)
//
// 128 bits of MAC: a forger gets one try per request, and each costs a
// round trip to a data node.
const (
	version   = 1
	fixedLen  = 1 + 1 + 4 + 8 + 8 + 8 + 1 + 2
	rangeLen  = 32
	MACLen    = 16
	maxHolder = 255
	// MaxRanges bounds the ranges of one token, so that one fits a data
	// path frame with room to spare (MaxRanges × 32 bytes = 32 KiB). A file
	// with more is granted in several tokens (Keyring.Sign).
	MaxRanges = 1024
)

// Errors of Verify. ErrUnknownKey may pass: the node has not heard of a key
// yet. The others are final for the token.
var (
	ErrMalformed  = errors.New("grant: malformed token")
	ErrBadMAC     = errors.New("grant: the token's signature does not verify")
	ErrUnknownKey = errors.New("grant: the token names a key this node does not know")
	ErrExpired    = errors.New("grant: the token expired")
	ErrNotHolder  = errors.New("grant: the token was issued to another certificate")
)

// encode returns g's token body, without the MAC.
func encode(g *Grant) ([]byte, error) {
	if len(g.Holder) > maxHolder {
		return nil, fmt.Errorf("grant: holder of %d bytes (at most %d)", len(g.Holder), maxHolder)
	}
	if len(g.Ranges) > MaxRanges {
		return nil, fmt.Errorf("grant: %d ranges (at most %d per token)", len(g.Ranges), MaxRanges)
	}
	b := make([]byte, 0, fixedLen+len(g.Holder)+rangeLen*len(g.Ranges)+MACLen)
	le := binary.LittleEndian
	b = append(b, version, byte(g.Mode))
	b = le.AppendUint32(b, g.KeyID)
	b = le.AppendUint64(b, uint64(g.Expires))
	b = le.AppendUint64(b, g.Volume)
	b = le.AppendUint64(b, g.Ino)
	b = append(b, byte(len(g.Holder)))
	b = append(b, g.Holder...)
	b = le.AppendUint16(b, uint16(len(g.Ranges)))
	for _, r := range g.Ranges {
		b = le.AppendUint64(b, r.Partition)
		b = le.AppendUint64(b, r.Extent)
		b = le.AppendUint64(b, r.Lo)
		b = le.AppendUint64(b, r.Hi)
	}
	return b, nil
}

// Decode parses a token without verifying it: what a client reads of the
// tokens it holds (Book). Data nodes use Keyring.Verify.
func Decode(tok []byte) (*Grant, error) {
	if len(tok) < fixedLen+MACLen || tok[0] != version {
		return nil, ErrMalformed
	}
	le := binary.LittleEndian
	g := &Grant{Mode: Mode(tok[1]), KeyID: le.Uint32(tok[2:]), Expires: int64(le.Uint64(tok[6:])),
		Volume: le.Uint64(tok[14:]), Ino: le.Uint64(tok[22:])}
	if g.Mode != Read && g.Mode != Write {
		return nil, ErrMalformed
	}
	hl := int(tok[30])
	p := 31
	if len(tok) < p+hl+2+MACLen {
		return nil, ErrMalformed
	}
	g.Holder = string(tok[p : p+hl])
	p += hl
	n := int(le.Uint16(tok[p:]))
	p += 2
	if n > MaxRanges || len(tok) != p+n*rangeLen+MACLen {
		return nil, ErrMalformed
	}
	g.Ranges = make([]Range, n)
	for i := range g.Ranges {
		r := Range{Partition: le.Uint64(tok[p:]), Extent: le.Uint64(tok[p+8:]), Lo: le.Uint64(tok[p+16:]), Hi: le.Uint64(tok[p+24:])}
		if r.Hi < r.Lo {
			return nil, ErrMalformed
		}
		g.Ranges[i] = r
		p += rangeLen
	}
	return g, nil
}

// mac is the token's MAC of body under secret.
func mac(secret, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(body)
	return h.Sum(nil)[:MACLen]
}
