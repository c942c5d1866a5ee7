package extentstore

import (
	"fmt"
	"log/slog"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// Kind is an extent's kind, fixed at creation.
type Kind uint8

const (
	// KindLarge holds the data of one file from offset 0, grown only by
	// appends, never padded, never shared (CFS §2.2.2).
	KindLarge Kind = 1
	// KindSmall packs many small files, each appended at the extent's end;
	// deleting one punches a hole (CFS §2.2.3).
	KindSmall Kind = 2
)

// String returns "large" or "small".
func (k Kind) String() string {
	switch k {
	case KindLarge:
		return "large"
	case KindSmall:
		return "small"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Options configure a Store. The zero value of every field means its
// default.
type Options struct {
	// FS is the file system; default diskfs.OS.
	FS diskfs.FS
	// BlockSize is the unit of checksumming: one CRC32C per block, so a read
	// verifies (and reads) whole blocks. Default 128 KiB; a multiple of 512,
	// at most 16 MiB. It is fixed when the store is created: Open of an
	// existing store uses the stored value and ignores this one.
	BlockSize int
	// SmallFileMax is the size threshold of small files (CFS's t): the
	// largest append accepted into a small extent. Default 128 KiB.
	SmallFileMax int
	// SmallExtentBytes is the size at which LeaseSmall stops handing out a
	// small extent and rolls to a new one. Default 128 MiB.
	SmallExtentBytes int64
	// OpenSmallExtents bounds how many small extents are leased at once,
	// and so how many writers of small files proceed in parallel. Default 8.
	OpenSmallExtents int
	// ExtentMaxBytes is the hard size limit of any extent, at most 4Mi
	// blocks (512 GiB with 128 KiB blocks). Default 1 GiB.
	ExtentMaxBytes int64
	// MaxWriteBytes bounds one Append or Overwrite (an overwrite is
	// journaled whole in the metadata log). Default 1 MiB, at most 16 MiB.
	MaxWriteBytes int
	// MaxExtents bounds the extents of the partition (memory is about
	// 200 bytes per extent plus 4 bytes per block). Default 1<<20.
	MaxExtents int
	// CompactBytes: once the metadata log has grown by this much (and by
	// more than the size of its last snapshot) since it was last
	// rewritten, the next commit round rewrites it. Default
	// DefaultCompactBytes.
	CompactBytes int64
	// JournalAppendBytes: when an extent's appends since the last commit
	// round are at most this many bytes, and are all the file has not
	// fsynced, the round writes them into the metadata log with the
	// extent's record instead of fsyncing the extent file; the file is
	// fsynced by the round that rewrites the log (compaction), before the
	// records leave it, and recovery writes the bytes again. Rounds of small
	// appends (small files) so cost one fsync, the log's, instead of one
	// more per extent, but their bytes are written twice. Default 8 KiB:
	// on a 2-core machine with one virtual disk, 4 KiB and 8 KiB files cost
	// the data nodes less CPU journaled (-23% and -7%), 16 KiB and 32 KiB
	// files more (+15% to +25%). Negative: never (every round fsyncs every
	// appended file). At most MaxWriteBytes.
	JournalAppendBytes int
	// SyncParallelism bounds the extent fsyncs a commit round runs at once.
	// Default 8; 1 makes rounds fully sequential (and deterministic, which
	// crash tests want).
	SyncParallelism int
	// Logger receives warnings about recovery and background failures;
	// default slog.Default().
	Logger *slog.Logger
}

const (
	minBlockSize = 512
	maxBlockSize = 16 << 20
	// maxBlocksPerExtent and maxHolesPerExtent bound an extent's record in
	// the metadata log (4 bytes per block CRC, at most ~24 per hole) well
	// under maxRecordBytes, even with an overwrite's bytes in it.
	maxBlocksPerExtent = 4 << 20
	maxHolesPerExtent  = 1 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = diskfs.OS
	}
	if o.BlockSize == 0 {
		o.BlockSize = 128 << 10
	}
	if o.SmallFileMax == 0 {
		o.SmallFileMax = 128 << 10
	}
	if o.SmallExtentBytes == 0 {
		o.SmallExtentBytes = 128 << 20
	}
	if o.OpenSmallExtents == 0 {
		o.OpenSmallExtents = 8
	}
	if o.ExtentMaxBytes == 0 {
		o.ExtentMaxBytes = 1 << 30
	}
	if o.MaxWriteBytes == 0 {
		o.MaxWriteBytes = 1 << 20
	}
	if o.MaxExtents == 0 {
		o.MaxExtents = 1 << 20
	}
	if o.CompactBytes == 0 {
		o.CompactBytes = DefaultCompactBytes
	}
	if o.SyncParallelism == 0 {
		o.SyncParallelism = 8
	}
	switch {
	case o.JournalAppendBytes == 0:
		o.JournalAppendBytes = min(8<<10, o.MaxWriteBytes)
	case o.JournalAppendBytes < 0:
		o.JournalAppendBytes = 0
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.BlockSize < minBlockSize || o.BlockSize > maxBlockSize || o.BlockSize%minBlockSize != 0:
		return o, fmt.Errorf("%w: block size %d (want a multiple of %d, at most %d)", ErrInvalid, o.BlockSize, minBlockSize, maxBlockSize)
	case o.SmallFileMax < 1 || o.SmallFileMax > o.MaxWriteBytes:
		return o, fmt.Errorf("%w: small file max %d (want 1..MaxWriteBytes=%d)", ErrInvalid, o.SmallFileMax, o.MaxWriteBytes)
	case o.MaxWriteBytes < 1 || o.MaxWriteBytes > maxRecordBytes/4:
		return o, fmt.Errorf("%w: max write %d", ErrInvalid, o.MaxWriteBytes)
	case o.ExtentMaxBytes < int64(o.MaxWriteBytes) || numBlocks(o.ExtentMaxBytes, int64(o.BlockSize)) > maxBlocksPerExtent:
		return o, fmt.Errorf("%w: extent max %d (want MaxWriteBytes..%d blocks)", ErrInvalid, o.ExtentMaxBytes, maxBlocksPerExtent)
	case o.SmallExtentBytes < 1 || o.SmallExtentBytes > o.ExtentMaxBytes:
		return o, fmt.Errorf("%w: small extent bytes %d (want 1..ExtentMaxBytes)", ErrInvalid, o.SmallExtentBytes)
	case o.OpenSmallExtents < 1 || o.OpenSmallExtents > 1<<12:
		return o, fmt.Errorf("%w: open small extents %d", ErrInvalid, o.OpenSmallExtents)
	case o.MaxExtents < 1:
		return o, fmt.Errorf("%w: max extents %d", ErrInvalid, o.MaxExtents)
	case o.SyncParallelism < 1 || o.SyncParallelism > 256:
		return o, fmt.Errorf("%w: sync parallelism %d", ErrInvalid, o.SyncParallelism)
	case o.JournalAppendBytes > o.MaxWriteBytes:
		return o, fmt.Errorf("%w: journal append bytes %d (want at most MaxWriteBytes=%d)", ErrInvalid, o.JournalAppendBytes, o.MaxWriteBytes)
	case o.CompactBytes < 1:
		return o, fmt.Errorf("%w: compact bytes %d", ErrInvalid, o.CompactBytes)
	}
	return o, nil
}

// DefaultCompactBytes is Options.CompactBytes's default.
const DefaultCompactBytes = 16 << 20
