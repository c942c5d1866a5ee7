// Package grant is the extent capability of Cairn's data path: a short-lived
// token, signed by the meta node that owns a file, naming the byte ranges of
// the extents a client may read or write, for one client certificate.
//
// A data node cannot tell which file an extent belongs to, so without a
// grant it could only check a client's volume: a client confined to a
// subtree (pkg/capability) could list the extents of every partition of
// its volume and read them all. With grants the meta node, which checks the
// client's subtree, ids and permissions, hands out exactly the ranges of the
// files the client may see (the model of Ceph's cephx tickets and of
// CubeFS's and HDFS's block tokens), and the data node serves a client only
// what a grant it presented names.
//
// Tokens are signed with HMAC-SHA256 under a key the masters create and
// rotate (Key, carried to meta and data nodes with their heartbeats, never
// to clients). A token names the key it was signed with, so a data node
// that knows several keys verifies each token with the right one; keys
// overlap by far more than a token lives.
//
// The package is pure logic: encoding, signing and verifying (token.go),
// the keys a node holds (Keyring), the ranges a data node lets one
// connection use (Spans) and the tokens a client holds (Book).
package grant

import (
	"cmp"
	"fmt"
	"slices"
)

// Mode is what a grant allows.
type Mode uint8

// Modes. Write includes read.
const (
	Read  Mode = 1
	Write Mode = 2
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Allows reports whether a grant of mode m allows an access of mode want.
func (m Mode) Allows(want Mode) bool { return m >= want && want >= Read && m <= Write }

// Range is the bytes [Lo, Hi) of extent Extent of data partition Partition.
type Range struct {
	Partition, Extent uint64
	Lo, Hi            uint64
}

// Covers reports whether r holds every byte of [lo, lo+n) of its extent.
func (r Range) Covers(lo, n uint64) bool { return lo >= r.Lo && lo+n <= r.Hi && lo+n >= lo }

// Grant is what a token says: the holder (the serial of the client
// certificate it was issued to: another connection cannot use it), the
// volume and inode it was issued for, the mode, when it stops being valid,
// and the ranges.
type Grant struct {
	KeyID   uint32
	Holder  string
	Volume  uint64
	Ino     uint64
	Mode    Mode
	Expires int64 // unix seconds
	Ranges  []Range
}

// Merge sorts ranges by partition, extent and offset and merges those that
// overlap or touch. It never widens a range over bytes none of them named:
// two small files packed in one extent with another file between them stay
// two ranges.
func Merge(ranges []Range) []Range {
	if len(ranges) < 2 {
		return ranges
	}
	slices.SortFunc(ranges, func(a, b Range) int {
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Extent, b.Extent); c != 0 {
			return c
		}
		return cmp.Compare(a.Lo, b.Lo)
	})
	out := ranges[:1]
	for _, r := range ranges[1:] {
		last := &out[len(out)-1]
		if r.Partition == last.Partition && r.Extent == last.Extent && r.Lo <= last.Hi {
			last.Hi = max(last.Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}
