// Package hybridindex decides which meta partition (MP) holds the record of
// a name: FalconFS's hybrid metadata indexing (FalconFS §4.2.1) over a
// volume's fixed set of hash slots (ARCHITECTURE.md §3).
//
// The record of (parent inode, name) lives on the owner of the slot of the
// name's hash, so a client that knows only a path finds a file's MP in one
// hop, and the children of one directory spread over all MPs. Two kinds of
// exception-table entries repair what filename hashing gets wrong:
//
//   - PathWalk, for hot names (Makefile, __init__.py): the slot comes from
//     the hash of the parent's inode number and the name, spreading equal
//     names in different directories. A client that does not know the
//     parent's inode number sends the request to any MP, which resolves the
//     parent and forwards it: two hops.
//   - Override, for hash variance (few distinct names): the record lives on
//     a named MP. One hop.
//
// The exception table is chosen by package loadbalance.
//
// The package is pure: no I/O, no clock, no goroutines, no global state; the
// same table routes a name to the same MP on every machine and every Go
// version.
//
// # Placement function (HashVersion 1)
//
//	Hash(name)               = XXH64(name bytes, seed 0)
//	HashParent(parent, name) = XXH64(le64(parent) ‖ name bytes, seed 0)
//	SlotOfHash(h, S)         = ⌊h × S / 2^64⌋
//
// XXH64 was chosen over FNV-1a because it is a published, versioned
// algorithm with reference values in many languages (so a client in another
// language can place records), it mixes short inputs well in every output
// bit, and it is fast; it is implemented in this package so that no
// dependency upgrade can move a record. Reducing by the high bits makes each
// slot a contiguous hash range. Golden-value tests pin all three functions.
//
// # Slots
//
// NewSlots makes the cluster map's initial contiguous assignment; Rebalance
// gives new or under-full MPs their share while moving the fewest slots and
// never moving a slot between two MPs that both keep their share.
package hybridindex
