// Package extentstore is the on-disk store of one data partition replica
// (CFS §2.2): a set of extents, each a file identified by a uint64 id, with
// a CRC32C per block, and a metadata log that says which bytes of each
// extent are committed. Replication, the network and Raft live above it and
// call into it; every file access goes through a diskfs.FS, so tests inject
// errors and crashes (diskfs.MemFS, diskfs.Inject).
//
// # Extents
//
// A large extent (KindLarge) holds one file's data from offset 0, grown only
// by appends, never padded, never shared. A small-file extent (KindSmall)
// packs many small files (at most Options.SmallFileMax bytes each), each
// appended at the extent's end; deleting one punches a hole
// (fallocate PUNCH_HOLE|KEEP_SIZE) so that du drops, and its range then
// reads as zeros. Small extents are handed to one writer at a time by
// LeaseSmall and roll over at Options.SmallExtentBytes. Overwrite replaces
// existing committed bytes in place (the Raft path). Every extent is at most
// Options.ExtentMaxBytes long.
//
// # On-disk layout
//
// The partition directory holds:
//
//	LOCK        flock'ed while the store is open
//	META        the metadata log (format in record.go)
//	META.tmp    a log being rewritten; removed by Open
//	ext-<id>    one file per extent, id in decimal, bytes at their offsets
//
// META is a sequence of records, each framed with its length and a CRC32C:
// first a snapshot (a header with the block size, one record per extent with
// its kind, size, every block CRC and every punched range, an end marker),
// then, per commit round, one record per changed extent: its new size, the
// CRCs of the blocks that changed, new holes, an overwrite's bytes, small
// appends' bytes (see the commit rule), or its creation or deletion. When the log has grown by Options.CompactBytes (and
// by more than its snapshot) a commit round rewrites it as a new snapshot:
// written to META.tmp, fsynced, renamed over META, directory fsynced.
// Block CRCs live only in META and in memory (4 bytes per block): there is
// no per-extent checksum file whose updates could tear apart from the data.
//
// # Checksums
//
// Block b of an extent covers bytes [b*BlockSize, (b+1)*BlockSize), the last
// block partial; its CRC is over its bytes with punched ranges taken as
// zeros. Appends extend the tail block's CRC incrementally; punches and
// overwrites recompute the CRCs of the blocks they touch, after reading and
// verifying them (so corruption is never blessed with a fresh CRC). Every
// read (ReadAt, Section, Scrub, and the edges of Overwrite and PunchSmall)
// reads whole blocks, masks holes and checks the CRC; a mismatch is a
// *CorruptionError naming extent and block, and the bad bytes are never
// returned. RepairBlock restores a block from a healthy replica's bytes,
// accepting them only if they match the CRC this replica recorded.
//
// # The commit rule
//
// Append, CreateExtent/NewExtent, DeleteExtent and PunchSmall change memory
// and page cache only. Sync is the commit: a group commit that, for every
// extent changed since the last round, fsyncs the extent file (and the
// directory if extents were created), then appends the extent's record to
// META and fsyncs META. The META fsync is the commit point. Only after it
// are holes punched and deleted files removed.
//
// Small appends are journaled instead: when an extent's appends since the
// last round are at most Options.JournalAppendBytes and are all its file
// has not fsynced, their bytes go into the extent's record and the file is
// not fsynced in that round. Such a file is fsynced by the next round that
// rewrites META as a snapshot, before the records that hold its bytes leave
// the log. A round of small files thus costs one fsync, META's.
//
//   - An append is acknowledged - may be reported to the client or the
//     previous replica - once a Sync called after Append returned has
//     returned nil. Concurrent callers share rounds (one META fsync per
//     round, however many callers and extents).
//   - Overwrite is durable when it returns: it commits the extent's pending
//     appends, journals the new bytes in META, fsyncs, then writes in place.
//   - Deletions and punches are durable after the next Sync.
//   - Committed is per extent and monotone: ExtentInfo.Committed.
//
// # Crash consistency
//
// After a crash at any instant, Open (see its comment) replays META to its
// first torn record, cuts every extent file to its committed size, redoes
// the journaled overwrites and recent holes, verifies recently changed
// blocks, removes files of uncommitted or deleted extents, and rewrites META.
// Why nothing acknowledged is lost and nothing unacknowledged is seen:
//
//   - An extent's committed size only grows through a record written after
//     the extent file was fsynced, or through a record that holds the
//     appended bytes themselves; so every committed byte is on disk, in the
//     file or in the log's tail (from which Open writes it again), with its
//     CRC in the same or an earlier record. A snapshot drops the tail only
//     after the files it covered were fsynced.
//   - Bytes past the committed size (unsynced or torn appends) are cut at
//     Open, whatever the disk kept of them; so is a torn partial block.
//   - An extent's changes of one round are one framed record: all of it or
//     nothing replays (a torn frame fails its CRC and ends the log), so size,
//     CRCs and holes never disagree.
//   - An overwrite's bytes are durable in META before the extent is touched,
//     so a torn in-place write is rewritten at Open.
//   - A hole is punched only after its record is durable, and reads mask
//     holes, so a hole that did not reach the disk costs space, not
//     correctness.
//   - Extent ids are reserved durably in batches, so none is reused.
//
// TestCrashAtEveryStep checks exactly this: a crash before every disk
// operation of random runs, under three crash models (unsynced data lost,
// kept as a torn prefix, kept as a torn random subset).
//
// # Failures
//
// ENOSPC on a data write makes the store read-only (Err wraps ErrReadOnly
// and ErrNoSpace): appends, creations and overwrites are refused, while
// reads, Sync, deletions, punches and repairs go on, and nothing written
// before is touched. A failed fsync or META write makes it failed
// (ErrFailed): only reads work, and reopening recovers the last committed
// state. EIO on a read returns an error wrapping ErrIO.
//
// # What the replication layer must do
//
//   - Appends (primary-backup, CFS §2.2.5): the primary picks the extent
//     (NewExtent for a new large file; LeaseSmall for small files, holding
//     the lease until the file is acknowledged) and replicas create it with
//     CreateExtent(id, kind). Every replica applies a packet with
//     Append(id, off, data); an *OffsetError gives the replica's size, to
//     detect a gap or a duplicate. A replica acknowledges a packet only
//     after Sync returns nil; the primary acknowledges the offset all
//     replicas hold, and the client records it in the meta node. On a
//     failed append the client moves on to another extent: bytes a replica
//     holds past the all-replica offset are never read, so they need no
//     rollback.
//   - Overwrites (Raft): apply a committed entry with Overwrite, which is
//     durable on return and idempotent, so replaying entries after a restart
//     is safe; advance the applied index after it returns.
//   - Reads: ReadAt, or Section for sendfile/splice, only below the offset
//     the client obtained from the meta node.
//   - Deletion (CFS §2.7.3): the collector calls DeleteExtent or PunchSmall,
//     then Sync; ErrNotFound after a retry means already done, and punching
//     twice is a no-op. Usage reports the space for cairn status.
//   - Repair: run Scrub in the background (paced by BytesPerSecond); for each
//     BadBlock read [Offset, Offset+Length) from a healthy replica and call
//     RepairBlock. ErrRepairMismatch means the replicas disagree on
//     committed bytes: rebuild this replica. A replica that was down
//     compares Extents and Checksums with a peer and appends what it lacks.
//   - Health: after an error, check Err. Read-only: report the partition
//     read-only to the master and free space (deletes) or move it. Failed,
//     or ErrIO from reads: mark the replica bad; Close and Open recovers, or
//     rebuild from peers.
//
// # Costs
//
// Append: a page-cache write plus CRC32C of the bytes (hardware, ~10 GB/s),
// and a copy of them while they are within the journal's bound.
// Sync round: one fdatasync per changed extent whose appends were not
// journaled (Options.SyncParallelism at once) plus one for META. ReadAt: the blocks touched, read whole; aligned
// runs go straight into the caller's buffer. Memory: ~200 bytes per extent
// plus 4 bytes per block. Open: reads META, stats every extent, reads one
// block per recently changed extent, writes a snapshot.
package extentstore
