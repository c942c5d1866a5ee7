package multiraft

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// group is one replica hosted here. Every field is guarded by Host.mu.
type group struct {
	id   GroupID
	rn   *raft.RawNode
	st   *storage
	sm   StateMachine
	opts GroupOptions

	// conf is the latest applied configuration; applied the latest applied
	// index (what the state machine reflects).
	conf    *raftpb.ConfState
	applied uint64
	// err is set once the replica stopped working here.
	err error

	// Quiescence (see quiesce.go).
	quiesced   bool
	idleTicks  int
	quiesceReq *quiesceRequest

	// lead and term as last observed after a Ready: the basis of
	// OnLeaderChange and of failing proposals when leadership is lost.
	lead NodeID
	term uint64

	// readies counts Ready() calls; a conf change proposed after Ready n must
	// show up in Ready n+1's entries.
	readies   uint64
	proposals map[uint64]*proposal
	reads     map[uint64]*readWaiter
	// snapSent maps a follower to the tick a snapshot was sent to it; if it
	// is still waiting for one much later, the send is reported failed so
	// raft retries.
	snapSent map[NodeID]uint64
	// snapRetryTick delays the next snapshot attempt after one failed.
	snapRetryTick uint64
	// lease is the leader's read lease (lease.go).
	lease leaseState
}

// proposal is a caller waiting for its entry to apply.
type proposal struct {
	ch   chan proposalResult // buffered: the loop never blocks on it
	term uint64              // leader term it was proposed in
	// afterReady is g.readies when proposed; a conf change must appear in
	// the first Ready after it or raft refused it.
	afterReady  uint64
	checkAppend bool
}

type proposalResult struct {
	val any
	err error
}

// readWaiter is a ReadIndex call waiting for its read index, then for the
// state machine to reach it.
type readWaiter struct {
	ch    chan error
	index uint64
	known bool
}

func newGroup(id GroupID, st *storage, sm StateMachine, opts GroupOptions) *group {
	return &group{
		id:        id,
		st:        st,
		sm:        sm,
		opts:      opts,
		proposals: make(map[uint64]*proposal),
		reads:     make(map[uint64]*readWaiter),
		snapSent:  make(map[NodeID]uint64),
	}
}

// failWaiters fails every pending call of g with err.
func (g *group) failWaiters(err error) {
	for id, p := range g.proposals {
		p.ch <- proposalResult{err: err}
		delete(g.proposals, id)
	}
	for id, r := range g.reads {
		r.ch <- err
		delete(g.reads, id)
	}
}

func (g *group) finishProposal(id uint64, val any, err error) {
	if p, ok := g.proposals[id]; ok {
		p.ch <- proposalResult{val: val, err: err}
		delete(g.proposals, id)
	}
}

// Entry header. Every entry the host proposes starts with the proposer's node
// id and a proposal id, so the proposer finds its waiter when the entry
// applies (ids are unique per host and random across restarts). The header is
// stripped before Apply. Conf changes carry it in their Context, ReadIndex
// requests as their request context.
const headerLen = 16

func appendHeader(b []byte, node NodeID, id uint64) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(node))
	return binary.BigEndian.AppendUint64(b, id)
}

func parseHeader(b []byte) (node NodeID, id uint64, rest []byte, ok bool) {
	if len(b) < headerLen {
		return 0, 0, nil, false
	}
	return NodeID(binary.BigEndian.Uint64(b)), binary.BigEndian.Uint64(b[8:]), b[headerLen:], true
}

// AddGroup starts hosting a replica of group id with state machine sm.
//
// If the DB holds state for the group, the replica is reopened: sm is
// restored from the stored snapshot and the committed entries after it are
// re-applied in the next rounds; peers is ignored. Otherwise, with peers
// given (they must include this node; every initial replica of a group must
// be created with the same list), the group is bootstrapped: sm's Snapshot is
// stored as the group's first snapshot (index 1, term 1, voters = peers).
// With no peers the replica starts empty, to join an existing group: add it
// with ProposeConfChange on the leader, which then sends it a snapshot.
func (h *Host) AddGroup(id GroupID, peers []NodeID, sm StateMachine, opts GroupOptions) error {
	if sm == nil {
		return fmt.Errorf("multiraft: group %d: nil state machine", id)
	}
	h.roundMu.Lock()
	defer h.roundMu.Unlock()
	if err := h.checkAbsent(id); err != nil {
		return err
	}

	// No round runs while roundMu is held, so the DB work below needs no
	// state lock; the group becomes visible only at the end.
	st, exists, err := loadStorage(h.cfg.DB, id)
	if err != nil {
		return err
	}
	g := newGroup(id, st, sm, opts)
	st.latestConf = func() *raftpb.ConfState { return g.conf }
	switch {
	case exists:
		if st.snapIndex() > 0 {
			data, err := st.snapshotData()
			if err != nil {
				return err
			}
			if err := sm.Restore(data); err != nil {
				return fmt.Errorf("group %d: restore snapshot %d: %w", id, st.snapIndex(), err)
			}
		}
	case len(peers) > 0:
		if err := h.bootstrap(st, sm, peers); err != nil {
			return err
		}
	}
	g.applied = st.snapIndex()
	g.conf = proto.Clone(st.cur.snap.GetConfState()).(*raftpb.ConfState)

	rn, err := h.newRawNode(g)
	if err != nil {
		return err
	}
	g.rn = rn
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkUsable(); err != nil {
		return err
	}
	h.insertGroup(g)
	h.log.Debug("raft group added", "group", uint64(id), "reopened", exists, "snapshot", st.snapIndex(),
		"last", st.cur.lastIndex, "commit", st.cur.hard.GetCommit())
	h.wake()
	return nil
}

// bootstrap persists a new group's initial state: the state machine's initial
// snapshot at index 1, term 1, with peers as voters. Starting from a snapshot
// (not from conf-change entries, raft's other way) means every group always
// has a stored snapshot to catch followers up from, and a replica added later
// needs nothing but that snapshot and the log.
func (h *Host) bootstrap(st *storage, sm StateMachine, peers []NodeID) error {
	voters := make([]uint64, 0, len(peers))
	for _, p := range peers {
		if p == 0 {
			return fmt.Errorf("group %d: bootstrap: node id 0 in peers", st.group)
		}
		voters = append(voters, uint64(p))
	}
	slices.Sort(voters)
	voters = slices.Compact(voters)
	if _, found := slices.BinarySearch(voters, uint64(h.id)); !found {
		return fmt.Errorf("group %d: bootstrap: peers %v do not include this node %d", st.group, voters, h.id)
	}
	data, err := sm.Snapshot()
	if err != nil {
		return fmt.Errorf("group %d: bootstrap: initial snapshot: %w", st.group, err)
	}
	meta := &raftpb.SnapshotMetadata{
		Index:     proto.Uint64(1),
		Term:      proto.Uint64(1),
		ConfState: &raftpb.ConfState{Voters: voters},
	}
	b := h.cfg.DB.NewBatch()
	defer b.Close()
	if err := st.stageSnapshot(b, meta, data, true); err != nil {
		return fmt.Errorf("group %d: bootstrap: %w", st.group, err)
	}
	if err := st.stageHardState(b, &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}); err != nil {
		return fmt.Errorf("group %d: bootstrap: %w", st.group, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		st.dropStaged()
		return fmt.Errorf("group %d: bootstrap: commit: %w", st.group, err)
	}
	st.commitStaged()
	return nil
}

// newRawNode creates g's RawNode over its storage, restarting at the stored
// snapshot (raft re-delivers every committed entry after it).
func (h *Host) newRawNode(g *group) (rn *raft.RawNode, err error) {
	c := &raft.Config{
		ID:                        uint64(h.id),
		ElectionTick:              h.cfg.ElectionTicks,
		HeartbeatTick:             h.cfg.HeartbeatTicks,
		Storage:                   g.st,
		Applied:                   g.st.snapIndex(),
		MaxSizePerMsg:             h.cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  4 * h.cfg.MaxSizePerMsg,
		MaxUncommittedEntriesSize: h.cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           h.cfg.MaxInflightMsgs,
		// CheckQuorum lets a partitioned leader step down; PreVote keeps a
		// rejoining replica from disrupting a healthy group.
		CheckQuorum:    true,
		PreVote:        true,
		ReadOnlyOption: raft.ReadOnlySafe,
		Logger:         newRaftLogger(h.log.With("group", uint64(g.id))),
		// Propose fails fast on followers instead; forwarding would also
		// let a duplicated message become a duplicated entry.
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
	}
	// raft panics on inconsistent storage; report it as an error.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("group %d: start raft: %v", g.id, r)
		}
	}()
	rn, err = raft.NewRawNode(c)
	if err != nil {
		return nil, fmt.Errorf("group %d: start raft: %w", g.id, err)
	}
	return rn, nil
}

// RemoveGroup stops hosting group id. Pending calls fail with
// ErrGroupRemoved. With destroy, its persisted state is deleted (durably)
// too; otherwise a later AddGroup reopens it.
func (h *Host) RemoveGroup(id GroupID, destroy bool) error {
	h.roundMu.Lock()
	defer h.roundMu.Unlock()
	h.mu.Lock()
	if err := h.checkUsable(); err != nil {
		h.mu.Unlock()
		return err
	}
	g := h.groups[id]
	if g == nil {
		h.mu.Unlock()
		return fmt.Errorf("group %d: %w", id, ErrGroupNotFound)
	}
	h.deleteGroup(g)
	g.failWaiters(fmt.Errorf("group %d: %w", id, ErrGroupRemoved))
	h.mu.Unlock()
	if destroy {
		return destroyGroup(h.cfg.DB, id)
	}
	return nil
}

// applyCommitted applies g's Ready to the state machine: restores a received
// snapshot and applies the committed entries. It may run while the Ready's
// writes are being persisted.
func (h *Host) applyCommitted(g *group, rd *raft.Ready, n uint64) {
	if !raft.IsEmptySnap(rd.Snapshot) {
		meta := rd.Snapshot.GetMetadata()
		if err := g.sm.Restore(rd.Snapshot.GetData()); err != nil {
			h.failGroup(g, fmt.Errorf("restore snapshot %d: %w", meta.GetIndex(), err))
			return
		}
		g.applied = meta.GetIndex()
		g.lease.appliedTerm = meta.GetTerm()
		g.conf = proto.Clone(meta.GetConfState()).(*raftpb.ConfState)
		h.peersFresh = false
		h.stats.SnapshotsApplied++
	}
	h.checkConfAppended(g, rd.Entries, n)
	for _, rs := range rd.ReadStates {
		if node, id, _, ok := parseHeader(rs.RequestCtx); ok && node == h.id {
			if r := g.reads[id]; r != nil {
				r.index, r.known = rs.Index, true
			}
		}
	}
	ents := rd.CommittedEntries
	if ba, ok := g.sm.(BatchApplier); ok {
		h.applyBatched(g, ba, ents)
		return
	}
	for _, e := range ents {
		if !h.applyEntry(g, e) {
			return
		}
	}
}

// applyBatched applies ents through ba: each run of consecutive normal
// entries with a payload in one ApplyBatch, everything else (conf changes,
// empty entries) one by one, in log order.
func (h *Host) applyBatched(g *group, ba BatchApplier, ents []*raftpb.Entry) {
	type waiter struct {
		node NodeID
		id   uint64
	}
	var (
		batch   []Entry
		waiters []waiter
		last    *raftpb.Entry
	)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		vals, errs := ba.ApplyBatch(batch)
		for i, w := range waiters {
			h.stats.EntriesApplied++
			if w.node == h.id {
				var val any
				var err error
				if i < len(vals) {
					val = vals[i]
				}
				if i < len(errs) {
					err = errs[i]
				}
				g.finishProposal(w.id, val, err)
			}
		}
		g.applied = last.GetIndex()
		g.lease.appliedTerm = last.GetTerm()
		batch, waiters = batch[:0], waiters[:0]
	}
	for _, e := range ents {
		if e.GetType() == raftpb.EntryNormal && len(e.GetData()) > 0 {
			if node, id, payload, ok := parseHeader(e.GetData()); ok {
				batch = append(batch, Entry{Index: e.GetIndex(), Data: payload})
				waiters = append(waiters, waiter{node, id})
				last = e
				continue
			}
		}
		flush()
		if !h.applyEntry(g, e) {
			return
		}
	}
	flush()
}

// advanceReady ends g's Ready once its writes are durable: advances raft and
// settles waiters.
func (h *Host) advanceReady(g *group, rd *raft.Ready) {
	if !h.guard(g, "advance", func() { g.rn.Advance(*rd) }) {
		return
	}
	h.observeLeader(g)
	for id, r := range g.reads {
		if r.known && r.index <= g.applied {
			r.ch <- nil
			delete(g.reads, id)
		}
	}
}

// checkConfAppended fails conf-change proposals that raft refused: raft
// replaces a refused conf change with an empty entry instead of returning an
// error, so a conf change proposed before Ready n and absent from its entries
// was refused.
func (h *Host) checkConfAppended(g *group, ents []*raftpb.Entry, n uint64) {
	for id, p := range g.proposals {
		if !p.checkAppend || p.afterReady >= n {
			continue
		}
		p.checkAppend = false
		found := false
		for _, e := range ents {
			if t := e.GetType(); t != raftpb.EntryConfChange && t != raftpb.EntryConfChangeV2 {
				continue
			}
			if _, ctx, err := decodeConfChange(e); err == nil {
				if node, pid, _, ok := parseHeader(ctx); ok && node == h.id && pid == id {
					found = true
					break
				}
			}
		}
		if !found {
			p.ch <- proposalResult{err: fmt.Errorf("group %d: %w", g.id, ErrConfChangeRejected)}
			delete(g.proposals, id)
		}
	}
}

// applyEntry applies one committed entry; false means g failed.
func (h *Host) applyEntry(g *group, e *raftpb.Entry) bool {
	switch e.GetType() {
	case raftpb.EntryNormal:
		if data := e.GetData(); len(data) > 0 {
			node, id, payload, ok := parseHeader(data)
			if !ok {
				// Every replica skips it alike, so they stay identical.
				h.log.Error("skipping committed entry without host header", "group", uint64(g.id), "index", e.GetIndex())
				break
			}
			val, err := g.sm.Apply(e.GetIndex(), payload)
			h.stats.EntriesApplied++
			if node == h.id {
				g.finishProposal(id, val, err)
			}
		}
	case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
		cc, ctx, err := decodeConfChange(e)
		if err != nil {
			h.failGroup(g, fmt.Errorf("entry %d: %w", e.GetIndex(), err))
			return false
		}
		var cs *raftpb.ConfState
		if !h.guard(g, "apply conf change", func() { cs = g.rn.ApplyConfChange(cc) }) {
			return false
		}
		g.conf = proto.Clone(cs).(*raftpb.ConfState)
		h.peersFresh = false
		if node, id, _, ok := parseHeader(ctx); ok && node == h.id {
			g.finishProposal(id, nil, nil)
		}
	default:
		h.failGroup(g, fmt.Errorf("entry %d: unknown entry type %d", e.GetIndex(), e.GetType()))
		return false
	}
	g.applied = e.GetIndex()
	g.lease.appliedTerm = e.GetTerm()
	return true
}

func decodeConfChange(e *raftpb.Entry) (cc raftpb.ConfChangeI, ctx []byte, err error) {
	if e.GetType() == raftpb.EntryConfChange {
		c := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return nil, nil, fmt.Errorf("decode conf change: %w", err)
		}
		return c, c.GetContext(), nil
	}
	c := &raftpb.ConfChangeV2{}
	if err := proto.Unmarshal(e.GetData(), c); err != nil {
		return nil, nil, fmt.Errorf("decode conf change v2: %w", err)
	}
	return c, c.GetContext(), nil
}

// observeLeader reacts to a change of leader or term seen after a Ready:
// notify, and fail what can no longer complete. A proposal accepted in term t
// by this leader may still commit after a change, but this replica cannot
// tell, so it reports ErrLeadershipLost (outcome unknown). A read whose index
// is not known yet was lost with the old leader.
func (h *Host) observeLeader(g *group) {
	bs := g.rn.BasicStatus()
	lead, term := NodeID(bs.Lead), bs.GetTerm()
	if lead == g.lead && term == g.term {
		return
	}
	g.lead, g.term = lead, term
	isLeader := bs.RaftState == raft.StateLeader
	for id, p := range g.proposals {
		if !isLeader || p.term != term {
			p.ch <- proposalResult{err: fmt.Errorf("group %d: %w", g.id, ErrLeadershipLost)}
			delete(g.proposals, id)
		}
	}
	for id, r := range g.reads {
		if !r.known {
			r.ch <- fmt.Errorf("group %d: %w", g.id, ErrLeadershipLost)
			delete(g.reads, id)
		}
	}
	h.queueNote(g, LeaderInfo{Group: g.id, Leader: lead, Term: term, IsLeader: isLeader})
}

// snapshotDue reports whether g applied SnapshotEntries since its snapshot.
func (h *Host) snapshotDue(g *group) bool {
	return g.applied >= g.st.snapIndex()+h.cfg.SnapshotEntries && h.ticks >= g.snapRetryTick
}

// takeSnapshot snapshots g's state machine at its applied index, stores it and
// truncates the log up to it, in one batch. It is written without Sync: if a
// crash loses it, the old snapshot and the log still cover everything, and
// any later synced write makes it durable (the WAL is ordered).
func (h *Host) takeSnapshot(g *group) {
	fail := func(err error) {
		h.log.Warn("raft log truncation failed; will retry", "group", uint64(g.id), "index", g.applied, "err", err)
		g.snapRetryTick = h.ticks + uint64(h.cfg.ElectionTicks)
	}
	term, err := g.st.Term(g.applied)
	if err != nil {
		fail(err)
		return
	}
	data, err := g.sm.Snapshot()
	if err != nil {
		fail(fmt.Errorf("state machine snapshot: %w", err))
		return
	}
	meta := &raftpb.SnapshotMetadata{
		Index:     proto.Uint64(g.applied),
		Term:      proto.Uint64(term),
		ConfState: proto.Clone(g.conf).(*raftpb.ConfState),
	}
	b := h.cfg.DB.NewBatch()
	defer b.Close()
	if err := g.st.stageSnapshot(b, meta, data, false); err != nil {
		g.st.dropStaged()
		fail(err)
		return
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		g.st.dropStaged()
		fail(fmt.Errorf("commit: %w", err))
		return
	}
	g.st.commitStaged()
	h.stats.Commits++
	h.stats.SnapshotsTaken++
}

// status builds g's GroupStatus. Called with mu held.
func (h *Host) status(g *group) GroupStatus {
	s := GroupStatus{
		Group:         g.id,
		Applied:       g.applied,
		FirstIndex:    g.st.snapIndex() + 1,
		LastIndex:     g.st.cur.lastIndex,
		SnapshotIndex: g.st.snapIndex(),
		Quiesced:      g.quiesced,
		Err:           g.err,
	}
	if g.rn != nil {
		bs := g.rn.BasicStatus()
		s.Leader, s.Term, s.IsLeader = NodeID(bs.Lead), bs.GetTerm(), bs.RaftState == raft.StateLeader
		s.Commit = bs.GetCommit()
		if s.IsLeader {
			s.Match, s.Active = map[NodeID]uint64{}, map[NodeID]bool{}
			g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
				s.Match[NodeID(id)] = pr.Match
				s.Active[NodeID(id)] = pr.RecentActive
			})
		}
	}
	for _, v := range g.conf.GetVoters() {
		s.Voters = append(s.Voters, NodeID(v))
	}
	for _, v := range g.conf.GetLearners() {
		s.Learners = append(s.Learners, NodeID(v))
	}
	for _, v := range g.conf.GetVotersOutgoing() {
		s.VotersOutgoing = append(s.VotersOutgoing, NodeID(v))
	}
	slices.Sort(s.Voters)
	slices.Sort(s.Learners)
	slices.Sort(s.VotersOutgoing)
	return s
}

// DestroyGroup deletes the persisted state of group id, which this host
// must not be hosting (RemoveGroup it first): a replica moved away whose
// state is no longer wanted.
func (h *Host) DestroyGroup(id GroupID) error {
	h.roundMu.Lock()
	defer h.roundMu.Unlock()
	if err := h.checkAbsent(id); err != nil {
		return err
	}
	return destroyGroup(h.cfg.DB, id)
}

// checkAbsent fails unless the host is usable and does not host group id.
func (h *Host) checkAbsent(id GroupID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkUsable(); err != nil {
		return err
	}
	if h.groups[id] != nil {
		return fmt.Errorf("group %d: %w", id, ErrGroupExists)
	}
	return nil
}
