// Package multiraft hosts many raft groups in one process: the master's one
// group today, hundreds of meta and data partition groups per node later.
//
// The consensus algorithm is go.etcd.io/raft/v3's RawNode, used as the pure
// state machine it is; this package is the host around it: one processing
// loop, one transport, one Pebble DB, shared by every group on the node.
//
// # Processing round
//
// All raft work happens in rounds (Host.processRound), run by one goroutine
// when a tick is due, a batch arrives or a call (Propose, ReadIndex, ...) adds
// work. A round:
//
//  1. steps every queued inbound batch into its groups;
//  2. on a tick, ticks every active group, decides quiescence and checks peer
//     liveness;
//  3. takes every group's Ready and stages the log entries, hard states and
//     received snapshots of all groups in ONE Pebble batch;
//  4. sends what may leave before the batch is durable (see Early sends),
//     then commits that batch in the background, with Sync if any group
//     needs durability. One fsync per round whatever the number of groups:
//     group commit;
//  5. meanwhile applies committed entries to the state machines (they are
//     durable on a quorum already; raft lets applying run in parallel with
//     persisting) and answers their proposers; the state lock is then
//     released until the batch is written, so proposals keep arriving for
//     the next round;
//  6. sends the round's remaining messages (append and vote responses), one
//     Batch per peer host;
//  7. advances the RawNodes, settles waiting calls and takes snapshots that
//     are due.
//
// Because every acknowledgement leaves only once what it acknowledges is
// durable, and raft is advanced only then, the ordering raft requires of
// Ready handling holds for every group at once. Tests drive rounds by hand
// over an in-memory
// network with seeded faults; Start runs them off a ticker.
//
// # Transport, batching and coalesced heartbeats
//
// A host sends one Batch per peer host per round: all raft messages of all
// groups to that peer. Heartbeats and heartbeat responses without a context
// (all but ReadIndex's) travel in compact form (Heartbeat: group, term,
// commit, flags) and are expanded back into raft messages on receipt. On every
// tick a host sends each peer one batch, empty if it has nothing else: the
// node-level liveness beat. GRPCTransport carries batches over one gRPC client
// stream per peer (transportpb); Transport is an interface so tests use an
// in-memory network.
//
// # Quiescence
//
// As in CockroachDB, an idle group stops ticking. A leader quiesces its group
// when, for QuiesceAfterTicks consecutive ticks, it has no pending proposal,
// read or Ready, every entry is committed and applied, every follower's Match
// equals the last index (in StateReplicate), no leadership transfer or joint
// configuration is under way, and every follower's host is alive. It then
// sends each follower one last heartbeat marked Quiesce, carrying its last
// index and term, and stops ticking. A follower receiving it quiesces too if,
// after applying the heartbeat's commit index, its leader, term, last index
// and term, commit and applied index match; otherwise it keeps ticking (and
// its eventual pre-vote wakes the leader).
//
// A quiesced replica wakes up (ticks again) on a proposal, a read, a campaign
// or a leadership transfer on it, on any inbound raft message of its group
// other than a heartbeat response or a quiesce heartbeat, and when it emits
// any message other than a heartbeat response.
//
// Liveness rule: a peer host that sends nothing, not even its beat, for
// ElectionTicks ticks is dead. Its death wakes every quiesced group it is a
// member of, and every group it led forgets it as leader (raft ForgetLeader:
// followers then grant pre-votes at once), so a new leader is elected without
// waiting out a lease. A peer whose batches carry a new incarnation number has
// restarted, which is handled the same way, at once. A leader does not
// quiesce while a follower's host is dead.
//
// Net effect: an idle node pair exchanges one message per direction per tick,
// whatever the number of groups (BenchmarkHeartbeatsPerPair). Quiesced
// replicas keep their raft clocks frozen (no TickQuiesced): with PreVote and
// CheckQuorum, a stray replica that wakes and campaigns is refused by the
// others' fresh leases and wakes its leader instead of deposing it.
//
// # Storage
//
// Every group's raft state lives in the node's Pebble DB under KeyPrefix
// (see storage.go for the key layout): entries, hard state, and the latest
// snapshot (its data and its metadata: index, term, ConfState), which is also
// the truncation state, since the log always starts right after it. The DB is
// shared: other code may use other prefixes. Raft reads back nearly every
// entry it writes (to apply it once committed, to send it to a follower), so
// each group keeps its newest durable entries in memory (entrycache.go, 1 MiB
// per group) and reads Pebble only for older ones.
//
// # Snapshots and truncation
//
// After SnapshotEntries entries applied since its last snapshot, a group's
// state machine is snapshotted at its applied index; the snapshot is stored
// and the entries it covers deleted, in one batch. Raft's Storage.Snapshot
// returns that stored snapshot to catch a lagging follower up: every entry
// after it is still in the log, and sending it needs no state-machine call
// from inside raft. When the stored snapshot predates a membership change (a
// replica added since would not be in its ConfState, and raft would refuse it)
// the host takes a fresh one at the end of the round instead. A follower that
// receives a snapshot stores it, drops its whole log and restores its state
// machine from it.
//
// # Restart
//
// State machines are purely in memory; persistence for users of the host is
// the raft log. AddGroup on a group present in the DB restores the state
// machine from the stored snapshot and starts raft with Applied set to the
// snapshot's index, so raft hands every committed entry after it to Apply
// again, conf changes included (they are re-applied to raft's configuration
// from the snapshot's ConfState, which is why the latest ConfState lives in
// the snapshot metadata and the log rather than in a separate key). Because
// entries are durable before they are acknowledged or applied, and the
// snapshot batch is atomic, this is exact after kill -9; TestCrashRestart
// checks it against Pebble's crash-cloned filesystem.
//
// # Proposals
//
// Every proposed entry starts with a 16-byte header (proposer node, proposal
// id; ids start at a random value per process, so ids from before a restart
// never match), stripped before Apply. The proposer waits on its id. Propose
// fails fast on a follower (ErrNotLeader names the leader); if leadership or
// the term changes before the entry applies, the caller gets
// ErrLeadershipLost: the outcome is unknown and retries must be idempotent.
// ReadIndex gives a linearizable read barrier: from the leader's read lease
// when it holds one, else through raft's ReadIndex.
//
// # Read leases
//
// Leaders stamp their heartbeats with their monotonic clock; followers echo
// the stamp in their responses. While a quorum has acknowledged a heartbeat
// of the current term stamped less than (ElectionTicks-2) ticks (less 10%)
// ago, no other leader can have been elected: a follower that accepted such
// a heartbeat grants no vote for ElectionTicks of its ticks, whether its
// replica ticks (raft's CheckQuorum lease), is quiesced (the host liveness
// rule), or its host restarted (hosts refuse votes for their first
// ElectionTicks ticks). A leader that started a leadership transfer trusts no
// lease for the rest of the term. See lease.go and docs/design.md.
//
// # Early sends
//
// A round sends every message that does not acknowledge durable state
// (everything but append and vote responses) before committing its batch, so
// a leader's appends travel while its own fsync runs.
package multiraft
