package multiraft

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// quiesceRequest is a quiesce heartbeat a follower received this round; it is
// judged at the end of the round, once the heartbeat's commit index is applied.
type quiesceRequest struct {
	from NodeID
	hb   Heartbeat
}

// handleBatch steps one inbound batch into its groups. Called with mu held.
func (h *Host) handleBatch(b *Batch) {
	if b.To != h.id || b.From == 0 || b.From == h.id {
		h.stats.DroppedMalformed++
		return
	}
	h.stats.BatchesReceived++
	h.heard(b.From, b.Incarnation)
	for _, gm := range b.Messages {
		g := h.groups[gm.Group]
		if g == nil {
			h.stats.DroppedUnknownGroup++
			continue
		}
		if !validMessage(gm.Message, b.From, b.To) {
			h.stats.DroppedMalformed++
			continue
		}
		if g.err != nil {
			continue
		}
		if isVoteRequest(gm.Message) && !h.votesAllowed() {
			h.stats.VotesRefused++
			continue
		}
		h.stats.MessagesReceived++
		// Anything but a heartbeat response means the group has work
		// (an append, a vote, a read), so it must tick again.
		if g.quiesced && gm.Message.GetType() != raftpb.MsgHeartbeatResp {
			h.unquiesce(g)
		}
		h.step(g, gm.Message)
	}
	for i := range b.Heartbeats {
		hb := &b.Heartbeats[i]
		g := h.groups[hb.Group]
		if g == nil {
			h.stats.DroppedUnknownGroup++
			continue
		}
		if hb.Term == 0 {
			h.stats.DroppedMalformed++
			continue
		}
		if g.err != nil {
			continue
		}
		if h.staleHeartbeat(g, hb) {
			h.stats.DroppedStale++
			continue
		}
		h.stats.HeartbeatsReceived++
		switch {
		case hb.Response:
			// A response to the leader's (quiesce) heartbeat: no new work.
		case hb.Quiesce:
			g.quiesceReq = &quiesceRequest{from: b.From, hb: *hb}
		case g.quiesced:
			h.unquiesce(g)
		}
		h.step(g, hb.toMessage(b.From, b.To))
		if hb.Response && hb.Stamp != 0 {
			h.leaseAck(g, b.From, hb.Term, hb.Stamp)
		}
	}
}

// staleHeartbeat reports whether heartbeat hb is older than g's replica
// here: it names a commit index beyond the replica's durable log. A
// leader's heartbeat carries at most what the follower acknowledged
// having (raft sends min(match, commit)) and its quiesce heartbeat goes
// only to followers that have everything, so such a heartbeat was sent to
// an earlier replica of the group under this node's id: one removed while
// this host was down and added back empty since, the heartbeat having
// waited in the sender's queue until the link came back (a lab run of a
// zone loss and heal). Raft takes it for a lost log and panics, and the
// group would fail for good; dropped, it costs nothing, as a lost message.
func (h *Host) staleHeartbeat(g *group, hb *Heartbeat) bool {
	return !hb.Response && hb.Commit > g.st.cur.lastIndex
}

func (h *Host) step(g *group, m *raftpb.Message) {
	h.guard(g, "step", func() {
		// Errors are raft's refusals of stale or foreign messages (for
		// example a response from a replica no longer in the group).
		_ = g.rn.Step(m)
	})
}

// heard records a batch from peer p: it is alive. A new incarnation means p
// restarted and lost its quiesced state: groups it led are leaderless now.
//
// Only member peers are tracked (so the table is bounded by real members); a
// host that becomes a member starts with a full grace period.
func (h *Host) heard(p NodeID, incarnation uint64) {
	h.refreshMembers()
	ps := h.peers[p]
	if ps == nil {
		return
	}
	ps.lastHeard = h.ticks
	if !ps.alive {
		ps.alive = true
		h.log.Info("peer host is alive again", "peer", uint64(p))
	}
	if ps.incarnation != 0 && incarnation != ps.incarnation {
		h.log.Info("peer host restarted", "peer", uint64(p))
		h.stats.PeersRestarted++
		h.peerLost(p)
	}
	ps.incarnation = incarnation
}

// refreshMembers recomputes which peers hold replicas of this host's groups:
// they get a beat every tick and are watched for liveness.
func (h *Host) refreshMembers() {
	if h.peersFresh {
		return
	}
	h.peersFresh = true
	for _, ps := range h.peers {
		ps.member = false
	}
	defer func() {
		for p, ps := range h.peers {
			if !ps.member {
				delete(h.peers, p)
			}
		}
	}()
	for _, g := range h.order {
		if g.err != nil {
			continue
		}
		for _, ids := range [][]uint64{g.conf.GetVoters(), g.conf.GetLearners(), g.conf.GetVotersOutgoing(), g.conf.GetLearnersNext()} {
			for _, id := range ids {
				p := NodeID(id)
				if p == h.id {
					continue
				}
				ps := h.peers[p]
				if ps == nil {
					// A new peer gets a full liveness period of grace.
					ps = &peerState{lastHeard: h.ticks, alive: true}
					h.peers[p] = ps
				}
				ps.member = true
			}
		}
	}
}

// tick advances time by one tick. Called with mu held.
func (h *Host) tick(out *outbox) {
	h.ticks++
	h.refreshMembers()
	// Node-level liveness: a member peer that sent nothing, not even its
	// beat, for ElectionTicks is dead.
	for p, ps := range h.peers {
		if ps.member && ps.alive && h.ticks-ps.lastHeard > uint64(h.cfg.ElectionTicks) {
			ps.alive = false
			h.stats.PeersDown++
			h.log.Warn("peer host silent; waking its quiesced groups", "peer", uint64(p), "ticks", h.ticks-ps.lastHeard)
			h.peerLost(p)
		}
	}
	for _, g := range h.order {
		if g.err != nil || g.quiesced {
			continue
		}
		if !h.cfg.DisableQuiescence && h.canQuiesce(g) {
			g.idleTicks++
			if g.idleTicks >= h.cfg.QuiesceAfterTicks {
				h.quiesceLeader(g, out)
				continue
			}
		} else {
			g.idleTicks = 0
		}
		g.lease.reads = 0
		if !h.guard(g, "tick", g.rn.Tick) {
			continue
		}
		if len(g.snapSent) > 0 {
			h.checkSnapshotSends(g)
		}
	}
}

// peerLost wakes what depended on peer p: quiesced groups it is a member of,
// and groups it led, which forget it so they can elect a new leader at once
// (raft grants pre-votes only to leaderless followers).
func (h *Host) peerLost(p NodeID) {
	for _, g := range h.order {
		if g.err != nil {
			continue
		}
		if g.quiesced && hasMember(g.conf, p) {
			h.unquiesce(g)
		}
		if bs := g.rn.BasicStatus(); NodeID(bs.Lead) == p && bs.RaftState == raft.StateFollower {
			h.guard(g, "forget leader", func() { _ = g.rn.ForgetLeader() })
		}
	}
}

func hasMember(cs *raftpb.ConfState, p NodeID) bool {
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		if slices.Contains(ids, uint64(p)) {
			return true
		}
	}
	return false
}

// canQuiesce reports whether leader g has nothing in flight: every entry is
// committed, applied and on every follower, no call waits on it, no
// configuration or leadership change is under way, and every follower's host
// is alive (a dead follower must keep getting heartbeats when it returns).
func (h *Host) canQuiesce(g *group) bool {
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || bs.LeadTransferee != 0 {
		return false
	}
	if len(g.proposals) > 0 || len(g.reads) > 0 || g.lease.reads > 0 || g.rn.HasReady() {
		return false
	}
	last := g.st.cur.lastIndex
	if bs.GetCommit() != last || g.applied != last || len(g.conf.GetVotersOutgoing()) > 0 {
		return false
	}
	ok := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if NodeID(id) == h.id || !ok {
			return
		}
		if pr.Match != last || pr.State != tracker.StateReplicate {
			ok = false
			return
		}
		if ps := h.peers[NodeID(id)]; ps == nil || !ps.alive {
			ok = false
		}
	})
	return ok
}

// quiesceLeader stops ticking leader g and tells its followers to do the same
// with one quiesce heartbeat each, carried in the per-peer batch.
func (h *Host) quiesceLeader(g *group, out *outbox) {
	h.dropNotices(g.id) // the quiesce heartbeat carries the commit index
	bs := g.rn.BasicStatus()
	hb := Heartbeat{
		Group:   g.id,
		Term:    bs.GetTerm(),
		Commit:  bs.GetCommit(),
		Quiesce: true,
		Index:   g.st.cur.lastIndex,
		LogTerm: g.st.cur.lastTerm,
	}
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, _ tracker.Progress) {
		if NodeID(id) != h.id {
			out.heartbeat(NodeID(id), hb)
			h.stats.QuiesceHeartbeatsSent++
		}
	})
	g.quiesced = true
	g.idleTicks = 0
	h.stats.Quiesces++
}

// maybeQuiesceFollower quiesces follower g if the quiesce heartbeat it got
// this round came from its leader in its term, and its log, commit and
// applied index match the leader's. Otherwise it keeps ticking; if the leader
// stays quiesced, g's election timeout eventually wakes the leader (its
// pre-vote is a non-heartbeat message).
func (h *Host) maybeQuiesceFollower(g *group) {
	req := g.quiesceReq
	g.quiesceReq = nil
	if g.err != nil || g.quiesced {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateFollower || NodeID(bs.Lead) != req.from || bs.GetTerm() != req.hb.Term {
		return
	}
	if g.st.cur.lastIndex != req.hb.Index || g.st.cur.lastTerm != req.hb.LogTerm ||
		bs.GetCommit() != req.hb.Commit || g.applied != bs.GetCommit() {
		return
	}
	g.quiesced = true
	g.idleTicks = 0
	h.stats.Quiesces++
}

func (h *Host) unquiesce(g *group) {
	if !g.quiesced {
		return
	}
	g.quiesced = false
	g.idleTicks = 0
	h.stats.Unquiesces++
}

// checkSnapshotSends reports snapshots that did not get through. Raft keeps a
// follower in StateSnapshot, sending it nothing, until the snapshot is
// reported; a delivered snapshot is acknowledged by the follower's append
// response, which moves it on by itself, so only a follower still waiting
// after twice the election timeout is reported failed, and raft sends again.
func (h *Host) checkSnapshotSends(g *group) {
	waiting := make(map[NodeID]bool, len(g.snapSent))
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.State == tracker.StateSnapshot {
			waiting[NodeID(id)] = true
		}
	})
	for p, sent := range g.snapSent {
		switch {
		case !waiting[p]:
			delete(g.snapSent, p)
		case h.ticks-sent > 2*uint64(h.cfg.ElectionTicks):
			delete(g.snapSent, p)
			h.guard(g, "report snapshot", func() { g.rn.ReportSnapshot(uint64(p), raft.SnapshotFailure) })
		}
	}
}

// sendWhich selects the messages of a Ready that queueMessages takes.
type sendWhich int

const (
	sendAll   sendWhich = iota
	sendEarly           // those that may leave before the round's write is durable
	sendLate            // those that must wait for it
)

// afterDurable reports whether m acknowledges state that must be durable
// before anyone hears of it: an append or a vote (raft's msgsAfterAppend).
func afterDurable(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MsgAppResp, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
		return true
	}
	return false
}

// queueMessages puts g's outbound raft messages (those which selects) into
// the round's batches.
func (h *Host) queueMessages(g *group, rd *raft.Ready, out *outbox, which sendWhich) {
	for _, m := range rd.Messages {
		to := NodeID(m.GetTo())
		if to == h.id || to == 0 {
			continue
		}
		if which != sendAll && afterDurable(m) != (which == sendLate) {
			continue
		}
		if m.GetType() == raftpb.MsgSnap {
			g.snapSent[to] = h.ticks
			h.stats.SnapshotsSent++
		}
		if h.cfg.CommitNoticeDelay > 0 && m.GetType() == raftpb.MsgApp {
			// An append without entries is a commit notice (notice.go).
			if len(m.Entries) == 0 {
				h.holdNotice(g.id, m)
				continue
			}
			h.supersedeNotice(g.id, to)
		}
		// A quiesced group that sends anything but a heartbeat response
		// has work again.
		if g.quiesced && m.GetType() != raftpb.MsgHeartbeatResp {
			h.unquiesce(g)
		}
		out.add(g.id, m)
	}
}

// outbox gathers one round's traffic into one Batch per peer.
type outbox struct {
	h  *Host
	to map[NodeID]*Batch
}

func newOutbox(h *Host) *outbox { return &outbox{h: h, to: make(map[NodeID]*Batch)} }

func (o *outbox) batch(to NodeID) *Batch {
	b := o.to[to]
	if b == nil {
		b = &Batch{From: o.h.id, To: to, Incarnation: o.h.incarnation}
		o.to[to] = b
	}
	return b
}

func (o *outbox) add(g GroupID, m *raftpb.Message) {
	b := o.batch(NodeID(m.GetTo()))
	if coalescible(m) {
		hb := heartbeatOf(g, m)
		if !hb.Response && o.h.leaseNanos > 0 {
			// Stamped no later than sent: the lease a response gives
			// errs short.
			hb.Stamp = o.h.stamp()
		}
		b.Heartbeats = append(b.Heartbeats, hb)
		return
	}
	b.Messages = append(b.Messages, GroupMessage{Group: g, Message: m})
}

func (o *outbox) heartbeat(to NodeID, hb Heartbeat) {
	b := o.batch(to)
	b.Heartbeats = append(b.Heartbeats, hb)
}

// flush sends the batches, in peer order. On a tick every member peer gets
// one, empty if need be: the node-level liveness beat.
func (o *outbox) flush(tick bool) {
	h := o.h
	if tick {
		for p, ps := range h.peers {
			if ps.member {
				o.batch(p)
			}
		}
	}
	ids := make([]NodeID, 0, len(o.to))
	for p := range o.to {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	for _, p := range ids {
		b := o.to[p]
		h.stats.BatchesSent++
		h.stats.BatchesSentPerPeer[p]++
		h.stats.MessagesSent += uint64(len(b.Messages))
		h.stats.HeartbeatsSent += uint64(len(b.Heartbeats))
		if b.Empty() {
			h.stats.EmptyBatchesSent++
		}
		h.cfg.Transport.Send(b)
	}
}
