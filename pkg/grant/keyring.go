package grant

import (
	"crypto/hmac"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Key is one signing key: an id the tokens name, the secret, and when the
// masters created it.
type Key struct {
	ID        uint32
	Secret    []byte
	CreatedMs int64 // unix milliseconds
}

// SecretLen is the size of a key's secret: HMAC-SHA256's block-size bound
// is 64; 32 random bytes give the full 256 bits.
const SecretLen = 32

// Activation is how long after its creation a key starts signing. Every
// node hears of a new key within a heartbeat or two; a signer that used it
// at once would hand out tokens that data nodes still without it refuse.
// Until then the previous key signs (a cluster's first key signs at once:
// there is no other).
const Activation = 10 * time.Second

// Keyring is the keys a node knows, as its last heartbeat named them. Safe
// for concurrent use; Set replaces the whole set atomically.
type Keyring struct {
	keys atomic.Pointer[[]Key] // sorted by ID
}

// Set replaces the keys. Keys with an empty secret are ignored.
func (kr *Keyring) Set(keys []Key) {
	ks := make([]Key, 0, len(keys))
	for _, k := range keys {
		if len(k.Secret) > 0 {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b Key) int { return int(int64(a.ID) - int64(b.ID)) })
	kr.keys.Store(&ks)
}

// Len is the number of keys known.
func (kr *Keyring) Len() int {
	if ks := kr.keys.Load(); ks != nil {
		return len(*ks)
	}
	return 0
}

// signing returns the key to sign with at now: the newest key active for
// Activation, else the oldest known (a young cluster's only key).
func (kr *Keyring) signing(now time.Time) (Key, bool) {
	ks := kr.keys.Load()
	if ks == nil || len(*ks) == 0 {
		return Key{}, false
	}
	cut := now.Add(-Activation).UnixMilli()
	for i := len(*ks) - 1; i >= 0; i-- {
		if (*ks)[i].CreatedMs <= cut {
			return (*ks)[i], true
		}
	}
	return (*ks)[0], true
}

func (kr *Keyring) key(id uint32) (Key, bool) {
	ks := kr.keys.Load()
	if ks == nil {
		return Key{}, false
	}
	i, ok := slices.BinarySearchFunc(*ks, id, func(k Key, id uint32) int { return int(int64(k.ID) - int64(id)) })
	if !ok {
		return Key{}, false
	}
	return (*ks)[i], true
}

// Sign returns the tokens of g (Ranges merged, split into tokens of at most
// MaxRanges each; no token when g has no range), signed with the current
// key, valid for ttl from now. It fails when the node knows no key yet.
func (kr *Keyring) Sign(g Grant, ttl time.Duration, now time.Time) ([][]byte, error) {
	k, ok := kr.signing(now)
	if !ok {
		return nil, fmt.Errorf("grant: no signing key yet (the masters send one with the next heartbeat)")
	}
	g.KeyID = k.ID
	g.Expires = now.Add(ttl).Unix()
	ranges := Merge(g.Ranges)
	var out [][]byte
	for len(ranges) > 0 {
		n := min(len(ranges), MaxRanges)
		g.Ranges = ranges[:n]
		ranges = ranges[n:]
		body, err := encode(&g)
		if err != nil {
			return nil, err
		}
		out = append(out, append(body, mac(k.Secret, body)...))
	}
	return out, nil
}

// Verify checks tok's signature with the key it names, that it has not
// expired at now and that holder (the serial of the connection's
// certificate) is the one it was issued to, and returns what it grants.
func (kr *Keyring) Verify(tok []byte, holder string, now time.Time) (*Grant, error) {
	g, err := Decode(tok)
	if err != nil {
		return nil, err
	}
	k, ok := kr.key(g.KeyID)
	if !ok {
		return nil, fmt.Errorf("%w (key %d)", ErrUnknownKey, g.KeyID)
	}
	body := tok[:len(tok)-MACLen]
	if !hmac.Equal(mac(k.Secret, body), tok[len(body):]) {
		return nil, ErrBadMAC
	}
	if now.Unix() >= g.Expires {
		return nil, ErrExpired
	}
	if g.Holder != holder {
		return nil, ErrNotHolder
	}
	return g, nil
}
