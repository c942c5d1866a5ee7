package multiraft

import (
	"encoding/binary"
	"math"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/raftpb"
)

// Read leases: a leader answers ReadIndex from its own state, without a
// round of heartbeats, while a quorum of its group has acknowledged a
// heartbeat of its term sent less than the lease ago. doc.go ("Read
// leases") gives the safety argument; in short, a follower that accepted a
// heartbeat sent at time s grants no vote to another candidate before
// s + (ElectionTicks-2) ticks, by raft's CheckQuorum lease, by the host's
// liveness rule, and after a restart by refusing votes for ElectionTicks
// ticks (votesAllowed).

// stampTag starts the context of a stamped heartbeat. ReadIndex contexts
// are 16-byte host headers, so the two never mix.
const stampTag = 0xA5

// stampContext is the raft context carrying a lease stamp.
func stampContext(stamp int64) []byte {
	b := make([]byte, 9)
	b[0] = stampTag
	binary.BigEndian.PutUint64(b[1:], uint64(stamp))
	return b
}

// stampOf reads a lease stamp from a raft context.
func stampOf(ctx []byte) (int64, bool) {
	if len(ctx) != 9 || ctx[0] != stampTag {
		return 0, false
	}
	s := int64(binary.BigEndian.Uint64(ctx[1:]))
	return s, s > 0
}

// leaseState is a leader's evidence for its read lease.
type leaseState struct {
	// term is the term acks belongs to; acks maps a follower to the newest
	// stamp of a heartbeat of that term it acknowledged.
	term uint64
	acks map[NodeID]int64
	// noLeaseTerm is a term in which a leadership transfer was started: a
	// transferee's election overrides followers' leases, so no lease is
	// trusted for the rest of that term.
	noLeaseTerm uint64
	// appliedTerm is the term of the newest applied entry: a new leader
	// serves reads only once an entry of its own term applied (raft's rule
	// for ReadIndex).
	appliedTerm uint64
	// reads counts lease reads since the last tick; a group serving them
	// does not quiesce (its heartbeats keep the lease fresh).
	reads int
	// jc is the quorum of confOf (the group's configuration it was built
	// from), kept so that a read does not build it again.
	jc     quorum.JointConfig
	confOf *raftpb.ConfState
}

// leaseAcks presents a leader's heartbeat acknowledgements to raft's
// quorum arithmetic: the stamp each voter acknowledged, the leader's own
// as the newest possible.
type leaseAcks struct {
	self NodeID
	acks map[NodeID]int64
}

func (a *leaseAcks) AckedIndex(id uint64) (quorum.Index, bool) {
	if NodeID(id) == a.self {
		return quorum.Index(math.MaxUint64), true
	}
	s, ok := a.acks[NodeID(id)]
	return quorum.Index(s), ok
}

// stamp is the host's lease clock now: nanoseconds since the host was made,
// never 0.
func (h *Host) stamp() int64 {
	return int64(h.cfg.Now().Sub(h.clockBase)) + 1
}

// leaseDuration is how long a heartbeat acknowledgement keeps a lease: the
// time a follower needs at least to count ElectionTicks ticks (a ticker can
// deliver one late tick right before an on-time one, so ElectionTicks ticks
// span at least ElectionTicks-2 intervals), less 10% for clock rate drift.
// Zero disables leases.
func (c *Config) leaseDuration() time.Duration {
	if c.ElectionTicks <= 2 || c.DisableLeaseReads {
		return 0
	}
	return time.Duration(c.ElectionTicks-2) * c.TickInterval * 9 / 10
}

// votesAllowed reports whether this host may grant votes: not before it has
// ticked ElectionTicks times since it started, so that a replica that
// restarted (and forgot its leader and its raft clock) cannot help elect a
// new leader while the old one still counts on the lease it acknowledged
// before the restart.
func (h *Host) votesAllowed() bool {
	return h.ticks >= uint64(h.cfg.ElectionTicks)
}

// isVoteRequest reports whether m asks for a (pre-)vote.
func isVoteRequest(m *raftpb.Message) bool {
	t := m.GetType()
	return t == raftpb.MsgVote || t == raftpb.MsgPreVote
}

// leaseAck records follower from's acknowledgement of a heartbeat of term
// that this leader stamped. Called with mu held, after the batch's messages
// were stepped (so a response with a newer term has already deposed us).
func (h *Host) leaseAck(g *group, from NodeID, term uint64, stamp int64) {
	if stamp <= 0 || h.leaseNanos == 0 {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || bs.GetTerm() != term {
		return
	}
	if g.lease.term != term {
		g.lease.term, g.lease.acks = term, map[NodeID]int64{}
	}
	if stamp > g.lease.acks[from] {
		g.lease.acks[from] = stamp
	}
}

// leaseValid reports whether g, led by this host in bs's term, holds a read
// lease now: a quorum of its configuration (joint quorums included), this
// host counting, acknowledged a heartbeat of this term stamped within the
// lease duration, no leadership transfer was tried in the term, and an entry
// of the term has applied. Called with mu held.
func (h *Host) leaseValid(g *group, bs raft.BasicStatus) bool {
	term := bs.GetTerm()
	if h.leaseNanos == 0 || bs.RaftState != raft.StateLeader || bs.LeadTransferee != raft.None ||
		g.lease.noLeaseTerm == term || g.lease.appliedTerm != term || g.lease.term != term || g.conf == nil {
		return false
	}
	if g.lease.confOf != g.conf {
		g.lease.jc = quorum.JointConfig{majority(g.conf.GetVoters()), majority(g.conf.GetVotersOutgoing())}
		g.lease.confOf = g.conf
	}
	// The newest stamp a quorum acknowledged: the lease holds while it is
	// younger than the lease duration (a quorum of voters, this host
	// counting, acknowledged a heartbeat stamped within it).
	q := g.lease.jc.CommittedIndex(&leaseAcks{self: h.id, acks: g.lease.acks})
	if q == 0 || uint64(q) > math.MaxInt64 {
		return q != 0 // no follower needed (a group of one)
	}
	return h.stamp()-int64(q) < h.leaseNanos
}

func majority(ids []uint64) quorum.MajorityConfig {
	m := make(quorum.MajorityConfig, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}

// leaseRead serves a read barrier from the lease when g has one: it returns
// the index the state machine must reach (the commit index now) and true;
// false when the caller must take raft's ReadIndex path. Called with mu held.
func (h *Host) leaseRead(g *group) (uint64, bool) {
	bs := g.rn.BasicStatus()
	if !h.leaseValid(g, bs) {
		h.stats.LeaseMisses++
		return 0, false
	}
	g.lease.reads++
	h.stats.LeaseReads++
	return bs.GetCommit(), true
}
