package multiraft

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// tryLeaseRead is ReadIndex's lease path without blocking: it reports
// whether host id would answer a read of group g from its lease right now,
// and if so the state machine's history at that moment.
func (c *cluster) tryLeaseRead(id NodeID, g GroupID) ([]string, bool) {
	h := c.hosts[id]
	h.mu.Lock()
	defer h.mu.Unlock()
	grp := h.groups[g]
	if grp == nil || grp.err != nil {
		return nil, false
	}
	idx, ok := h.leaseRead(grp)
	if !ok || grp.applied < idx {
		return nil, false
	}
	return c.sms[id][g].history(), true
}

func TestStampContext(t *testing.T) {
	for _, s := range []int64{1, 1 << 40, 1<<63 - 1} {
		if got, ok := stampOf(stampContext(s)); !ok || got != s {
			t.Fatalf("stamp %d: got %d, %v", s, got, ok)
		}
	}
	for _, ctx := range [][]byte{nil, {stampTag}, make([]byte, 16), append([]byte{1}, make([]byte, 8)...), stampContext(0)} {
		if _, ok := stampOf(ctx); ok {
			t.Fatalf("context %x read as a stamp", ctx)
		}
	}
	// A stamped response travels coalesced and gives its stamp back; a
	// ReadIndex response (a 16-byte context) does not.
	resp := &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), Context: stampContext(42)}
	if !coalescible(resp) || heartbeatOf(1, resp).Stamp != 42 {
		t.Fatalf("stamped response not coalesced with its stamp")
	}
	if coalescible(&raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), Context: appendHeader(nil, 1, 2)}) {
		t.Fatal("ReadIndex response coalesced")
	}
	// The stamp rides the heartbeat to raft and back.
	hb := Heartbeat{Group: 1, Term: 2, Commit: 3, Stamp: 77}
	if s, ok := stampOf(hb.toMessage(1, 2).GetContext()); !ok || s != 77 {
		t.Fatal("heartbeat lost its stamp on expansion")
	}
	if len((&Heartbeat{Group: 1, Term: 2, Response: true, Stamp: 77}).toMessage(2, 1).GetContext()) != 0 {
		t.Fatal("a response's stamp reached raft")
	}
}

// A leader cut off from its followers loses its lease before the others can
// elect a new leader and commit, so it never serves a read that misses a
// write acknowledged elsewhere; a leader with a quorum serves reads from its
// lease.
func TestLeaseDeposedLeaderNeverServesStale(t *testing.T) {
	c := newCluster(t, 3, 11, nil)
	c.addGroup(1)
	c.propose(1, "a=1")
	old := c.waitLeader(1)
	c.runUntil("lease on the leader", 200, func() bool {
		_, ok := c.tryLeaseRead(old, 1)
		return ok
	})
	// Followers never serve from a lease.
	for _, id := range c.ids {
		if _, ok := c.tryLeaseRead(id, 1); ok && id != old {
			t.Fatalf("follower %d holds a lease", id)
		}
	}
	c.net.isolate(old, c.ids)
	var others []NodeID
	for _, id := range c.ids {
		if id != old {
			others = append(others, id)
		}
	}
	var ch <-chan proposalResult
	var newLead NodeID
	committed := false
	servedAfterCut := 0
	for round := 0; round < 4000 && !committed; round++ {
		c.step()
		if hist, ok := c.tryLeaseRead(old, 1); ok {
			servedAfterCut++
			if slices.Contains(hist, "a=2") {
				t.Fatal("impossible: the isolated leader applied a=2")
			}
		}
		if ch == nil {
			if newLead = c.leader(1, others...); newLead != 0 {
				var err error
				if ch, err = c.proposeAsync(newLead, 1, "a=2"); err != nil {
					ch = nil
				}
			}
			continue
		}
		select {
		case res := <-ch:
			if res.err != nil {
				ch = nil
				continue
			}
			committed = true
		default:
		}
	}
	if !committed {
		t.Fatalf("the majority never committed a=2\n%s", c.describe())
	}
	// a=2 is acknowledged: from now on the old leader must not serve.
	if _, ok := c.tryLeaseRead(old, 1); ok {
		t.Fatalf("deposed leader %d serves a lease read after a=2 was acknowledged by %d", old, newLead)
	}
	if servedAfterCut == 0 {
		t.Log("the isolated leader's lease lapsed at once")
	}
	st, _ := c.hosts[newLead].Status(1)
	if !st.IsLeader {
		t.Fatal("new leader lost leadership")
	}
	c.runUntil("lease on the new leader", 400, func() bool {
		hist, ok := c.tryLeaseRead(newLead, 1)
		return ok && slices.Contains(hist, "a=2")
	})
}

// Under random faults, partitions and crashes, no host ever serves a read
// from its lease whose state misses a write that was acknowledged before the
// read: the linearizability of lease reads, checked at every round.
func TestLeaseReadsLinearizable(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { leaseChaos(t, seed) })
	}
}

func leaseChaos(t *testing.T, seed uint64) {
	c := newCluster(t, 5, seed, nil)
	rng := rand.New(rand.NewPCG(seed, 7))
	c.addGroup(1)
	c.propose(1, "w0")
	c.net.setFaults(faults{drop: 0.05, dup: 0.02, maxDelay: 3, reorder: true})
	var acked []string // writes acknowledged to their proposer, in order
	type pending struct {
		ch   <-chan proposalResult
		data string
	}
	var inflight []pending
	served, next := 0, 1
	for round := 0; round < 6000; round++ {
		switch r := rng.IntN(1000); {
		case r < 8:
			// Cut a random host (often the leader) off, or heal.
			if lead := c.leader(1); lead != 0 && rng.IntN(2) == 0 {
				c.net.isolate(lead, c.ids)
			} else {
				c.net.isolate(c.ids[rng.IntN(len(c.ids))], c.ids)
			}
		case r < 20:
			c.net.heal()
		case r < 24:
			// kill -9 and restart a host, most often the leader.
			id := c.ids[rng.IntN(len(c.ids))]
			if lead := c.leader(1); lead != 0 && rng.IntN(2) == 0 {
				id = lead
			}
			if !c.isDown(id) {
				c.crash(id, 50)
				c.restart(id, 1)
			}
		}
		if lead := c.leader(1); lead != 0 && len(inflight) < 4 && rng.IntN(3) == 0 {
			data := fmt.Sprintf("w%d", next)
			next++
			if ch, err := c.proposeAsync(lead, 1, data); err == nil {
				inflight = append(inflight, pending{ch, data})
			}
		}
		c.step()
		kept := inflight[:0]
		for _, p := range inflight {
			select {
			case res := <-p.ch:
				if res.err == nil {
					acked = append(acked, p.data)
				}
			default:
				kept = append(kept, p)
			}
		}
		inflight = kept
		for _, id := range c.ids {
			if c.isDown(id) {
				continue
			}
			hist, ok := c.tryLeaseRead(id, 1)
			if !ok {
				continue
			}
			served++
			for _, w := range acked {
				if !slices.Contains(hist, w) {
					t.Fatalf("round %d: host %d served a lease read missing acknowledged write %s\n%s", round, id, w, c.describe())
				}
			}
		}
	}
	if served == 0 || len(acked) == 0 {
		t.Fatalf("the run proves nothing: %d lease reads, %d writes acknowledged", served, len(acked))
	}
	t.Logf("%d lease reads checked against %d acknowledged writes", served, len(acked))
}

// A host that just started refuses to vote for ElectionTicks ticks: it may
// have acknowledged a leader's heartbeat before it restarted.
func TestVotesRefusedAfterStart(t *testing.T) {
	c := newCluster(t, 3, 5, nil)
	c.addGroup(1)
	lead := c.waitLeader(1)
	h := c.hosts[lead]
	if !h.votesAllowed() {
		t.Fatal("a host that elected a leader still refuses votes")
	}
	var follower NodeID
	for _, id := range c.ids {
		if id != lead {
			follower = id
			break
		}
	}
	c.crash(follower, 0)
	c.restart(follower, 1)
	if c.hosts[follower].votesAllowed() {
		t.Fatal("a restarted host grants votes at once")
	}
	c.runUntil("votes allowed again", 400, func() bool { return c.hosts[follower].votesAllowed() })
}

// The lease of a leader whose quorum restarts: followers that acknowledged
// its heartbeats and then restarted have forgotten both their leader and
// their raft clock, so they must not help elect another leader while the old
// one still counts on them. Five hosts: the leader L keeps a quorum through
// P1 and P2 only (its links to P3 and P4 are cut, so those are free to
// vote); then P1 and P2 restart at once and L is cut off entirely.
func TestLeaseSurvivesFollowerRestarts(t *testing.T) {
	violations := 0
	for seed := uint64(1); seed <= 6; seed++ {
		c := newCluster(t, 5, seed, nil)
		c.addGroup(1)
		c.propose(1, "a=1")
		lead := c.waitLeader(1)
		var rest []NodeID
		for _, id := range c.ids {
			if id != lead {
				rest = append(rest, id)
			}
		}
		p1, p2, p3, p4 := rest[0], rest[1], rest[2], rest[3]
		c.net.partition([]NodeID{lead}, []NodeID{p3, p4})
		// Long enough for P3 and P4 to forget L, and for L to renew its
		// lease through P1 and P2.
		c.run(30 * c.roundsPerTick)
		if c.leader(1) != lead {
			t.Fatalf("seed %d: leadership moved while L kept a quorum\n%s", seed, c.describe())
		}
		c.runUntil("lease through P1 and P2", 100, func() bool { _, ok := c.tryLeaseRead(lead, 1); return ok })
		c.crash(p1, 0)
		c.crash(p2, 0)
		c.restart(p1, 1)
		c.restart(p2, 1)
		c.net.isolate(lead, c.ids)
		var ch <-chan proposalResult
		acked := false
		for round := 0; round < 200*c.roundsPerTick; round++ {
			c.step()
			if hist, ok := c.tryLeaseRead(lead, 1); ok && acked && !slices.Contains(hist, "a=2") {
				violations++
				t.Errorf("seed %d: isolated leader %d served a lease read missing a=2", seed, lead)
				break
			}
			if acked {
				continue
			}
			if ch == nil {
				if n := c.leader(1, rest...); n != 0 {
					ch, _ = c.proposeAsync(n, 1, "a=2")
				}
				continue
			}
			select {
			case res := <-ch:
				acked, ch = res.err == nil, nil
			default:
			}
		}
		if !acked {
			t.Fatalf("seed %d: the others never committed a=2\n%s", seed, c.describe())
		}
	}
	if violations > 0 {
		t.Fatalf("%d runs served stale reads", violations)
	}
}
