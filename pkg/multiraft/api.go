package multiraft

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// lookup returns group id if the host and the group can serve. Called with
// mu held.
func (h *Host) lookup(id GroupID) (*group, error) {
	if err := h.checkUsable(); err != nil {
		return nil, err
	}
	g := h.groups[id]
	if g == nil {
		return nil, fmt.Errorf("group %d: %w", id, ErrGroupNotFound)
	}
	if g.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGroupFailed, g.err)
	}
	return g, nil
}

// leaderGroup is lookup plus the leader check calls that need the leader make.
func (h *Host) leaderGroup(id GroupID) (*group, raft.BasicStatus, error) {
	g, err := h.lookup(id)
	if err != nil {
		return nil, raft.BasicStatus{}, err
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		return nil, bs, &NotLeaderError{Group: id, Leader: NodeID(bs.Lead), Term: bs.GetTerm()}
	}
	return g, bs, nil
}

// Propose replicates data through group id and returns what the state
// machine's Apply returned for it on this replica. It fails fast with a
// *NotLeaderError (errors.Is ErrNotLeader) when this replica is not the
// leader, ErrGroupNotFound, or ErrProposalDropped; it returns the context's
// error if ctx ends first (the entry may still apply), and ErrLeadershipLost if
// leadership changed before the entry applied (outcome unknown).
func (h *Host) Propose(ctx context.Context, id GroupID, data []byte) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch, pid, err := h.propose(id, data)
	if err != nil {
		return nil, err
	}
	return h.wait(ctx, id, pid, ch)
}

// propose appends data to the leader's log and registers a waiter; the work
// happens in the next round.
func (h *Host) propose(id GroupID, data []byte) (<-chan proposalResult, uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, bs, err := h.leaderGroup(id)
	if err != nil {
		return nil, 0, err
	}
	pid := h.nextID()
	entry := appendHeader(make([]byte, 0, headerLen+len(data)), h.id, pid)
	entry = append(entry, data...)
	if !h.guard(g, "propose", func() { err = g.rn.Propose(entry) }) {
		return nil, 0, fmt.Errorf("%w: %v", ErrGroupFailed, g.err)
	}
	if err != nil {
		return nil, 0, proposeError(id, err)
	}
	ch := make(chan proposalResult, 1)
	g.proposals[pid] = &proposal{ch: ch, term: bs.GetTerm()}
	h.unquiesce(g)
	h.wake()
	return ch, pid, nil
}

func proposeError(id GroupID, err error) error {
	if errors.Is(err, raft.ErrProposalDropped) {
		return fmt.Errorf("group %d: %w", id, ErrProposalDropped)
	}
	return fmt.Errorf("group %d: propose: %w", id, err)
}

// wait waits for a proposal's result; on ctx's end it stops waiting (the
// entry may still apply).
func (h *Host) wait(ctx context.Context, id GroupID, pid uint64, ch <-chan proposalResult) (any, error) {
	select {
	case r := <-ch:
		return r.val, r.err
	case <-ctx.Done():
		h.mu.Lock()
		if g := h.groups[id]; g != nil {
			delete(g.proposals, pid)
		}
		h.mu.Unlock()
		return nil, ctx.Err()
	}
}

// ProposeConfChange changes group id's membership (raftpb.ConfChange or
// ConfChangeV2; a single change uses raft's simple protocol, several use joint
// consensus) and returns once the change is applied on this replica. It is
// carried as a ConfChangeV2 whose Context starts with the host's header. Errors
// as for Propose, plus ErrConfChangeRejected when raft refuses it (another
// change is still being applied). A replica being added must already exist on
// its host (AddGroup with no peers) or be created soon: until then the leader's
// messages to it are dropped and retried.
func (h *Host) ProposeConfChange(ctx context.Context, id GroupID, cc raftpb.ConfChangeI) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, pid, err := h.proposeConf(id, cc)
	if err != nil {
		return err
	}
	_, err = h.wait(ctx, id, pid, ch)
	return err
}

func (h *Host) proposeConf(id GroupID, cc raftpb.ConfChangeI) (<-chan proposalResult, uint64, error) {
	if cc == nil {
		return nil, 0, fmt.Errorf("group %d: nil conf change", id)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, bs, err := h.leaderGroup(id)
	if err != nil {
		return nil, 0, err
	}
	pid := h.nextID()
	v2 := proto.Clone(cc.AsV2()).(*raftpb.ConfChangeV2)
	v2.Context = append(appendHeader(nil, h.id, pid), v2.GetContext()...)
	if !h.guard(g, "propose conf change", func() { err = g.rn.ProposeConfChange(v2) }) {
		return nil, 0, fmt.Errorf("%w: %v", ErrGroupFailed, g.err)
	}
	if err != nil {
		return nil, 0, proposeError(id, err)
	}
	ch := make(chan proposalResult, 1)
	g.proposals[pid] = &proposal{ch: ch, term: bs.GetTerm(), afterReady: g.readies, checkAppend: true}
	h.unquiesce(g)
	h.wake()
	return ch, pid, nil
}

// ReadIndex is a linearizable read barrier: it returns once this replica's
// state machine reflects every entry committed before the call, as confirmed
// by the leader with a round of heartbeats (raft's ReadIndex, ReadOnlySafe),
// or, on a leader that holds a read lease, by the lease alone (lease.go).
// Reads of the local state machine after it returns are linearizable. It
// works on followers too (the request goes to the leader), and fails fast
// with ErrNotLeader when no leader is known, ErrLeadershipLost if the leader
// changes before it answered.
func (h *Host) ReadIndex(ctx context.Context, id GroupID) error {
	return h.readIndex(ctx, id, false)
}

// LeaderReadIndex is ReadIndex on the leader only: on another replica it
// reads nothing and returns a *NotLeaderError naming the leader it knows
// (0: none). A leader holding a read lease answers in one acquisition of
// the host's lock, which the processing round also holds while it works.
func (h *Host) LeaderReadIndex(ctx context.Context, id GroupID) error {
	return h.readIndex(ctx, id, true)
}

func (h *Host) readIndex(ctx context.Context, id GroupID, leaderOnly bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	g, err := h.lookup(id)
	if err != nil {
		h.mu.Unlock()
		return err
	}
	bs := g.rn.BasicStatus()
	switch {
	case leaderOnly && bs.RaftState != raft.StateLeader:
		h.mu.Unlock()
		return &NotLeaderError{Group: id, Leader: NodeID(bs.Lead), Term: bs.GetTerm()}
	case bs.Lead == raft.None:
		h.mu.Unlock()
		return &NotLeaderError{Group: id, Term: bs.GetTerm()}
	}
	if bs.RaftState == raft.StateLeader {
		if idx, ok := h.leaseRead(g); ok {
			if g.applied >= idx {
				h.mu.Unlock()
				return nil
			}
			return h.waitApplied(ctx, g, idx)
		}
	}
	rid := h.nextID()
	rctx := appendHeader(nil, h.id, rid)
	if !h.guard(g, "read index", func() { g.rn.ReadIndex(rctx) }) {
		h.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrGroupFailed, g.err)
	}
	ch := make(chan error, 1)
	g.reads[rid] = &readWaiter{ch: ch}
	h.unquiesce(g)
	h.wake()
	h.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		h.mu.Lock()
		if g := h.groups[id]; g != nil {
			delete(g.reads, rid)
		}
		h.mu.Unlock()
		return ctx.Err()
	}
}

// Status reports this replica's view of group id.
func (h *Host) Status(id GroupID) (GroupStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkUsable(); err != nil {
		return GroupStatus{Group: id}, err
	}
	g := h.groups[id]
	if g == nil {
		return GroupStatus{Group: id}, fmt.Errorf("group %d: %w", id, ErrGroupNotFound)
	}
	return h.status(g), nil
}

// Leader returns the leader group id knows of (0: none) and whether it is
// this host: Status without its per-peer maps, for the request path.
func (h *Host) Leader(id GroupID) (leader NodeID, isLeader bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkUsable(); err != nil {
		return 0, false, err
	}
	g := h.groups[id]
	if g == nil {
		return 0, false, fmt.Errorf("group %d: %w", id, ErrGroupNotFound)
	}
	if g.rn == nil {
		return 0, false, nil
	}
	bs := g.rn.BasicStatus()
	return NodeID(bs.Lead), bs.RaftState == raft.StateLeader, nil
}

// Groups returns the ids of the groups on this host, sorted.
func (h *Host) Groups() []GroupID {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]GroupID, len(h.order))
	for i, g := range h.order {
		ids[i] = g.id
	}
	return ids
}

// Campaign makes this replica start an election for group id now (raft's
// pre-vote first), instead of waiting for its election timeout.
func (h *Host) Campaign(id GroupID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.lookup(id)
	if err != nil {
		return err
	}
	h.unquiesce(g)
	if !h.guard(g, "campaign", func() { err = g.rn.Campaign() }) {
		return fmt.Errorf("%w: %v", ErrGroupFailed, g.err)
	}
	h.wake()
	if err != nil {
		return fmt.Errorf("group %d: campaign: %w", id, err)
	}
	return nil
}

// TransferLeader asks the leader of group id, which must be this replica, to
// hand leadership to replica to. It returns once the request is accepted;
// watch Status or OnLeaderChange for the outcome. Proposals are dropped while
// the transfer is in progress.
func (h *Host) TransferLeader(id GroupID, to NodeID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, _, err := h.leaderGroup(id)
	if err != nil {
		return err
	}
	if to == 0 || !hasMember(g.conf, to) {
		return fmt.Errorf("group %d: transfer leadership: node %d is not a member", id, to)
	}
	h.unquiesce(g)
	// The transferee's election overrides the followers' leases.
	g.lease.noLeaseTerm = g.rn.BasicStatus().GetTerm()
	if !h.guard(g, "transfer leader", func() { g.rn.TransferLeader(uint64(to)) }) {
		return fmt.Errorf("%w: %v", ErrGroupFailed, g.err)
	}
	h.wake()
	return nil
}

// waitApplied waits until g's state machine has applied index, for a read
// served from the lease. Called with mu held; returns with it released.
func (h *Host) waitApplied(ctx context.Context, g *group, index uint64) error {
	rid := h.nextID()
	ch := make(chan error, 1)
	g.reads[rid] = &readWaiter{ch: ch, index: index, known: true}
	h.wake()
	h.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		h.mu.Lock()
		delete(g.reads, rid)
		h.mu.Unlock()
		return ctx.Err()
	}
}
