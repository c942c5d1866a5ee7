package multiraft

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// NodeID identifies a host (a process running one Host). Inside every group the
// host's replica has the raft id NodeID, so a node holds at most one replica of
// a group. 0 is not a valid id.
type NodeID uint64

// GroupID identifies a raft group. Every replica of a group uses the same id.
type GroupID uint64

// StateMachine is the state a group replicates. The host calls it from its
// processing goroutine, one call at a time per group, in log order (and, once,
// from AddGroup's caller before the group runs: Restore when reopening,
// Snapshot when bootstrapping). Callers reading the state from other
// goroutines must synchronize with Apply and Restore themselves.
//
// The state machine is purely in memory: after a restart the host rebuilds it
// by calling Restore with the group's stored snapshot and then Apply for every
// committed entry after the snapshot. Apply must therefore be deterministic
// (same state and entry, same result and new state on every replica and on
// every replay).
type StateMachine interface {
	// Apply applies the payload of one committed entry (as given to Propose,
	// without the host's header). index is the entry's raft index; it grows
	// by at least one from call to call. Entries without a payload (raft's
	// empty entries and conf changes) are not passed. The result and error go
	// back to the proposer; an error does not stop the group: it is the
	// command's outcome, and must be the same on every replica.
	Apply(index uint64, data []byte) (result any, err error)
	// Snapshot returns the state as of the last applied index. The host keeps
	// the bytes and may hand them to Restore on this or another replica.
	Snapshot() ([]byte, error)
	// Restore replaces the whole state with one returned by Snapshot. An error
	// stops the group on this host (see GroupStatus.Err).
	Restore(data []byte) error
}

// BatchApplier is a StateMachine that applies the committed entries of one
// processing round together, so that their cost can be shared (one fsync
// for all of them). The host calls ApplyBatch instead of Apply for each run
// of consecutive normal entries; it must have exactly the effect of Apply
// called on each in order, and return one result and one error per entry
// (len(entries) of each), which go back to the proposers as Apply's would.
type BatchApplier interface {
	StateMachine
	ApplyBatch(entries []Entry) (results []any, errs []error)
}

// Entry is a committed entry for BatchApplier: its raft index and payload
// (as given to Propose, without the host's header).
type Entry struct {
	Index uint64
	Data  []byte
}

// Transport carries batches between hosts. Send must not block the caller for
// long: queue, and drop when the queue is full (raft retransmits). Send must
// not call back into the Host except through Deliver. The transport owns b
// after Send.
type Transport interface {
	Send(b *Batch)
}

// Config configures a Host. Zero values take the documented defaults.
type Config struct {
	// NodeID is this host's id; it must be non-zero.
	NodeID NodeID
	// DB holds every group's raft state under KeyPrefix. The caller owns it
	// and closes it after Stop.
	DB *pebble.DB
	// Transport sends this host's batches to peers.
	Transport Transport
	// TickInterval is the length of one raft tick; default 100ms.
	TickInterval time.Duration
	// ElectionTicks is raft's election timeout in ticks (default 10) and also
	// how many ticks without any batch from a peer host mark it dead.
	ElectionTicks int
	// HeartbeatTicks is raft's heartbeat interval in ticks; default 1.
	HeartbeatTicks int
	// SnapshotEntries is how many entries a group applies after its last
	// snapshot before the host snapshots its state machine and truncates the
	// log; default 10000.
	SnapshotEntries uint64
	// QuiesceAfterTicks is how many consecutive ticks a leader's group must
	// be idle and fully replicated before it quiesces; default
	// ElectionTicks/2 (at least 2).
	QuiesceAfterTicks int
	// DisableQuiescence keeps every group ticking and heartbeating.
	DisableQuiescence bool
	// MaxSizePerMsg bounds the entry bytes of one append message; default 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight per follower;
	// default 256.
	MaxInflightMsgs int
	// MaxUncommittedBytes bounds the proposed but uncommitted entry bytes per
	// group; beyond it proposals fail with ErrProposalDropped. Default 64 MiB.
	MaxUncommittedBytes uint64
	// InboxBatches bounds the inbound batches queued between rounds; beyond
	// it Deliver drops batches. Default 4096.
	InboxBatches int
	// Logger receives the host's logs and raft's (raft's info goes to Debug);
	// default slog.Default().
	Logger *slog.Logger
	// Now is the clock of read leases (default time.Now). Leases assume
	// that clocks of different hosts run at rates within 10% of each other
	// and that Now and the ticker measure the same time; tests that drive
	// rounds by hand set it to a clock they advance with the ticks.
	Now func() time.Time
	// DisableLeaseReads makes every ReadIndex a round of heartbeats.
	DisableLeaseReads bool
	// CommitNoticeDelay is how long a leader may hold an append that
	// carries no entries, only a new commit index, in case an append with
	// entries to the same follower replaces it (notice.go); 0 sends it at
	// once. Followers of a group that goes idle apply its last entries up
	// to this much later.
	CommitNoticeDelay time.Duration
}

func (c *Config) setDefaults() error {
	if c.NodeID == 0 {
		return errors.New("multiraft: Config.NodeID must be non-zero")
	}
	if c.DB == nil {
		return errors.New("multiraft: Config.DB is required")
	}
	if c.Transport == nil {
		return errors.New("multiraft: Config.Transport is required")
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.ElectionTicks <= c.HeartbeatTicks {
		return fmt.Errorf("multiraft: ElectionTicks (%d) must exceed HeartbeatTicks (%d)", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	if c.QuiesceAfterTicks <= 0 {
		c.QuiesceAfterTicks = max(2, c.ElectionTicks/2)
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxInflightMsgs <= 0 {
		c.MaxInflightMsgs = 256
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.InboxBatches <= 0 {
		c.InboxBatches = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// GroupOptions are per-group settings for AddGroup.
type GroupOptions struct {
	// OnLeaderChange, if set, is called when this replica learns of a new
	// leader or term. It runs on the host's notifier goroutine, never on the
	// processing loop, in order per group; when changes come faster than it
	// returns, intermediate ones are skipped and only the latest is reported.
	// It may call any Host method but Stop, and must return: Stop waits for
	// the notifier.
	OnLeaderChange func(LeaderInfo)
}

// LeaderInfo is a group's leadership as seen by this replica.
type LeaderInfo struct {
	Group GroupID
	// Leader is 0 when no leader is known.
	Leader   NodeID
	Term     uint64
	IsLeader bool
}

// GroupStatus is a snapshot of one replica's state.
type GroupStatus struct {
	Group GroupID
	// Leader is the known leader, 0 if none.
	Leader   NodeID
	Term     uint64
	IsLeader bool
	// Commit is the highest index known committed; Applied the highest
	// applied to the state machine.
	Commit, Applied uint64
	// FirstIndex and LastIndex bound the persisted log; SnapshotIndex is the
	// stored snapshot's index (FirstIndex-1).
	FirstIndex, LastIndex, SnapshotIndex uint64
	// Quiesced reports that the replica does not tick.
	Quiesced bool
	// Voters and Learners are the latest applied configuration (the incoming
	// one while a joint change is in progress), sorted.
	Voters, Learners []NodeID
	// VotersOutgoing is, while a joint change is in progress, the outgoing
	// configuration's voters, sorted (empty otherwise): a decision then
	// needs a majority of Voters and one of VotersOutgoing.
	VotersOutgoing []NodeID
	// Match is, on the leader only, the highest log index known to be
	// replicated to each voter and learner (raft's progress): a learner whose
	// Match reached Commit has caught up.
	Match map[NodeID]uint64
	// Active is, on the leader only, whether each member was heard from
	// within the last election timeout (raft's check-quorum activity).
	Active map[NodeID]bool
	// Err is set when the replica stopped working on this host (its state
	// machine failed to restore, or raft hit an invariant violation); the
	// group must be removed and re-added.
	Err error
}

// Members returns, as plain ids, every node whose vote counts (the voters
// of the incoming and, while a joint change is in progress, the outgoing
// configuration; sorted) and the learners.
func (s GroupStatus) Members() (voters, learners []uint64) {
	for _, v := range s.Voters {
		voters = append(voters, uint64(v))
	}
	for _, v := range s.VotersOutgoing {
		if !slices.Contains(s.Voters, v) {
			voters = append(voters, uint64(v))
		}
	}
	slices.Sort(voters)
	for _, v := range s.Learners {
		learners = append(learners, uint64(v))
	}
	return voters, learners
}

// Votes reports whether n's vote counts in the group: a voter of the
// incoming or of the outgoing configuration.
func (s GroupStatus) Votes(n NodeID) bool {
	return slices.Contains(s.Voters, n) || slices.Contains(s.VotersOutgoing, n)
}

// HostStats are cumulative counters of a host since NewHost, plus gauges.
type HostStats struct {
	// Rounds and Ticks count processing rounds and the rounds that ticked.
	Rounds, Ticks uint64
	// Commits counts pebble batches written for rounds; SyncCommits those
	// written with Sync (one per round with anything raft needs durable,
	// whatever the number of groups in it).
	Commits, SyncCommits uint64
	// BatchesSent counts transport messages sent, in total and per peer.
	BatchesSent        uint64
	BatchesSentPerPeer map[NodeID]uint64
	// EmptyBatchesSent counts batches that carried nothing but the beat.
	EmptyBatchesSent uint64
	// MessagesSent counts raft messages sent in full form; HeartbeatsSent the
	// coalesced heartbeats and heartbeat responses; QuiesceHeartbeatsSent
	// the heartbeats among them that quiesced a follower.
	MessagesSent, HeartbeatsSent, QuiesceHeartbeatsSent uint64
	// BatchesReceived, MessagesReceived and HeartbeatsReceived count inbound
	// traffic that was processed.
	BatchesReceived, MessagesReceived, HeartbeatsReceived uint64
	// DroppedInboxFull counts batches Deliver dropped for lack of queue room;
	// DroppedUnknownGroup messages and heartbeats for groups not on this host;
	// DroppedMalformed batches, messages and heartbeats that failed validation;
	// DroppedStale heartbeats older than the replica they reached (Host.staleHeartbeat).
	DroppedInboxFull, DroppedUnknownGroup, DroppedMalformed, DroppedStale uint64
	// Quiesces and Unquiesces count transitions of this host's replicas.
	Quiesces, Unquiesces uint64
	// EntriesApplied counts entries passed to state machines.
	EntriesApplied uint64
	// SnapshotsTaken, SnapshotsSent and SnapshotsApplied count state-machine
	// snapshots taken for log truncation, sent to followers, and received and
	// restored.
	SnapshotsTaken, SnapshotsSent, SnapshotsApplied uint64
	// PeersDown counts peers declared dead by the node-level liveness rule;
	// PeersRestarted peers seen with a new incarnation.
	PeersDown, PeersRestarted uint64
	// LeaseReads counts read barriers served from a leader's lease,
	// LeaseMisses those that needed a round of heartbeats instead;
	// VotesRefused vote requests dropped because this host started less
	// than ElectionTicks ticks ago.
	LeaseReads, LeaseMisses, VotesRefused uint64
	// CommitNoticesHeld counts empty appends held back (Config.
	// CommitNoticeDelay); CommitNoticesSaved those an append with entries
	// replaced, which were never sent.
	CommitNoticesHeld, CommitNoticesSaved uint64
	// Groups and GroupsQuiesced are current counts.
	Groups, GroupsQuiesced int
}

// Errors returned by the host. Use errors.Is.
var (
	// ErrNotLeader: the call needs the group's leader and this replica is not
	// it. The error is a *NotLeaderError that names the leader if known.
	ErrNotLeader = errors.New("multiraft: not the leader")
	// ErrGroupNotFound: no such group on this host.
	ErrGroupNotFound = errors.New("multiraft: group not found")
	// ErrGroupExists: AddGroup for a group already on this host.
	ErrGroupExists = errors.New("multiraft: group already exists")
	// ErrGroupRemoved: the group was removed while the call waited.
	ErrGroupRemoved = errors.New("multiraft: group removed")
	// ErrStopped: the host is stopped.
	ErrStopped = errors.New("multiraft: host stopped")
	// ErrLeadershipLost: this replica lost leadership (or the term changed)
	// after accepting the proposal and before applying it. The outcome is
	// unknown: the command may still be committed and applied by the next
	// leader, so retries must be idempotent.
	ErrLeadershipLost = errors.New("multiraft: leadership lost before the proposal applied; outcome unknown")
	// ErrProposalDropped: raft refused the proposal (a leadership transfer is
	// in progress, or MaxUncommittedBytes is exceeded); it was not appended.
	ErrProposalDropped = errors.New("multiraft: proposal dropped by raft")
	// ErrConfChangeRejected: raft refused the configuration change (another
	// one is not applied yet, or it does not fit the joint-consensus state);
	// it was not appended.
	ErrConfChangeRejected = errors.New("multiraft: configuration change rejected by raft")
	// ErrGroupFailed: the replica stopped working on this host; see
	// GroupStatus.Err.
	ErrGroupFailed = errors.New("multiraft: group failed")
	// ErrHostFailed: the host could not write its DB and stopped processing;
	// nothing is applied any more. Restart the process.
	ErrHostFailed = errors.New("multiraft: host failed")
)

// NotLeaderError is returned when a call needs the leader. errors.Is(err,
// ErrNotLeader) holds for it.
type NotLeaderError struct {
	Group GroupID
	// Leader is the leader this replica knows of, 0 if none.
	Leader NodeID
	Term   uint64
}

// Error names the group and, if known, the leader to retry at.
func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("multiraft: group %d: not the leader (no leader known, term %d)", e.Group, e.Term)
	}
	return fmt.Sprintf("multiraft: group %d: not the leader (leader is node %d, term %d)", e.Group, e.Leader, e.Term)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
