package multiraft

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Proposals one after another: with commit notices held, the next append
// carries each commit index, so the followers get about half the messages,
// and once the group is idle the last notice still reaches them: every
// replica applies the same history.
func TestCommitNoticesRideOnAppends(t *testing.T) {
	const n = 40
	run := func(delay time.Duration) (sent uint64, saved uint64) {
		c := newCluster(t, 3, 7, func(cfg *Config) { cfg.CommitNoticeDelay = delay })
		c.addGroup(1)
		c.waitLeader(1)
		var want []string
		for i := range n {
			cmd := fmt.Sprintf("k%d=v%d", i, i)
			c.propose(1, cmd)
			want = append(want, cmd)
		}
		c.runUntil("all replicas applied", 200, func() bool { return c.converged(1) })
		if got := c.checkSame(1); !slices.Equal(got, want) {
			t.Fatalf("delay %s: history %v, want %v", delay, got, want)
		}
		for _, h := range c.hosts {
			st := h.Stats()
			sent += st.MessagesSent
			saved += st.CommitNoticesSaved
		}
		return sent, saved
	}
	plain, none := run(0)
	held, saved := run(5 * time.Millisecond)
	t.Logf("raft messages for %d proposals: %d sent at once, %d with notices held (%d notices replaced)", n, plain, held, saved)
	if none != 0 {
		t.Fatalf("%d notices replaced with no delay configured", none)
	}
	if saved < n {
		t.Fatalf("only %d notices replaced by appends over %d proposals", saved, n)
	}
	if held*4 > plain*3 {
		t.Fatalf("%d messages with notices held, %d without: want at least a quarter fewer", held, plain)
	}
}
