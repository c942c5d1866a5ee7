package multiraft

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Three hosts, one group: a leader is elected, proposals apply in the same
// order everywhere and their results come back to the proposer.
func TestElectionAndProposals(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) { testElectionAndProposals(t, batched) })
	}
}

// testElectionAndProposals runs with Apply, or with ApplyBatch (batched):
// the proposers get the same results either way, and a round of
// concurrent proposals applies as one batch.
func testElectionAndProposals(t *testing.T, batched bool) {
	c := newCluster(t, 3, 1, nil)
	c.batched = batched
	c.addGroup(1)
	lead := c.waitLeader(1)

	// A follower refuses fast and names the leader.
	follower := c.ids[0]
	if follower == lead {
		follower = c.ids[1]
	}
	_, err := c.proposeAsync(follower, 1, "x=1")
	var nle *NotLeaderError
	if !errors.As(err, &nle) || !errors.Is(err, ErrNotLeader) || nle.Leader != lead {
		t.Fatalf("propose on follower: got %v, want NotLeaderError naming %d", err, lead)
	}

	// Many proposals in flight at once, all in one round.
	var chans []<-chan proposalResult
	var want []string
	for i := range 20 {
		cmd := fmt.Sprintf("k%d=v%d", i, i)
		ch, err := c.proposeAsync(lead, 1, cmd)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
		want = append(want, cmd)
	}
	for i, ch := range chans {
		res := c.waitResult(want[i], ch, 200)
		if res.err != nil || res.val != i+1 {
			t.Fatalf("proposal %d: result %v, %v; want %d", i, res.val, res.err, i+1)
		}
	}
	// An Apply error is the command's outcome, not the group's failure.
	ch, _ := c.proposeAsync(lead, 1, "fail-me")
	if res := c.waitResult("failing command", ch, 200); res.err == nil {
		t.Fatal("Apply error was not returned to the proposer")
	}
	want = append(want, "fail-me")
	c.runUntil("all replicas applied", 200, func() bool { return c.converged(1) })
	if got := c.checkSame(1); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	st := c.hosts[lead].Stats()
	if st.SyncCommits == 0 || st.BatchesSent == 0 {
		t.Fatalf("stats not counted: %+v", st)
	}
	if batched {
		if sm, ok := c.hosts[lead].groups[1].sm.(*batchKV); !ok || sm.multi.Load() == 0 {
			t.Fatal("20 proposals in one round never applied as one batch")
		}
	}
}

// The leader's host goes away: the others elect a new leader and keep every
// committed entry; the old leader comes back as a follower and catches up.
func TestLeaderLossAndRejoin(t *testing.T) {
	c := newCluster(t, 3, 2, nil)
	c.addGroup(1)
	for i := range 5 {
		c.propose(1, fmt.Sprintf("a%d", i))
	}
	old := c.waitLeader(1)
	c.net.setDown(old, true)
	var rest []NodeID
	for _, id := range c.ids {
		if id != old {
			rest = append(rest, id)
		}
	}
	newLead := c.waitLeader(1, rest...)
	if newLead == old {
		t.Fatalf("leader %d still leads while down", old)
	}
	for i := range 5 {
		c.propose(1, fmt.Sprintf("b%d", i))
	}
	c.net.setDown(old, false)
	c.runUntil("old leader caught up", 2000, func() bool {
		st, _ := c.hosts[old].Status(1)
		return c.converged(1) && st.Leader == newLead && !st.IsLeader
	})
	h := c.checkSame(1)
	if len(h) != 10 {
		t.Fatalf("history %v: want 10 entries", h)
	}
}

// A leader cut off in a minority cannot commit; the majority elects its own
// leader and commits; after healing, everyone converges on the majority's log
// and the minority leader's proposal fails (outcome unknown, here: lost).
func TestPartitionMinorityLeader(t *testing.T) {
	c := newCluster(t, 5, 3, nil)
	c.addGroup(1)
	c.propose(1, "before")
	old := c.waitLeader(1)
	var minority, majority []NodeID
	minority = append(minority, old)
	for _, id := range c.ids {
		if id == old {
			continue
		}
		if len(minority) < 2 {
			minority = append(minority, id)
		} else {
			majority = append(majority, id)
		}
	}
	c.net.partition(minority, majority)
	stale, err := c.proposeAsync(old, 1, "minority")
	if err != nil {
		t.Fatalf("old leader refused proposal at once: %v", err)
	}
	newLead := c.waitLeader(1, majority...)
	if !slices.Contains(majority, newLead) {
		t.Fatalf("leader %d is not in the majority %v", newLead, majority)
	}
	ch, err := c.proposeAsync(newLead, 1, "majority")
	if err != nil {
		t.Fatal(err)
	}
	if res := c.waitResult("majority commit", ch, 500); res.err != nil {
		t.Fatal(res.err)
	}
	// CheckQuorum makes the stranded leader step down: its proposal fails.
	res := c.waitResult("stale proposal failed", stale, 2000)
	if !errors.Is(res.err, ErrLeadershipLost) {
		t.Fatalf("minority proposal: got %v, %v; want ErrLeadershipLost", res.val, res.err)
	}
	st, _ := c.hosts[old].Status(1)
	if st.IsLeader {
		t.Fatal("minority leader did not step down")
	}
	c.net.heal()
	c.runUntil("convergence after heal", 2000, func() bool { return c.converged(1) && c.leader(1) != 0 })
	h := c.checkSame(1)
	if !slices.Equal(h, []string{"before", "majority"}) {
		t.Fatalf("history %v", h)
	}
}

// Drop, duplicate, delay and reorder batches, cut hosts off and back, kill -9
// and restart hosts, over many rounds and several groups: replicas converge to
// identical states and every acknowledged proposal is applied exactly once.
func TestChaosConverges(t *testing.T) {
	for _, seed := range []uint64{11, 12, 13, 14, 15, 16} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { testChaos(t, seed) })
	}
}

func testChaos(t *testing.T, seed uint64) {
	c := newCluster(t, 3, seed, func(cfg *Config) { cfg.SnapshotEntries = 25 })
	c.batched = seed%2 == 0 // half the seeds apply through ApplyBatch
	groups := []GroupID{1, 2, 3}
	for _, g := range groups {
		c.addGroup(g)
	}
	c.net.setFaults(faults{drop: 0.1, dup: 0.05, maxDelay: 3, reorder: true})
	rng := c.net.rng
	type pending struct {
		cmd string
		ch  <-chan proposalResult
	}
	var inflight []pending
	acked := map[GroupID][]string{}
	// Schedule: kill -9 a random host at rounds 200 and 1600 (back 60
	// rounds later); isolate a random host every other 150 rounds; rounds
	// 900-1299 have no proposals and no partitions (only message faults), so
	// groups quiesce and wake under faults too.
	idle := func(round int) bool { return round >= 900 && round < 1300 }
	var isolated, crashed NodeID
	for round := range 2000 {
		switch round {
		case 200, 1600:
			crashed = c.ids[rng.IntN(len(c.ids))]
			c.crash(crashed, []int{0, 50}[rng.IntN(2)])
		case 260, 1660:
			c.restart(crashed, groups...)
			crashed = 0
		}
		if round%150 == 75 || round == 900 {
			if isolated != 0 {
				c.net.heal()
				isolated = 0
			} else if !idle(round) {
				isolated = c.ids[rng.IntN(len(c.ids))]
				c.net.isolate(isolated, c.ids)
			}
		}
		if round%3 == 0 && !idle(round) {
			g := groups[rng.IntN(len(groups))]
			if lead := c.leader(g); lead != 0 {
				cmd := fmt.Sprintf("g%d-r%d", g, round)
				if ch, err := c.proposeAsync(lead, g, cmd); err == nil {
					inflight = append(inflight, pending{cmd, ch})
				}
			}
		}
		c.step()
		kept := inflight[:0]
		for _, p := range inflight {
			select {
			case res := <-p.ch:
				if res.err == nil {
					var g GroupID
					fmt.Sscanf(p.cmd, "g%d-", &g)
					acked[g] = append(acked[g], p.cmd)
				} else if !errors.Is(res.err, ErrLeadershipLost) && !errors.Is(res.err, ErrStopped) {
					t.Fatalf("proposal %s: unexpected error %v", p.cmd, res.err)
				}
			default:
				kept = append(kept, p)
			}
		}
		inflight = kept
	}
	c.net.heal()
	c.net.setFaults(faults{})
	for _, g := range groups {
		c.runUntil(fmt.Sprintf("group %d converged", g), 3000, func() bool { return c.leader(g) != 0 && c.converged(g) })
	}
	total := 0
	for _, g := range groups {
		h := c.checkSame(g)
		seen := map[string]int{}
		for _, cmd := range h {
			seen[cmd]++
			if seen[cmd] > 1 {
				t.Fatalf("group %d: %s applied twice", g, cmd)
			}
		}
		for _, cmd := range acked[g] {
			if seen[cmd] != 1 {
				t.Fatalf("group %d: acknowledged %s missing from history", g, cmd)
			}
		}
		total += len(acked[g])
	}
	if total < 100 {
		t.Fatalf("only %d proposals acknowledged; the test exercised too little", total)
	}
	var snaps, quiesces uint64
	for _, id := range c.ids {
		snaps += c.hosts[id].Stats().SnapshotsTaken
		quiesces += c.hosts[id].Stats().Quiesces
	}
	if snaps == 0 || quiesces == 0 {
		t.Fatalf("%d snapshots taken, %d quiesces: the test exercised too little", snaps, quiesces)
	}
}

// Restart from Pebble after kill -9 (only synced data survives, or synced
// data plus a random part of the rest): state machines are rebuilt from the
// stored snapshot plus log replay and match the state before the crash.
func TestCrashRestart(t *testing.T) {
	for _, pct := range []int{0, 50} {
		t.Run(fmt.Sprintf("unsynced%d", pct), func(t *testing.T) {
			c := newCluster(t, 3, 4, func(cfg *Config) { cfg.SnapshotEntries = 8 })
			c.addGroup(1)
			c.addGroup(2)
			for i := range 30 {
				c.propose(1, fmt.Sprintf("k%d=%d", i, i))
				if i%3 == 0 {
					c.propose(2, fmt.Sprintf("j%d=%d", i, i))
				}
			}
			c.runUntil("converged", 500, func() bool { return c.converged(1) && c.converged(2) })
			want1, want2 := c.checkSame(1), c.checkSame(2)
			for _, id := range c.ids {
				if c.hosts[id].Stats().SnapshotsTaken == 0 {
					t.Fatalf("node %d took no snapshot", id)
				}
				c.crash(id, pct)
			}
			for _, id := range c.ids {
				c.restart(id, 1, 2)
				// Replay alone (no network) restores the state up to the
				// persisted commit index.
				st, err := c.hosts[id].Status(1)
				if err != nil || st.Applied != st.SnapshotIndex || st.SnapshotIndex == 0 {
					t.Fatalf("node %d: after reopen: %+v %v", id, st, err)
				}
			}
			c.runUntil("re-elected and converged", 3000, func() bool {
				return c.leader(1) != 0 && c.leader(2) != 0 && c.converged(1) && c.converged(2)
			})
			if got := c.checkSame(1); !slices.Equal(got, want1) {
				t.Fatalf("group 1 after restart: %v, want %v", got, want1)
			}
			if got := c.checkSame(2); !slices.Equal(got, want2) {
				t.Fatalf("group 2 after restart: %v, want %v", got, want2)
			}
			c.propose(1, "after")
			c.runUntil("converged", 500, func() bool { return c.converged(1) })
			c.checkSame(1)
		})
	}
}

// A single host reopened cleanly replays its log into a fresh state machine
// before any network traffic.
func TestReopenReplaysLog(t *testing.T) {
	c := newCluster(t, 1, 5, func(cfg *Config) { cfg.SnapshotEntries = 7 })
	c.addGroup(1)
	for i := range 17 {
		c.propose(1, fmt.Sprintf("k%d=%d", i, i))
	}
	want := c.checkSame(1)
	c.hosts[1].Stop()
	if err := c.dbs[1].Close(); err != nil {
		t.Fatal(err)
	}
	c.restart(1, 1)
	c.run(3)
	st, err := c.hosts[1].Status(1)
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotIndex == 0 || st.Applied <= st.SnapshotIndex {
		t.Fatalf("expected snapshot plus replayed entries: %+v", st)
	}
	if got := c.sms[1][1].history(); !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// A follower far behind gets a snapshot; log entries below a snapshot are gone
// from the DB.
func TestSnapshotCatchUpAndTruncation(t *testing.T) {
	c := newCluster(t, 3, 6, func(cfg *Config) { cfg.SnapshotEntries = 10 })
	c.addGroup(1)
	lead := c.waitLeader(1)
	lag := c.ids[0]
	if lag == lead {
		lag = c.ids[1]
	}
	c.net.setDown(lag, true)
	for i := range 45 {
		c.propose(1, fmt.Sprintf("k%d=%d", i, i))
	}
	st, _ := c.hosts[lead].Status(1)
	if st.SnapshotIndex < 40 {
		t.Fatalf("leader snapshot at %d, want >= 40", st.SnapshotIndex)
	}
	checkNoEntriesBelow(t, c, lead, 1, st.FirstIndex)

	c.net.setDown(lag, false)
	// Crash the follower right after the round that installed the snapshot:
	// it acknowledged the snapshot, so the snapshot must already be durable.
	c.runUntil("snapshot installed", 2000, func() bool { return c.hosts[lag].Stats().SnapshotsApplied > 0 })
	c.crash(lag, 0)
	c.restart(lag, 1)
	c.runUntil("lagging follower caught up", 2000, func() bool { return c.converged(1) })
	c.checkSame(1)
	lst, _ := c.hosts[lag].Status(1)
	if lst.Err != nil {
		t.Fatal(lst.Err)
	}
	if lst.SnapshotIndex < st.SnapshotIndex {
		t.Fatalf("follower snapshot %d, leader's %d", lst.SnapshotIndex, st.SnapshotIndex)
	}
	checkNoEntriesBelow(t, c, lag, 1, lst.FirstIndex)
}

// checkNoEntriesBelow scans node id's DB for g's entries: the first must be at
// first, and there must be no others below it.
func checkNoEntriesBelow(t *testing.T, c *cluster, id NodeID, g GroupID, first uint64) {
	t.Helper()
	it, err := c.dbs[id].NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	lo, hi := entryKey(g, 0), kindKey(g, kindEntry+1)
	n := 0
	for ok := it.SeekGE(lo); ok && string(it.Key()) < string(hi); ok = it.Next() {
		idx := entryIndexOf(it.Key())
		if n == 0 && idx != first {
			t.Fatalf("node %d: first stored entry %d, want %d", id, idx, first)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("node %d: no entries stored", id)
	}
}

// clusterWithNewReplica starts group 1 on hosts 1 to 3 with n proposals
// committed, and an empty replica of it on a new host 4 that is no member
// yet; it returns the cluster and group 1's leader.
func clusterWithNewReplica(t *testing.T, seed uint64, n int) (*cluster, NodeID) {
	t.Helper()
	c := newCluster(t, 3, seed, nil)
	c.addGroup(1)
	for i := range n {
		c.propose(1, fmt.Sprintf("a%d", i))
	}
	c.addNode(4)
	c.addReplica(4, 1, nil)
	return c, c.waitLeader(1, 1, 2, 3)
}

// Adding a fourth replica (it starts empty and gets a snapshot), then removing
// one of the original three.
func TestConfChangeAddRemove(t *testing.T) {
	c, lead := clusterWithNewReplica(t, 7, 5)
	ch := c.confChangeAsync(lead, 1, &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(4)})
	if err := c.waitErr("add node 4", ch); err != nil {
		t.Fatal(err)
	}
	// A second change while nothing is pending goes through; one racing the
	// first is refused by raft, which the host reports.
	c.propose(1, "with4")
	c.runUntil("node 4 caught up", 1000, func() bool { return c.converged(1) })
	c.checkSame(1)
	st, _ := c.hosts[4].Status(1)
	if !slices.Equal(st.Voters, []NodeID{1, 2, 3, 4}) {
		t.Fatalf("voters on node 4: %v", st.Voters)
	}

	// Remove a follower.
	lead = c.waitLeader(1)
	victim := NodeID(1)
	if victim == lead {
		victim = 2
	}
	ch = c.confChangeAsync(lead, 1, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{
		{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(uint64(victim))},
	}})
	if err := c.waitErr("remove node", ch); err != nil {
		t.Fatal(err)
	}
	if err := c.hosts[victim].RemoveGroup(1, true); err != nil {
		t.Fatal(err)
	}
	var rest []NodeID
	for _, id := range c.ids {
		if id != victim {
			rest = append(rest, id)
		}
	}
	c.propose(1, "without")
	c.runUntil("converged without victim", 1000, func() bool { return c.converged(1, rest...) })
	h := c.checkSame(1, rest...)
	if h[len(h)-1] != "without" {
		t.Fatalf("history %v", h)
	}
	for _, id := range rest {
		st, _ := c.hosts[id].Status(1)
		if slices.Contains(st.Voters, victim) || len(st.Voters) != 3 {
			t.Fatalf("node %d voters %v", id, st.Voters)
		}
	}
	// The destroyed replica left nothing in its DB.
	it, _ := c.dbs[victim].NewIter(nil)
	defer it.Close()
	start, end := groupSpan(1)
	if it.SeekGE(start) && string(it.Key()) < string(end) {
		t.Fatalf("node %d still stores %q", victim, it.Key())
	}

	// Two changes at once: the second is rejected while the first is pending.
	lead = c.waitLeader(1, rest...)
	ch1 := c.confChangeAsync(lead, 1, &raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(9)})
	ch2 := c.confChangeAsync(lead, 1, &raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(8)})
	if err := c.waitErr("first change", ch1); err != nil {
		t.Fatal(err)
	}
	if err := c.waitErr("second change", ch2); !errors.Is(err, ErrConfChangeRejected) {
		t.Fatalf("racing conf change: %v, want ErrConfChangeRejected", err)
	}
}

// A replica replaced in one joint change (add 4, remove 3): while joint,
// Status names both configurations and Members and Votes count node 3;
// the group goes on with nodes 3 and 4 both down (each configuration keeps
// a majority, where four voters would have lost theirs); leaving the joint
// configuration drops node 3.
func TestJointReplace(t *testing.T) {
	c, lead := clusterWithNewReplica(t, 12, 1)
	if lead == 3 {
		if err := c.hosts[3].TransferLeader(1, 1); err != nil {
			t.Fatal(err)
		}
		c.runUntil("node 1 leads", 1000, func() bool { return c.leader(1, 1, 2, 3) == 1 })
		lead = 1
	}
	learner := &raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(4)}
	if err := c.waitErr("add learner 4", c.confChangeAsync(lead, 1, learner)); err != nil {
		t.Fatal(err)
	}
	replace := &raftpb.ConfChangeV2{
		Transition: raftpb.ConfChangeTransitionJointExplicit.Enum(),
		Changes: []*raftpb.ConfChangeSingle{
			{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(4)},
			{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(3)},
		},
	}
	if err := c.waitErr("replace 3 with 4", c.confChangeAsync(lead, 1, replace)); err != nil {
		t.Fatal(err)
	}
	st, _ := c.hosts[lead].Status(1)
	voters, _ := st.Members()
	if !slices.Equal(st.Voters, []NodeID{1, 2, 4}) || !slices.Equal(st.VotersOutgoing, []NodeID{1, 2, 3}) ||
		!slices.Equal(voters, []uint64{1, 2, 3, 4}) || !st.Votes(3) || !st.Votes(4) {
		t.Fatalf("joint status: voters %v outgoing %v members %v", st.Voters, st.VotersOutgoing, voters)
	}
	c.net.setDown(3, true)
	c.net.setDown(4, true)
	c.propose(1, "both ends down")
	if err := c.waitErr("leave joint", c.confChangeAsync(c.waitLeader(1, 1, 2), 1, &raftpb.ConfChangeV2{})); err != nil {
		t.Fatal(err)
	}
	st, _ = c.hosts[c.waitLeader(1, 1, 2)].Status(1)
	if !slices.Equal(st.Voters, []NodeID{1, 2, 4}) || len(st.VotersOutgoing) != 0 || st.Votes(3) {
		t.Fatalf("after leaving: voters %v outgoing %v", st.Voters, st.VotersOutgoing)
	}
}

// A heartbeat sent to an earlier replica of a group under this node's id
// (removed while its host was down, added back empty since; the heartbeat
// waited in the leader's queue until the link came back) names a commit
// index beyond the new replica's empty log. Raft would panic on it and the
// group fail for good; it is dropped, and the replica catches up as a
// learner as usual.
func TestStaleHeartbeatToANewReplica(t *testing.T) {
	c, lead := clusterWithNewReplica(t, 13, 4)
	st, _ := c.hosts[lead].Status(1)
	before := c.hosts[4].Stats()
	c.hosts[4].Deliver(&Batch{From: lead, To: 4, Heartbeats: []Heartbeat{{Group: 1, Term: st.Term, Commit: st.Commit}}})
	c.hosts[4].processRound(false)
	if got, _ := c.hosts[4].Status(1); got.Err != nil {
		t.Fatalf("the new replica failed: %v", got.Err)
	}
	if d := c.hosts[4].Stats().DroppedStale - before.DroppedStale; d != 1 {
		t.Fatalf("stale heartbeats dropped: %d, want 1", d)
	}
	learner := &raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(4)}
	if err := c.waitErr("add learner 4", c.confChangeAsync(lead, 1, learner)); err != nil {
		t.Fatal(err)
	}
	c.propose(1, "with 4")
	c.runUntil("node 4 caught up", 1000, func() bool { return c.converged(1) })
	c.checkSame(1)
}

// A member removed while its replica stays (a replica move abandoned after
// it removed its leaving node, which the cluster map still lists) is added
// back as a learner, catches up with what it missed, is promoted and can
// lead the group again.
func TestRemovedMemberAddedBack(t *testing.T) {
	c := newCluster(t, 3, 11, nil)
	c.addGroup(1)
	c.propose(1, "before")
	lead := c.waitLeader(1)
	victim := NodeID(1)
	if victim == lead {
		victim = 2
	}
	remove := &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(uint64(victim))}
	if err := c.waitErr("remove", c.confChangeAsync(lead, 1, remove)); err != nil {
		t.Fatal(err)
	}
	c.propose(1, "while out")
	for _, cc := range []*raftpb.ConfChange{
		{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(uint64(victim))},
		{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(uint64(victim))},
	} {
		lead = c.waitLeader(1)
		if err := c.waitErr(cc.GetType().String(), c.confChangeAsync(lead, 1, cc)); err != nil {
			t.Fatal(err)
		}
	}
	c.propose(1, "back")
	c.runUntil("the member back in step", 1000, func() bool { return c.converged(1) })
	if h := c.checkSame(1); !slices.Equal(h, []string{"before", "while out", "back"}) {
		t.Fatalf("history %v", h)
	}
	for _, id := range c.ids {
		if st, _ := c.hosts[id].Status(1); !slices.Contains(st.Voters, victim) || len(st.Voters) != 3 {
			t.Fatalf("node %d voters %v", id, st.Voters)
		}
	}
	lead = c.waitLeader(1)
	if err := c.hosts[lead].TransferLeader(1, victim); err != nil {
		t.Fatal(err)
	}
	c.runUntil("the member back leads", 1000, func() bool { return c.leader(1) == victim })
}

func (c *cluster) confChangeAsync(id NodeID, g GroupID, cc raftpb.ConfChangeI) <-chan proposalResult {
	c.t.Helper()
	ch, _, err := c.hosts[id].proposeConf(g, cc)
	if err != nil {
		c.t.Fatalf("node %d: propose conf change: %v", id, err)
	}
	return ch
}

func (c *cluster) waitErr(what string, ch <-chan proposalResult) error {
	c.t.Helper()
	return c.waitResult(what, ch, 1000).err
}

// 100 groups on 3 hosts: all elect, all commit.
func TestManyGroups(t *testing.T) {
	c := newCluster(t, 3, 8, nil)
	const n = 100
	for g := GroupID(1); g <= n; g++ {
		c.addGroup(g)
	}
	// Spread leadership: each host campaigns for a third of the groups.
	for g := GroupID(1); g <= n; g++ {
		if err := c.hosts[c.ids[int(g)%3]].Campaign(g); err != nil {
			t.Fatal(err)
		}
	}
	c.runUntil("all groups led", 2000, func() bool {
		for g := GroupID(1); g <= n; g++ {
			if c.leader(g) == 0 {
				return false
			}
		}
		return true
	})
	var chans []<-chan proposalResult
	for g := GroupID(1); g <= n; g++ {
		ch, err := c.proposeAsync(c.leader(g), g, fmt.Sprintf("g%d", g))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		if res := c.waitResult("proposal", ch, 500); res.err != nil {
			t.Fatalf("group %d: %v", i+1, res.err)
		}
	}
	c.runUntil("all converged", 1000, func() bool {
		for g := GroupID(1); g <= n; g++ {
			if !c.converged(g) {
				return false
			}
		}
		return true
	})
	leaders := map[NodeID]int{}
	for g := GroupID(1); g <= n; g++ {
		if h := c.checkSame(g); len(h) != 1 {
			t.Fatalf("group %d history %v", g, h)
		}
		leaders[c.leader(g)]++
	}
	if len(leaders) != 3 {
		t.Fatalf("leadership not spread: %v", leaders)
	}
	// One round of a tick with 100 active groups still sends one batch per peer.
	before := c.hosts[1].Stats()
	c.stepWith(true)
	after := c.hosts[1].Stats()
	if d := after.BatchesSent - before.BatchesSent; d != 2 {
		t.Fatalf("tick round sent %d batches, want 2 (one per peer)", d)
	}
}
