package extentstore

import (
	"errors"
	"fmt"
	"syscall"
)

// Errors. Every error the store returns wraps one of these (test with
// errors.Is) and says which extent, offset or block it concerns.
var (
	// ErrNotFound: no such extent (never created, or deleted).
	ErrNotFound = errors.New("extentstore: no such extent")
	// ErrExists: CreateExtent of an id that exists or whose deletion is not
	// yet committed.
	ErrExists = errors.New("extentstore: extent exists")
	// ErrInvalid: a bad argument (negative offset, empty write, id 0, ...).
	ErrInvalid = errors.New("extentstore: invalid argument")
	// ErrOffset: an Append not at the extent's current size. The error is an
	// *OffsetError carrying that size, so a replica can tell how far behind
	// or ahead it is.
	ErrOffset = errors.New("extentstore: append offset is not the extent's size")
	// ErrOutOfRange: an overwrite, punch or repair outside the extent's
	// committed bytes.
	ErrOutOfRange = errors.New("extentstore: range outside the extent's committed bytes")
	// ErrTooLarge: a write above Options.MaxWriteBytes, or a small-file
	// append above Options.SmallFileMax.
	ErrTooLarge = errors.New("extentstore: write too large")
	// ErrExtentFull: an append would take the extent past
	// Options.ExtentMaxBytes.
	ErrExtentFull = errors.New("extentstore: extent at its size limit")
	// ErrTooManyExtents: the partition holds Options.MaxExtents extents.
	ErrTooManyExtents = errors.New("extentstore: too many extents")
	// ErrTooManyHoles: a punch would give the extent more than
	// maxHolesPerExtent separate holes.
	ErrTooManyHoles = errors.New("extentstore: too many holes in the extent")
	// ErrWrongKind: PunchSmall of a large extent.
	ErrWrongKind = errors.New("extentstore: operation not valid for this extent kind")
	// ErrPunched: an overwrite or a zero-copy section touching a punched
	// hole (the small file there was deleted).
	ErrPunched = errors.New("extentstore: range overlaps a punched hole")
	// ErrCorrupt: stored bytes do not match their CRC. The error is a
	// *CorruptionError naming the block; the bad bytes are never returned.
	ErrCorrupt = errors.New("extentstore: checksum mismatch")
	// ErrRepairMismatch: RepairBlock was given bytes whose CRC is not the
	// one recorded for the block.
	ErrRepairMismatch = errors.New("extentstore: repair data does not match the recorded checksum")
	// ErrCorruptMeta: the metadata log is damaged beyond a torn tail, or
	// describes an impossible state. The replica must be rebuilt.
	ErrCorruptMeta = errors.New("extentstore: metadata log corrupt")
	// ErrNoSpace: the file system returned ENOSPC (or EDQUOT). The store has
	// made itself read-only; data written before is intact.
	ErrNoSpace = errors.New("extentstore: no space left on device")
	// ErrIO: the file system returned EIO. The caller should mark this
	// replica bad and repair it from its peers.
	ErrIO = errors.New("extentstore: I/O error")
	// ErrReadOnly: the store refuses new data since a write hit ENOSPC.
	// Reads, Sync, deletes and punches (which free space) still work;
	// reopening clears the state.
	ErrReadOnly = errors.New("extentstore: store is read-only")
	// ErrFailed: a sync or metadata write failed, so what is durable is no
	// longer known in memory. Only reads work; Open recovers the last
	// committed state.
	ErrFailed = errors.New("extentstore: store failed; reopen to recover")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("extentstore: store closed")
)

// OffsetError is returned by Append when off is not the extent's size.
type OffsetError struct {
	Extent uint64
	Off    int64 // the offset asked for
	Size   int64 // the extent's size: where an append must go
}

// Error describes the mismatch.
func (e *OffsetError) Error() string {
	return fmt.Sprintf("extent %d: append at %d but size is %d", e.Extent, e.Off, e.Size)
}

// Is makes errors.Is(err, ErrOffset) true.
func (e *OffsetError) Is(target error) bool { return target == ErrOffset }

// CorruptionError reports a block whose bytes fail their CRC, or are missing
// from the file.
type CorruptionError struct {
	Extent uint64
	Block  int64
	Offset int64 // of the block in the extent
	Length int64 // of the block
	Want   uint32
	Got    uint32
	// Missing is true when the file is shorter than the block: bytes that
	// were committed are gone.
	Missing bool
}

// Error names the extent, the block and the CRCs.
func (e *CorruptionError) Error() string {
	if e.Missing {
		return fmt.Sprintf("extent %d: block %d [%d,+%d): bytes missing from file", e.Extent, e.Block, e.Offset, e.Length)
	}
	return fmt.Sprintf("extent %d: block %d [%d,+%d): crc32c %08x, want %08x", e.Extent, e.Block, e.Offset, e.Length, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// fsError is a file system error tagged with the store error it maps to.
type fsError struct {
	kind error
	err  error
}

func (e *fsError) Error() string   { return e.err.Error() }
func (e *fsError) Unwrap() []error { return []error{e.kind, e.err} }

// classify tags ENOSPC/EDQUOT with ErrNoSpace and EIO with ErrIO, keeping the
// original error reachable through errors.Is/As.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &fsError{kind: ErrNoSpace, err: err}
	case errors.Is(err, syscall.EIO):
		return &fsError{kind: ErrIO, err: err}
	}
	return err
}
