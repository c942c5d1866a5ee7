package datanode

import (
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// A data partition's replica that a move takes away stays a voter of the
// partition's Raft group until the map has completed the move
// (membership.Group.KeepLeaving): the new replica aligns from the chain's
// head, and a head outside the group could not confirm its reads. So when
// the map drops this node, the group still counts it, and a quorum may
// need it: a group of four voters (the three of the map and this one)
// with this replica gone loses its quorum to one more failure, and then
// nobody can remove this replica any more. A retiring partition therefore
// keeps its Raft group running, serving no one, while it is a voter, until
// the group's leader has removed it; only then is it closed and deleted: when its own
// configuration shows the removal, or when the master, from the leader's
// report, names it removed (a node that was down while the group removed
// it never hears of its removal).

// raftVoter reports whether the partition's Raft group counts this node
// as a voter in its latest applied configuration, the outgoing one of a
// joint change included. A learner's vote counts for nothing, so a learner
// (a move's new replica, abandoned before its promotion) goes at once.
func (p *partition) raftVoter() bool {
	gs, err := p.h.env.Raft.Status(multiraft.GroupID(p.id))
	return err == nil && gs.Votes(multiraft.NodeID(p.h.env.NodeID))
}

// retire marks the partition retiring (Host.mu is held).
func (p *partition) retire() {
	if !p.retiring.Swap(true) {
		p.log.Info("data partition left the map; its replica stays a Raft member until the group removes it")
	}
}

// checkRetired runs on a retiring partition's maintenance goroutine: it
// hands Raft leadership to another voter if this replica leads, and once
// the group no longer counts this node as a voter, has the host close and
// delete the partition.
func (p *partition) checkRetired() {
	gs, err := p.h.env.Raft.Status(multiraft.GroupID(p.id))
	self := multiraft.NodeID(p.h.env.NodeID)
	if err == nil && gs.Votes(self) {
		if gs.IsLeader {
			// To a voter of the incoming configuration: the one the
			// group keeps.
			for _, v := range gs.Voters {
				if v != self && gs.Active[v] {
					if err := p.h.env.Raft.TransferLeader(multiraft.GroupID(p.id), v); err != nil {
						p.log.Debug("retiring replica hands over leadership", "to", v, "err", err)
					}
					break
				}
			}
		}
		return
	}
	go p.h.closeRetired(p)
}

// closeRetired closes retiring partition p and deletes its state (the map
// and the group both no longer have it, and the master, which names moved
// partitions from what a node reports, will not name a closed one).
func (h *Host) closeRetired(p *partition) {
	if !h.closeRetiring(p) {
		return
	}
	if err := h.Remove([]uint64{p.id}); err != nil {
		p.log.Warn("delete retired data partition", "err", err)
	}
}

// closeRetiring closes retiring partition p and reports whether it did:
// not if it was assigned here again, or closed, meanwhile.
func (h *Host) closeRetiring(p *partition) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.parts[p.id] != p || !p.retiring.Load() {
		return false
	}
	delete(h.parts, p.id)
	if err := p.close(); err != nil {
		// Deleted all the same: nothing has it any more.
		p.log.Warn("close retired data partition", "err", err)
	}
	p.log.Info("data partition closed: its Raft group no longer counts this replica")
	return true
}
