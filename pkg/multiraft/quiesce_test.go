package multiraft

import (
	"fmt"
	"testing"
)

// spreadLeaders creates groups 1..n on every node and has node ids[g%len]
// campaign for group g, then waits until every group is led.
func (c *cluster) spreadLeaders(n int) {
	c.t.Helper()
	for g := GroupID(1); g <= GroupID(n); g++ {
		c.addGroup(g)
	}
	for g := GroupID(1); g <= GroupID(n); g++ {
		if err := c.hosts[c.ids[int(g)%len(c.ids)]].Campaign(g); err != nil {
			c.t.Fatal(err)
		}
	}
	c.runUntil("all groups led", 3000, func() bool {
		for g := GroupID(1); g <= GroupID(n); g++ {
			if c.leader(g) == 0 {
				return false
			}
		}
		return true
	})
}

// allQuiesced reports whether every replica of groups 1..n on live nodes is
// quiesced.
func (c *cluster) allQuiesced(n int) bool {
	for _, id := range c.ids {
		if c.isDown(id) {
			continue
		}
		for g := GroupID(1); g <= GroupID(n); g++ {
			st, err := c.hosts[id].Status(g)
			if err != nil || !st.Quiesced {
				return false
			}
		}
	}
	return true
}

// Idle groups quiesce and then send nothing: every host sends exactly its one
// beat per peer per tick. A proposal wakes its group (and only it); killing
// the host that leads quiesced groups still gets them new leaders.
func TestQuiescence(t *testing.T) {
	const n = 12
	c := newCluster(t, 3, 21, nil)
	c.spreadLeaders(n)
	for g := GroupID(1); g <= n; g++ {
		c.propose(g, fmt.Sprintf("init%d", g))
	}
	c.runUntil("all groups quiesced", 400, func() bool { return c.allQuiesced(n) })

	// Steady idle window.
	const ticks = 20
	before := map[NodeID]HostStats{}
	for _, id := range c.ids {
		before[id] = c.hosts[id].Stats()
	}
	c.run(ticks * c.roundsPerTick)
	for _, id := range c.ids {
		b, a := before[id], c.hosts[id].Stats()
		peers := uint64(len(c.ids) - 1)
		if got := a.BatchesSent - b.BatchesSent; got != ticks*peers {
			t.Errorf("node %d: %d batches in %d ticks, want %d (one beat per peer per tick)", id, got, ticks, ticks*peers)
		}
		if d := a.HeartbeatsSent - b.HeartbeatsSent; d != 0 {
			t.Errorf("node %d: %d heartbeats while idle", id, d)
		}
		if d := a.MessagesSent - b.MessagesSent; d != 0 {
			t.Errorf("node %d: %d raft messages while idle", id, d)
		}
		if a.EmptyBatchesSent-b.EmptyBatchesSent != a.BatchesSent-b.BatchesSent {
			t.Errorf("node %d: non-empty batches while idle", id)
		}
		if a.GroupsQuiesced != n {
			t.Errorf("node %d: %d of %d groups quiesced", id, a.GroupsQuiesced, n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// A proposal wakes group 5 only; it commits and quiesces again.
	lead := c.leader(5)
	ch, err := c.proposeAsync(lead, 5, "wake")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := c.hosts[lead].Status(5); st.Quiesced {
		t.Fatal("proposal did not unquiesce the leader")
	}
	if res := c.waitResult("wake applied", ch, 200); res.err != nil {
		t.Fatal(res.err)
	}
	for _, id := range c.ids {
		if st, _ := c.hosts[id].Status(6); !st.Quiesced {
			t.Fatalf("node %d: group 6 woke up with group 5", id)
		}
	}
	c.runUntil("group 5 quiesced again", 400, func() bool { return c.allQuiesced(n) })
	c.checkSame(5)

	// Kill node 1 while everything is quiesced: the groups it led elect new
	// leaders among 2 and 3 (liveness wakes them), and all keep committing.
	var led []GroupID
	for g := GroupID(1); g <= n; g++ {
		if c.leader(g) == 1 {
			led = append(led, g)
		}
	}
	if len(led) == 0 {
		t.Fatal("node 1 leads no group")
	}
	c.net.setDown(1, true)
	for _, g := range led {
		lead := c.waitLeader(g, 2, 3)
		if lead == 1 {
			t.Fatalf("group %d still led by dead node 1", g)
		}
	}
	for g := GroupID(1); g <= n; g++ {
		c.propose(g, fmt.Sprintf("after%d", g))
	}
	if c.hosts[2].Stats().PeersDown == 0 {
		t.Fatal("node 2 never declared node 1 down")
	}
	// Node 1 returns and catches up.
	c.net.setDown(1, false)
	for g := GroupID(1); g <= n; g++ {
		c.runUntil(fmt.Sprintf("group %d converged", g), 2000, func() bool { return c.converged(g) })
		c.checkSame(g)
	}
}

// A follower whose log does not match the quiesce heartbeat keeps ticking.
func TestFollowerQuiesceNeedsMatchingLog(t *testing.T) {
	c := newCluster(t, 3, 22, func(cfg *Config) { cfg.DisableQuiescence = true })
	c.addGroup(1)
	c.propose(1, "a")
	c.runUntil("converged", 200, func() bool { return c.converged(1) })
	lead := c.leader(1)
	f := c.ids[0]
	if f == lead {
		f = c.ids[1]
	}
	h := c.hosts[f]
	st, _ := h.Status(1)
	ls, _ := c.hosts[lead].Status(1)
	send := func(hb Heartbeat) {
		h.Deliver(&Batch{From: lead, To: f, Heartbeats: []Heartbeat{hb}})
		h.processRound(false)
	}
	// Wrong last index: stays awake.
	send(Heartbeat{Group: 1, Term: ls.Term, Commit: ls.Commit, Quiesce: true, Index: st.LastIndex + 1, LogTerm: ls.Term})
	if st, _ := h.Status(1); st.Quiesced {
		t.Fatal("quiesced with a log that does not match")
	}
	// Wrong term: stays awake.
	send(Heartbeat{Group: 1, Term: ls.Term, Commit: ls.Commit, Quiesce: true, Index: st.LastIndex, LogTerm: ls.Term + 1})
	if st, _ := h.Status(1); st.Quiesced {
		t.Fatal("quiesced with a last term that does not match")
	}
	// Matching: quiesces; a non-quiesce heartbeat wakes it.
	send(Heartbeat{Group: 1, Term: ls.Term, Commit: ls.Commit, Quiesce: true, Index: st.LastIndex, LogTerm: ls.Term})
	if st, _ := h.Status(1); !st.Quiesced {
		t.Fatalf("did not quiesce on a matching quiesce heartbeat: %+v", st)
	}
	send(Heartbeat{Group: 1, Term: ls.Term, Commit: ls.Commit})
	if st, _ := h.Status(1); st.Quiesced {
		t.Fatal("a plain heartbeat did not wake the follower")
	}
}

// A restarted peer (new incarnation) wakes the groups it led, without waiting
// for the liveness timeout.
func TestPeerRestartWakesQuiescedGroups(t *testing.T) {
	c := newCluster(t, 3, 23, nil)
	c.addGroup(1)
	// Hosts grant no votes in their first ElectionTicks ticks, so node 1
	// becomes leader by transfer.
	if lead := c.waitLeader(1); lead != 1 {
		if err := c.hosts[lead].TransferLeader(1, 1); err != nil {
			t.Fatal(err)
		}
		c.runUntil("node 1 leads", 400, func() bool { return c.leader(1) == 1 })
	}
	c.propose(1, "a")
	c.runUntil("quiesced", 400, func() bool { return c.allQuiesced(1) })
	if c.leader(1) != 1 {
		t.Fatalf("leader %d, want 1", c.leader(1))
	}
	c.crash(1, 0)
	c.restart(1, 1)
	c.runUntil("new leader", 400, func() bool { return c.leader(1) != 0 })
	for _, id := range []NodeID{2, 3} {
		if c.hosts[id].Stats().PeersRestarted == 0 {
			t.Fatalf("node %d did not notice node 1's restart", id)
		}
	}
	c.propose(1, "b")
	c.runUntil("converged", 400, func() bool { return c.converged(1) })
	c.checkSame(1)
}
