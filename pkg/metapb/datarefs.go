package metapb

import (
	"fmt"
	"iter"
)

// DataRefKind says how a Txn op refers to data on the data nodes.
type DataRefKind int

// Kinds of data references.
const (
	// RefExtentKey is an extent key AppendExtents records in a file: its
	// writer must have written the range.
	RefExtentKey DataRefKind = iota
	// RefSplicedChunk is a chunk SpliceChunks puts in a layout: a chunk
	// written before, by anyone (dedup).
	RefSplicedChunk
	// RefRegisteredChunk is a chunk location a ChunkRefs item registers
	// in the chunk index (delta > 0 with a partition): its writer must
	// have stored the chunk there.
	RefRegisteredChunk
)

// Own reports whether a client may store a reference of kind k only to
// bytes it wrote (or may write) itself: an extent key or a chunk it
// registers; a spliced chunk may be anyone's it was shown.
func (k DataRefKind) Own() bool { return k != RefSplicedChunk }

// DataRef is one data range a Txn would store. Exactly one of Key and
// Chunk is set.
type DataRef struct {
	Kind     DataRefKind
	Op, Item int // the op's index in the Txn and the item's in the op
	Key      *ExtentKey
	Chunk    *Chunk
}

// Where names the reference in messages: "op 2 extent key 5".
func (r DataRef) Where() string {
	what := [...]string{RefExtentKey: "extent key", RefSplicedChunk: "chunk", RefRegisteredChunk: "chunk ref"}[r.Kind]
	return fmt.Sprintf("op %d %s %d", r.Op, what, r.Item)
}

// Range returns the reference's data partition, extent, extent offset and
// size.
func (r DataRef) Range() (partition, extent, offset, size uint64) {
	if r.Key != nil {
		return r.Key.GetPartitionId(), r.Key.GetExtentId(), r.Key.GetExtentOffset(), r.Key.GetSize()
	}
	return r.Chunk.GetPartitionId(), r.Chunk.GetExtentId(), r.Chunk.GetExtentOffset(), uint64(r.Chunk.GetSize())
}

// DataRefs yields, in order, the data ranges txn's ops would store: the
// extent keys of AppendExtents, the chunks of SpliceChunks and the chunk
// locations ChunkRefs items register. A chunk lookup or release stores no
// location and is not one. These are what a meta node checks a client's
// Txn for, and what a client shows its tokens for.
func DataRefs(txn *Txn) iter.Seq[DataRef] {
	return func(yield func(DataRef) bool) {
		for i, op := range txn.GetOps() {
			switch o := op.GetOp().(type) {
			case *Op_AppendExtents:
				for j, k := range o.AppendExtents.GetExtents() {
					if !yield(DataRef{Kind: RefExtentKey, Op: i, Item: j, Key: k}) {
						return
					}
				}
			case *Op_SpliceChunks:
				for j, c := range o.SpliceChunks.GetChunks() {
					if !yield(DataRef{Kind: RefSplicedChunk, Op: i, Item: j, Chunk: c}) {
						return
					}
				}
			case *Op_ChunkRefs:
				for j, it := range o.ChunkRefs.GetItems() {
					if c := it.GetChunk(); it.GetDelta() > 0 && c.GetPartitionId() != 0 {
						if !yield(DataRef{Kind: RefRegisteredChunk, Op: i, Item: j, Chunk: c}) {
							return
						}
					}
				}
			}
		}
	}
}
