// Package datanode is the data node role (`cairn data`): it hosts the data
// partitions the cluster map assigns to its node, one extentstore per
// partition replica in <data dir>/dp-<id>, and serves them over the
// data-path protocol (dataproto) on the node's data listener.
//
// # Appends: chain replication (CFS §2.2.5)
//
// A partition's write chain is its replicas that are not down, in the
// map's order (pkg/replicaset); its first member, never a stale replica, is
// the primary, and the chain takes writes only while it holds the write
// quorum (2 of 3; otherwise writes get CodeDegraded). A client
// creates an extent on the primary (OpCreateExtent: the primary picks a
// fresh id and passes the creation down the chain) and streams packets to
// it (OpAppend). Every replica, on the connection's reader goroutine and so
// in arrival order: checks the packet's CRC (the client's, carried end to
// end), appends it at the offset it names (which must be the extent's size
// here, else CodeOffsetMismatch), and forwards it to the next replica on a
// connection of its own for this upstream connection (so the packets of a
// stream stay in order down the chain). Then, off the reader, it waits for
// its own group commit (extentstore Sync, shared by every packet appended
// before it) and for the next replica's answer, and answers upstream. So
// the primary answers a packet at [off, off+n) with Arg = off+n only when
// every replica holds [0, off+n) durably: the offset all replicas hold. A
// replica that fails, refuses or does not answer within the chain timeout
// fails the packet with CodeReplicaFailed (CodeStaleEpoch is passed back as
// is); the client then writes the unacknowledged bytes to a new extent on
// another partition. Bytes some replicas hold past the acknowledged offset
// are never referenced and never read: no rollback.
//
// Small files (OpWriteSmall) are appended by the primary to a small extent
// it leases (extentstore.LeaseSmall) at the extent's end, and forwarded as
// an ordinary append with FlagCreate (the replicas create the small extent
// if needed). The lease is held until the chain answered; if it failed, the
// extent is retired (its replicas may now disagree on its size). A primary
// leases only extents it created while primary (the store's pool is sealed
// when this replica stops being primary, and starts empty), under ids above
// its epoch's floor (idFloor): appending where a former primary appended,
// or under an id it used, could give replicas different bytes at offsets
// one of them acknowledged, which alignment by size does not repair.
//
// Content-addressed chunks (OpWriteChunk) are stored the same way, after
// every replica, before storing or forwarding, has checked that the bytes
// hash to the fingerprint at the start of the payload (CodeFingerprintMismatch
// otherwise, nothing stored). A chunk larger than the small-file threshold
// is appended in pieces under one lease. Chunks are read with OpRead and
// freed with OpFree (a punched range) like small files; see chunk.go.
//
// # Overwrites: Raft (CFS §2.2.4)
//
// Each partition is a Raft group on the node's multi-raft host, with the
// replicas as voters. OpOverwrite goes to the leader (a follower answers
// CodeNotLeader naming it), which proposes the bytes; every replica applies
// them in log order with extentstore.Overwrite, durable on return and
// idempotent (see overwrite.go for the state machine, whose snapshot holds
// no extent data). The entries committed in one Raft round are applied
// together (multiraft.BatchApplier, extentstore.OverwriteBatch): one
// journal write and fsync for all of them instead of one each. The primary campaigns when it opens a partition and a
// leader that is not the primary hands leadership to it, so that appends,
// overwrites and reads meet the same replica first.
//
// # Reads
//
// Any replica serves OpRead for a range it holds: the client names the
// extent's committed size it knows from metadata; a range past it is
// refused (CodeOutOfRange), a range past the replica's own size, or of an
// extent awaiting repair, or before Raft has re-applied the overwrites
// committed before the partition was opened, is refused with CodeNotHeld
// and the client asks the next replica. Bytes go out with sendfile(2) from
// a verified extentstore.Section.
//
// # Catch-up, repair, deletion
//
// A follower aligns with the primary (only ever with it: followers delete
// what it lacks) when it opens a partition, every AlignInterval (2s while
// it is stale, until a pass finds nothing to do against a primary that
// listed at the follower's epoch or later, which it reports to the master
// in PartitionReport.in_sync_epoch) and when an append shows it is
// behind: it lists the
// primary's extents, creates those it lacks, appends the committed bytes it
// lacks (copied from the primary) and deletes those the primary freed;
// extents a stream is writing, and lags shorter than AlignQuietPeriod, are
// left to the chain (see align.go). An
// extent that may miss overwrites (an overwrite this replica could not
// apply, a Raft snapshot installed from the leader, a store reopened or
// rebuilt) is marked stale: reads of it are refused here until a full
// alignment has compared every block's CRC with a peer and overwritten the
// differing blocks. A background scrubber (paced) and reads that hit a bad
// block repair it from a peer (extentstore.RepairBlock); a failed store is
// reopened; one with damaged metadata is moved aside and rebuilt from
// peers. OpFree (the deletion collector) deletes large extents and punches
// small files along the chain; PartitionReport.used_bytes reports the
// space the store occupies, so freed space shows.
//
// Every goroutine is owned: per connection by the dataproto server and the
// session (which waits for its request goroutines), per partition by the
// partition's maintenance loop, stopped by Close.
package datanode
