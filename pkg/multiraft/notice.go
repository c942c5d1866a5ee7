package multiraft

import (
	"cmp"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Commit notices. When a leader's commit index advances, raft sends every
// follower an append at once, with no entries when there are none new, only
// to tell it the new index; the follower answers it like any append. Under
// load the next append with entries follows a moment later and carries the
// same index, so each entry cost every follower two messages (the empty
// append and its answer) and a processing round it did not need: with three
// replicas, half of a write's Raft messages.
//
// With Config.CommitNoticeDelay set, the host holds such an empty append
// (a commit notice) for up to that long. An append with entries to the same
// follower in the same group replaces it: raft's appends carry the leader's
// commit index, which never decreases. A notice still held when the delay
// has passed is sent as it was. Why this is safe:
//
//   - Raft tolerates delayed and lost messages; the leader's commit, its
//     answers to proposers and its lease reads never wait for a notice.
//   - A held notice is never sent after an append that superseded it (it is
//     dropped), so followers see appends in the order raft sent them.
//   - Progress never stalls on a held notice: it is sent within the delay,
//     and the host wakes itself to send it when nothing else happens.
//   - A group that quiesces drops its held notices: the quiesce heartbeat
//     carries the commit index, and a notice sent later would wake it.
//   - A notice from a term this host no longer leads is dropped.
//
// What it costs: a follower of a group that goes idle learns the last
// commit index, and applies the last entries, up to the delay later.

// noticeKey names the follower of a group a notice is held for.
type noticeKey struct {
	group GroupID
	to    NodeID
}

// heldNotice is an empty append being held, since when.
type heldNotice struct {
	m     *raftpb.Message
	since time.Time
}

// holdNotice holds m, an empty append of group g, replacing an older one
// held for the same follower (it keeps the older one's time, so that a
// stream of notices cannot hold the index back for longer than the delay).
// Called with mu held.
func (h *Host) holdNotice(g GroupID, m *raftpb.Message) {
	k := noticeKey{group: g, to: NodeID(m.GetTo())}
	n, ok := h.notices[k]
	if !ok {
		n.since = h.cfg.Now()
	}
	n.m = m
	h.notices[k] = n
	h.stats.CommitNoticesHeld++
	h.armNoticeTimer()
}

// supersedeNotice drops the notice held for follower to of group g: an
// append with entries is being sent there. Called with mu held.
func (h *Host) supersedeNotice(g GroupID, to NodeID) {
	k := noticeKey{group: g, to: to}
	if _, ok := h.notices[k]; ok {
		delete(h.notices, k)
		h.stats.CommitNoticesSaved++
	}
}

// dropNotices drops every notice held for group g. Called with mu held.
func (h *Host) dropNotices(g GroupID) {
	for k := range h.notices {
		if k.group == g {
			delete(h.notices, k)
		}
	}
}

// releaseNotices adds to out the notices held for the delay or longer, in
// a fixed order, and drops those of groups gone or no longer led in the
// notice's term. Called with mu held, before out is flushed.
func (h *Host) releaseNotices(out *outbox) {
	if len(h.notices) == 0 {
		return
	}
	now := h.cfg.Now()
	var due []noticeKey
	for k, n := range h.notices {
		if now.Sub(n.since) >= h.cfg.CommitNoticeDelay {
			due = append(due, k)
		}
	}
	slices.SortFunc(due, func(a, b noticeKey) int {
		if c := cmp.Compare(a.group, b.group); c != 0 {
			return c
		}
		return cmp.Compare(a.to, b.to)
	})
	for _, k := range due {
		n := h.notices[k]
		delete(h.notices, k)
		g := h.groups[k.group]
		if g == nil || g.err != nil {
			continue
		}
		bs := g.rn.BasicStatus()
		if bs.RaftState != raft.StateLeader || bs.GetTerm() != n.m.GetTerm() {
			continue
		}
		out.add(k.group, n.m)
	}
	if len(h.notices) > 0 {
		h.armNoticeTimer()
	}
}

// armNoticeTimer makes sure a round runs once the delay has passed, so that
// a held notice goes out when nothing else wakes the host.
func (h *Host) armNoticeTimer() {
	if h.noticeArmed.CompareAndSwap(false, true) {
		time.AfterFunc(h.cfg.CommitNoticeDelay, func() {
			h.noticeArmed.Store(false)
			h.wake()
		})
	}
}
