// Package metapartition is the replicated state machine of one meta
// partition (MP): the inodes whose numbers fall in the partition's inode
// range, and the dentries the volume's hybrid index routes to it. It is
// pure: no network, no goroutines, no clock, no randomness. The multi-raft
// host drives it through [Partition.Apply], [Partition.Snapshot] and
// [Partition.Restore] (it implements multiraft.StateMachine); the meta node
// service reads it through the query methods.
//
// # Data model
//
// An inode's home is the MP whose range [start, end] (end 0 = open) holds
// its number; inodes never move, also across rename. CreateInode allocates
// MaxIno()+1, and fails with ENOSPC past the end of the range; the master
// then cuts the range with SetRange and adds an MP above it (CFS Algorithm
// 1). Inside its range an MP is the authority: an inode number there that
// it does not hold does not exist. Outside it, an inode is someone else's.
//
// A dentry (parent, name) -> (ino, type) lives on the MP the volume's slot
// table and exception table route (parent, name) to (FalconFS hybrid
// indexing), which is in general not the home of parent nor of ino. A
// directory's children are therefore spread over every MP, and the state
// machine only checks what it can see: name syntax, existence, the parent's
// fence, and, when the parent or the target inode is local, that it
// exists, has links and has the right type.
//
// # Routing
//
// The partition keeps a replicated copy of the volume's dentry routing
// (SetRouting: its own id, the current routing and, while a routing change
// is in progress, the previous one, possibly sealed; docs/routing.md) and
// answers every dentry access by the decision table there: a name it does
// not own is EWRONGMP (the caller's map is stale), a name being moved is
// EMOVING (retry shortly). CreateDentry, DeleteDentry and ReplaceDentry
// check it (the whole Txn fails, nothing applied), as do Lookup and
// ReadDir (which lists names by the previous routing while a change is in
// progress, by the current one otherwise, and skips the rest; so do
// CountChildren and HasChildren). A partition that never got a routing
// accepts every name. Inode operations are routed by inode range and not
// checked. ImportDentries and PurgeDentries are the migration's own
// operations, and Scan (ScanInodes, ScanDentries with notOwned) lists what
// a migration must copy and later purge. RoutingState gives the version
// and whether a change is in progress, for every read answer.
//
// # Chunked files and the chunk index
//
// A regular file created with FILE_LAYOUT_CDC (VarFS) has a chunk list
// instead of extents: its data is the concatenation of the chunks, each
// named by a chunker.Fingerprint and stored once per volume. SpliceChunks
// replaces a range of the list against the layout generation the writer
// read (ESTALE if another writer committed first); every chunk a layout
// gives up (splice, truncate, Evict) becomes a chunk drop on the free list.
//
// Independently, a partition holds a shard of the volume's chunk index:
// entries by fingerprint with the chunk's location, a reference count, a
// dead flag and the apply time of their last change, and per source
// partition the highest drop_seq applied (the watermark that makes a
// retried drop a no-op). ChunkRefs takes and gives back references,
// ChunkCollect marks unreferenced entries dead after a grace, ChunkForget
// deletes them once their bytes are freed, ChunkFix corrects counts from a
// recount. Which fingerprints a partition holds is the caller's business
// (clustermap.ChunkShard); docs/design.md "The chunk index" has the
// reference rules and what a crash can leave.
//
// Records live in tidwall/btree B-trees, inodes by number, dentries by
// (parent, name) and chunk index entries by fingerprint, in compact structs
// rather than protobuf messages: 112 bytes per inode with one inline
// extent (a chunked file's list lives behind it, 64 bytes per chunk), 40
// bytes per dentry plus its name, plus a 16-byte name-count slot, 88 bytes
// per chunk index entry. BenchmarkMemoryPerFile measures
// about 256 bytes per file (inode, dentry, one extent) at a million files,
// 266 after a snapshot round trip. Protobuf messages appear only at the
// boundary: Apply decodes a metapb.Batch, queries return metapb.Inode and
// metapb.Dentry.
//
// # Operations and atomicity
//
// One raft entry is a metapb.Batch: the Txns of concurrent requests merged
// into one proposal (FalconFS §4.4). Txns apply in order and independently;
// each returns a TxnResult with a Linux errno. A Txn's ops apply atomically:
// they read and write an overlay, and only when every op has succeeded is
// the overlay committed; a failing op drops it, so nothing of the Txn
// remains, not the allocated inode number, not a time, not a TouchDir id,
// not a routing change.
// An inode-number field that is 0 (ino, parent) means the inode made by the
// Txn's first CreateInode, so that create is one Txn:
//
//	create: [CreateInode{REGULAR}, CreateDentry{parent, name, ino: 0}]
//	mkdir:  [CreateInode{DIRECTORY}, CreateDentry{...}, TouchDir{parent, +1}]
//
// (the TouchDir only if parent's home is this MP, else a second Txn there).
//
// Per op (errno when it fails):
//
//   - CreateInode: type must be valid (EINVAL); mode keeps permission bits
//     only; a symlink needs a target of 1..4096 bytes without NUL (ENOENT,
//     ENAMETOOLONG, EINVAL) and other types none; rdev only for devices
//     (EINVAL); layout CDC only for regular files, an unknown layout value:
//     EINVAL. nlink is 2 for a directory, else 1; a/m/c/btime = now.
//     Range exhausted: ENOSPC.
//   - CreateDentry: name 1..255 bytes, not "." or "..", no '/' or NUL
//     (ENAMETOOLONG, EINVAL); parent fenced: ENOENT; parent homed here but
//     missing or unlinked: ENOENT, not a directory: ENOTDIR; name exists:
//     EEXIST; target homed here but missing or without links: ENOENT; type
//     differs from the local target's: EINVAL; a dentry pointing at its
//     parent: EINVAL.
//   - DeleteDentry: missing: ENOENT; expect_ino set and different: ESTALE;
//     expect_type DIRECTORY on a non-directory: ENOTDIR; any other
//     expect_type on a directory: EISDIR (non-directory types are not told
//     apart: unlink(2) removes them all alike).
//   - ReplaceDentry: as DeleteDentry for the old entry, and rename(2)'s
//     type rule: a directory replaces only a directory (ENOTDIR), a
//     non-directory only a non-directory (EISDIR). The result carries the
//     replaced dentry.
//   - Setattr: the inode must be local (ENOENT); unknown valid bits: EINVAL.
//     SIZE on a directory: EISDIR, on other non-regular files: EINVAL,
//     beyond 2^63-1: EFBIG; it cuts extents beyond the size (the cut parts
//     go to the free list) and sets mtime. On a chunked file it drops the
//     chunks that start at or beyond the size (chunk drops on the free
//     list), keeps a chunk that straddles it whole (its bytes past the size
//     are invisible), and a truncate up only raises the size (zeros past the
//     chunks); layout_gen++ whenever the chunk list or the size changes.
//     *_NOW wins over the explicit time. Any change sets ctime = now, then
//     CTIME overrides it.
//   - Link: nlink += delta, EINVAL below 0 or above 2^32-1; ctime = now.
//     Any inode at nlink 0 is an orphan (see Orphans) and stays readable
//     until Evict; going back above 0 (linkat of an open unlinked file)
//     takes it off the orphan list.
//   - TouchDir: directory only (ENOTDIR); mtime = ctime = now and nlink +=
//     nlink_delta. A non-zero op_id is remembered with the inode in a FIFO
//     of the last 4096 (part of the replicated state and of snapshots): a
//     repeated (ino, op_id) succeeds without changing anything. op_id 0 is
//     never deduplicated.
//   - Evict: requires nlink == 0, else EBUSY (the inode is still named);
//     removes the inode and puts its extents on the free list, and each
//     entry of a chunked file's list as a chunk drop.
//   - SetXattr / RemoveXattr: name 1..255 bytes, else ERANGE (as
//     setxattr(2)); value up to 64 KiB, else E2BIG; XATTR_CREATE on an
//     existing name: EEXIST; XATTR_REPLACE or RemoveXattr of a missing one:
//     ENODATA; both flags or unknown flags: EINVAL; more than 1 MiB of
//     xattrs on one inode: ENOSPC. ctime = now.
//   - AppendExtents: regular files of the extent layout (EISDIR, EINVAL
//     otherwise, also for a chunked file); keys must
//     be non-empty and end by 2^63-1 (EINVAL, EFBIG); at most 4096 keys
//     (E2BIG) and 65536 extents per inode after merging (EFBIG). Keys are
//     written in order over the map, cutting older keys (later writes
//     win); contiguous keys of one extent merge. size = max(size, given
//     size, end of the new keys), so no extent lies beyond size and a later
//     truncate up reads zeros. mtime = ctime = now. Cut-away physical
//     ranges go to the free list, except those the write points at again.
//   - Fence{parent, token}: token 0: EINVAL; held with another token:
//     EBUSY; more than 65536 fences: EAGAIN; the same token again is a
//     no-op. With require_empty, a name under parent on this MP (after
//     the Txn's earlier ops): ENOTEMPTY. Unfence with another token: EINVAL; of an unfenced parent: a
//     no-op (retries).
//   - AckFreed{upto_seq}: drops the free-list entries (extent ranges and
//     chunk drops alike) with Seq <= upto_seq (at commit, after the Txn's
//     own frees); upto_seq beyond the last Seq given out: EINVAL;
//     acknowledging again is a no-op. Seqs start at 1 (a chunk drop's Seq
//     is its drop_seq, where 0 means no drop).
//   - SpliceChunks{ino, base_gen, start, end, chunks, mtime_ns}: the inode
//     must be local (ENOENT); more than MaxChunksPerOp chunks: E2BIG; not a
//     chunked file: EINVAL; layout_gen != base_gen: ESTALE; start > end or
//     end beyond the list: EINVAL; a chunk with a fingerprint that is not
//     chunker.FingerprintSize bytes or has algorithm 0, size 0, partition
//     0 or an extent offset + size that overflows: EINVAL; more than
//     MaxChunksPerInode chunks after the splice: EFBIG. chunks[start:end)
//     go to the free list as chunk drops, in order; size = the sum of all
//     chunk sizes, layout_gen++, mtime = mtime_ns (0: now), ctime = now.
//     An empty splice is allowed and still moves layout_gen.
//   - ChunkRefs{items, source_partition}: more than MaxChunksPerOp items:
//     E2BIG; a bad fingerprint, delta 0, drop_seq with delta > 0 or without
//     source_partition, or a registration (delta > 0 with a partition) of
//     size 0 or overflowing its extent: EINVAL (nothing applied). Items
//     apply in order: a drop (drop_seq > 0) at or below the source's
//     watermark is skipped, otherwise it raises the watermark and applies;
//     delta < 0 lowers a live entry's count, never below 0 (missing and
//     dead entries are left alone); delta > 0 adds to a live entry (EINVAL
//     if the item's size is given and differs, or past MaxChunkRefs), makes
//     a missing or dead one live at the item's location with delta
//     references if a location is given, and otherwise (a lookup) changes
//     nothing. mtime_ns = now whenever refs or state change. Results: one
//     ChunkRecord per item, the live entry after the item, or just the
//     fingerprint with partition 0 (a dead entry is answered as missing).
//     A drop from a new source when MaxChunkSources watermarks exist:
//     ENOSPC.
//   - ChunkCollect{fingerprints, older_than_ns}: more than MaxChunksPerOp:
//     E2BIG, a bad fingerprint: EINVAL. Marks dead (mtime = now) each live
//     entry with refs 0 and mtime <= older_than_ns; results: the entries
//     marked.
//   - ChunkForget{chunks}: E2BIG, EINVAL as ChunkCollect. Deletes each
//     entry that is dead at exactly the chunk's partition, extent, offset
//     and size; results: the entries deleted (a choice of this package; the
//     proto names none).
//   - ChunkFix{entries}: E2BIG, EINVAL as ChunkCollect, refs past
//     MaxChunkRefs: EINVAL. Sets refs (mtime = now) of each live entry whose
//     mtime still is the entry's mtime_ns and whose refs differ; results:
//     the entries changed.
//   - SetRange{end}: only cuts: 0 (reopen), below the start, below
//     MaxIno(), or above the current end: EINVAL.
//   - CreateDentry, DeleteDentry, ReplaceDentry under a routing that does
//     not let this partition change the name: EWRONGMP or EMOVING (checked
//     after the name's syntax, before anything else).
//   - SetRouting{self, current, previous, sealed}: self 0, a routing
//     without slots, with a slot owner 0, an exception kind other than
//     path-walk (1) or override (2), an override to an MP that owns no
//     slot, a repeated or invalid exception name, version 0, a previous
//     routing not older than current, sealed without previous, another
//     self than the one in place, or a current routing of the version in
//     place but with other contents: EINVAL. An older current version is a
//     no-op, and so is the same version unless it moves forward: (previous)
//     -> (previous, sealed) -> (no previous). A newer version replaces the
//     state.
//   - ImportDentries: puts dentries that move to this partition in a
//     routing change in progress (owned under current, not under previous;
//     otherwise, or with no change in progress, ESTALE; a partition without
//     routing takes any) (same contents: no change; other contents:
//     overwritten); parent or ino 0,
//     ino == parent, a bad name or type: EINVAL; more than
//     MaxDentriesPerOp: E2BIG. Inodes and their nlink are not touched: they
//     stay at their home.
//   - PurgeDentries: deletes each named dentry only if the partition has a
//     routing, no previous one, and does not own the name under it; other
//     keys (and missing dentries) are skipped, so a repeat is a no-op.
//     Parent 0 or a bad name: EINVAL; more than MaxDentriesPerOp: E2BIG.
//
// Every inode keeps a parent pointer (Inode.parent): CreateInode{parent}
// sets it and Setattr SETATTR_PARENT moves it on rename (EINVAL for 0 or
// the inode itself). A directory's is its one parent; a file's is the
// directory of the name it was created or last renamed under (a hard link
// elsewhere does not move it). The partition cannot check it; clients walk
// a directory's up to refuse moving it into its own subtree, and meta nodes
// walk any inode's up to keep a path-restricted client inside its subtree
// (pkg/capability).
//
// Exactly-once: a Txn with a non-zero request_id that succeeds is
// remembered with its result in a FIFO of the last RequestHistory (16384)
// ids holding at most RequestHistoryBytes (32 MiB) of results, part of the
// replicated state and of snapshots; a Txn carrying a remembered id
// returns the remembered result and applies nothing. A failed Txn is not
// remembered (it changed nothing, so applying a retry is safe), nor is one
// whose result alone exceeds the byte bound. A retry of a step forgotten
// meanwhile applies again: for ChunkRefs that leaks references, never
// loses one. Clients use one random id per logical step and reuse it on every
// retry of that step.
//
// A Txn holds at most 1024 ops (E2BIG); an op with nothing set (or one
// from a newer protocol) is EINVAL. Results of mutating ops carry the
// inode's attributes, layout and layout_gen but not its extents, chunks or
// xattrs (read those with GetInode / ListXattr, or ScanInodes with
// extents), so that an append does not copy the whole extent map into its
// reply.
//
// # Determinism and snapshots
//
// Apply depends only on the state and the entry: times come from
// Batch.now_ns, iteration is over B-trees in key order, and the free list is
// numbered by a replicated counter. [Partition.Clone] freezes the state in
// O(1) by copy-on-write B-tree copies (records are immutable once stored:
// a change builds a new record), so [Frozen.WriteTo] can serialize in
// another goroutine while Apply continues. The format is a versioned
// header, records in key order and a CRC-32C trailer: equal states give
// equal bytes (the routing's exceptions are kept sorted by name). Restore
// checks the checksum, the framing and every invariant Apply maintains
// (the routing is validated as SetRouting does) before it replaces
// anything, and rebuilds the derived indexes (orphans, name counts, the
// memory estimate of Stats, the chunk index's collection candidates, dead
// set and sums). Version 3 added the routing, version 4 chunked inodes,
// chunk drops, the chunk index and the drop watermarks; versions 1 to 3
// are still read.
//
// # What the meta node service must do
//
// The state machine enforces only what one partition can see. The service
// (and the coordinator; for now the SDK, pkg/client, orchestrates 2–5, see
// docs/design.md "Client metadata") must:
//
//  1. Route: send each dentry op to the MP that owns (parent, name) by the
//     current slot and exception tables, and each inode op to the inode's
//     home by range. The partition refuses a dentry op its routing gives
//     to another MP (EWRONGMP) or that is moving (EMOVING); the caller
//     re-reads the map or backs off and retries (docs/routing.md).
//  2. Order cross-partition steps so that a crash leaves only orphans,
//     never a dangling name (CFS §2.6): create = inode first, then dentry
//     (on dentry failure, Link -1 and Evict the new inode); link = Link +1
//     on the home, then CreateDentry (Link -1 on failure); unlink =
//     DeleteDentry with expect_ino, then Link -1 on the home (then Evict
//     when no client holds the file open); rename over a target =
//     ReplaceDentry with expect_ino, then Link -1 of the replaced inode.
//     When both records are on one MP, put the steps in one Txn.
//  3. Keep directory attributes: TouchDir the parent's home after every
//     dentry change under it (nlink ±1 for subdirectories), with a unique
//     op_id reused by retries.
//  4. rmdir: Fence the directory on every MP, sum CountChildren (ENOTEMPTY
//     if any), then DeleteDentry (expect_type DIRECTORY) on the name's MP,
//     Link -2 and Evict on the directory's home, TouchDir -1 the parent,
//     and Unfence everywhere (also on failure). When the name's MP is the
//     directory's home, its fence may instead be the first op of the
//     deleting Txn, with require_empty. Fences left by a crashed
//     coordinator lapse FenceTTL after they were set (Raft apply time).
//  5. Check what needs the whole namespace: existence and type (ENOTDIR)
//     of a parent homed on another MP, permissions, a directory moved into its own subtree,
//     RENAME_NOREPLACE / RENAME_EXCHANGE, ENOTEMPTY for a directory
//     replaced by rename, setuid/setgid clearing on chown and write, xattr
//     namespaces (EOPNOTSUPP).
//  6. Reclaim: a sweeper evicts orphans no client has open, and a collector
//     punches the free list's extent ranges on the data nodes, sends its
//     chunk drops as ChunkRefs{delta -1, drop_seq: Seq, source_partition:
//     self} to their shards, and then takes them off the list with
//     AckFreed{upto_seq}. On the index side it lists CollectCandidates
//     older than a grace, marks them dead with ChunkCollect, frees the dead
//     entries' bytes (DeadChunks) on the data nodes and deletes them with
//     ChunkForget.
//  7. Serialize queries with Apply and Restore (see Partition), take the
//     Clone under that serialization and run WriteTo outside it.
//  8. Stamp Batch.now_ns on the leader, and keep it monotonic across
//     leaders if times must never go backwards.
package metapartition
