package multiraft

import (
	"fmt"
	"testing"
)

// idleCluster builds 3 hosts with n groups, leadership spread, one entry
// committed per group, and (with quiescence on) waits until every replica is
// quiesced. Every round is a tick, so all traffic of a tick is one round's.
func idleCluster(tb testing.TB, n int, quiesce bool) *cluster {
	c := newCluster(tb, 3, 99, func(cfg *Config) { cfg.DisableQuiescence = !quiesce })
	c.roundsPerTick = 1
	c.spreadLeaders(n)
	var chans []<-chan proposalResult
	for g := GroupID(1); g <= GroupID(n); g++ {
		ch, err := c.proposeAsync(c.leader(g), g, "x")
		if err != nil {
			tb.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for _, ch := range chans {
		if res := c.waitResult("proposal", ch, 200); res.err != nil {
			tb.Fatal(res.err)
		}
	}
	if quiesce {
		c.runUntil("all quiesced", 200, func() bool { return c.allQuiesced(n) })
	} else {
		c.run(20)
	}
	return c
}

// trafficSince returns transport messages per directed node pair per tick and
// coalesced heartbeats carried per tick (all hosts) since before.
func (c *cluster) trafficSince(before map[NodeID]HostStats, ticks int) (perPairTick, hbPerTick float64) {
	var batches, hbs uint64
	for _, id := range c.ids {
		a := c.hosts[id].Stats()
		batches += a.BatchesSent - before[id].BatchesSent
		hbs += a.HeartbeatsSent - before[id].HeartbeatsSent
	}
	pairs := len(c.ids) * (len(c.ids) - 1)
	return float64(batches) / float64(pairs) / float64(ticks), float64(hbs) / float64(ticks)
}

func (c *cluster) statsNow() map[NodeID]HostStats {
	m := map[NodeID]HostStats{}
	for _, id := range c.ids {
		m[id] = c.hosts[id].Stats()
	}
	return m
}

// BenchmarkHeartbeatsPerPair measures, during a steady idle window after
// elections, how many transport messages each node pair exchanges per tick
// (msgs/pair/tick, per direction) and how many heartbeats those carry
// (hb/tick, all hosts), for 1 to 1000 groups on 3 hosts. With quiescence the
// first stays 1 (the node-level beat) and the second 0; without it
// (active/...) coalescing still keeps one message per pair per tick while the
// heartbeats inside grow with the group count. One op is one tick. Run with a
// fixed count, e.g. -benchtime=200x: the setup elects up to 1000 groups.
func BenchmarkHeartbeatsPerPair(b *testing.B) {
	for _, mode := range []string{"quiesced", "active"} {
		for _, n := range []int{1, 10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/N=%d", mode, n), func(b *testing.B) {
				c := idleCluster(b, n, mode == "quiesced")
				before := c.statsNow()
				b.ResetTimer()
				for range b.N {
					c.stepWith(true)
				}
				b.StopTimer()
				perPair, hb := c.trafficSince(before, b.N)
				b.ReportMetric(perPair, "msgs/pair/tick")
				b.ReportMetric(hb, "hb/tick")
			})
		}
	}
}

// The property the benchmark shows, enforced: idle traffic per node pair is
// one message per tick whatever the group count; quiesced groups carry no
// heartbeats; active ones are coalesced into that same message.
func TestHeartbeatTrafficPerPairIsConstant(t *testing.T) {
	for _, n := range []int{1, 200} {
		for _, quiesce := range []bool{true, false} {
			t.Run(fmt.Sprintf("groups=%d/quiesce=%v", n, quiesce), func(t *testing.T) {
				c := idleCluster(t, n, quiesce)
				before := c.statsNow()
				const ticks = 30
				c.run(ticks)
				perPair, hb := c.trafficSince(before, ticks)
				if perPair != 1 {
					t.Fatalf("%.3f messages per pair per tick, want 1", perPair)
				}
				switch {
				case quiesce && hb != 0:
					t.Fatalf("%.1f heartbeats per tick while quiesced", hb)
				case !quiesce && hb != float64(4*n):
					// Per group: 2 heartbeats from the leader, 2 responses.
					t.Fatalf("%.1f heartbeats per tick, want %d", hb, 4*n)
				}
			})
		}
	}
}
