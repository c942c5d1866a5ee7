package multiraft

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/multiraft/transportpb"
)

// This file is the deterministic test bench: an in-memory network (simNet)
// whose faults are drawn from a seeded RNG, and a cluster of hosts on it that
// the test drives round by round, without real time or sockets.

// simNet carries batches between hosts. In stepped mode (the default) a sent
// batch is held until a later step, possibly dropped, duplicated, delayed and
// reordered; in live mode (hosts started with Start) it is delivered at once.
// Every batch goes through the wire encoding, as over gRPC.
type simNet struct {
	mu     sync.Mutex
	rng    *rand.Rand
	hosts  map[NodeID]*Host
	queue  []flight
	round  int
	live   bool
	faults faults
	cut    map[[2]NodeID]bool // directed links that drop everything
	down   map[NodeID]bool    // hosts that neither send nor receive
	sent   map[[2]NodeID]int  // batches sent per directed pair, faults or not
}

type faults struct {
	drop, dup float64 // probabilities per batch
	maxDelay  int     // extra rounds a batch may be held
	reorder   bool    // shuffle each round's deliveries
}

type flight struct {
	b  *Batch
	at int
}

func newSimNet(seed uint64) *simNet {
	return &simNet{
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		hosts: make(map[NodeID]*Host),
		cut:   make(map[[2]NodeID]bool),
		down:  make(map[NodeID]bool),
		sent:  make(map[[2]NodeID]int),
	}
}

// transport returns node id's Transport on this network.
func (n *simNet) transport(id NodeID) Transport { return simTransport{n: n, from: id} }

type simTransport struct {
	n    *simNet
	from NodeID
}

func (t simTransport) Send(b *Batch) { t.n.send(b) }

// wireRoundTrip passes b through the wire encoding, as a real transport does.
func wireRoundTrip(b *Batch) *Batch {
	pb, err := encodeBatch(b)
	if err != nil {
		panic(err)
	}
	raw, err := proto.Marshal(pb)
	if err != nil {
		panic(err)
	}
	var back transportpb.Batch
	if err := proto.Unmarshal(raw, &back); err != nil {
		panic(err)
	}
	out, bad := decodeBatch(&back)
	if bad != 0 {
		panic("malformed message after round trip")
	}
	return out
}

func (n *simNet) send(b *Batch) {
	n.mu.Lock()
	n.sent[[2]NodeID{b.From, b.To}]++
	if n.down[b.From] || n.down[b.To] || n.cut[[2]NodeID{b.From, b.To}] {
		n.mu.Unlock()
		return
	}
	if n.faults.drop > 0 && n.rng.Float64() < n.faults.drop {
		n.mu.Unlock()
		return
	}
	copies := 1
	if n.faults.dup > 0 && n.rng.Float64() < n.faults.dup {
		copies = 2
	}
	if n.live {
		h := n.hosts[b.To]
		n.mu.Unlock()
		if h != nil {
			for range copies {
				h.Deliver(wireRoundTrip(b))
			}
		}
		return
	}
	for range copies {
		delay := 0
		if n.faults.maxDelay > 0 {
			delay = n.rng.IntN(n.faults.maxDelay + 1)
		}
		n.queue = append(n.queue, flight{b: wireRoundTrip(b), at: n.round + 1 + delay})
	}
	n.mu.Unlock()
}

// deliverDue hands every batch due by this round to its host.
func (n *simNet) deliverDue() {
	n.mu.Lock()
	var due []flight
	kept := n.queue[:0]
	for _, f := range n.queue {
		if f.at <= n.round {
			due = append(due, f)
		} else {
			kept = append(kept, f)
		}
	}
	n.queue = kept
	if n.faults.reorder {
		n.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	}
	type target struct {
		h *Host
		b *Batch
	}
	var ts []target
	for _, f := range due {
		if h := n.hosts[f.b.To]; h != nil && !n.down[f.b.To] && !n.cut[[2]NodeID{f.b.From, f.b.To}] {
			ts = append(ts, target{h, f.b})
		}
	}
	n.mu.Unlock()
	for _, t := range ts {
		t.h.Deliver(t.b)
	}
}

// isolate cuts every link between id and the other hosts (both ways); heal
// restores all links.
func (n *simNet) isolate(id NodeID, ids []NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range ids {
		if o != id {
			n.cut[[2]NodeID{id, o}] = true
			n.cut[[2]NodeID{o, id}] = true
		}
	}
}

// partition cuts every link between the two sides.
func (n *simNet) partition(a, b []NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.cut[[2]NodeID{x, y}] = true
			n.cut[[2]NodeID{y, x}] = true
		}
	}
}

func (n *simNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

func (n *simNet) setDown(id NodeID, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[id] = down
}

func (n *simNet) setFaults(f faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// kvSM is the test state machine: a string map plus the full history of
// applied commands, so replicas can be compared command by command.
type kvSM struct {
	mu     sync.Mutex
	KV     map[string]string
	Hist   []string
	Last   uint64 // last applied index
	errors []string
}

func newKV() *kvSM { return &kvSM{KV: make(map[string]string)} }

func (s *kvSM) Apply(index uint64, data []byte) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.Last {
		s.errors = append(s.errors, fmt.Sprintf("apply index %d after %d", index, s.Last))
	}
	s.Last = index
	cmd := string(data)
	s.Hist = append(s.Hist, cmd)
	if strings.HasPrefix(cmd, "fail") {
		return nil, fmt.Errorf("command %q failed", cmd)
	}
	if k, v, ok := strings.Cut(cmd, "="); ok {
		s.KV[k] = v
	}
	return len(s.Hist), nil
}

func (s *kvSM) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Marshal(s)
}

func (s *kvSM) Restore(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n kvSM
	if err := json.Unmarshal(data, &n); err != nil {
		return err
	}
	s.KV, s.Hist, s.Last = n.KV, n.Hist, n.Last
	if s.KV == nil {
		s.KV = make(map[string]string)
	}
	return nil
}

// batchKV is kvSM applying whole runs of entries (BatchApplier), counting
// the runs longer than one.
type batchKV struct {
	*kvSM
	multi atomic.Int64
}

func (b *batchKV) ApplyBatch(ents []Entry) ([]any, []error) {
	if len(ents) > 1 {
		b.multi.Add(1)
	}
	vals, errs := make([]any, len(ents)), make([]error, len(ents))
	for i, e := range ents {
		vals[i], errs[i] = b.Apply(e.Index, e.Data)
	}
	return vals, errs
}

func (s *kvSM) history() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.Hist)
}

// cluster is a set of hosts on a simNet, each with its own crashable
// in-memory filesystem and Pebble DB.
type cluster struct {
	t     testing.TB
	net   *simNet
	ids   []NodeID
	hosts map[NodeID]*Host
	fs    map[NodeID]*vfs.MemFS
	dbs   map[NodeID]*pebble.DB
	sms   map[NodeID]map[GroupID]*kvSM
	// batched makes new replicas BatchAppliers (batchKV).
	batched bool
	// roundsPerTick: rounds are network hops; ticks are rarer.
	roundsPerTick int
	cfg           func(*Config)
	// clock is the simulated time read leases see: it advances by one
	// tick interval on every ticking round, so that ticks and time agree
	// as they do with a real ticker.
	clockMu sync.Mutex
	clock   time.Time
}

// simTick is the tick interval the simulated clock advances by.
const simTick = 100 * time.Millisecond

func (c *cluster) now() time.Time {
	c.net.mu.Lock()
	live := c.net.live
	c.net.mu.Unlock()
	if live {
		// Started hosts tick off real tickers.
		return time.Now()
	}
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	return c.clock
}

// advance moves the simulated clock on by d.
func (c *cluster) advance(d time.Duration) {
	c.clockMu.Lock()
	c.clock = c.clock.Add(d)
	c.clockMu.Unlock()
}

func newCluster(t testing.TB, n int, seed uint64, cfg func(*Config)) *cluster {
	t.Helper()
	c := &cluster{
		t:             t,
		net:           newSimNet(seed),
		hosts:         make(map[NodeID]*Host),
		fs:            make(map[NodeID]*vfs.MemFS),
		dbs:           make(map[NodeID]*pebble.DB),
		sms:           make(map[NodeID]map[GroupID]*kvSM),
		roundsPerTick: 4,
		cfg:           cfg,
		clock:         time.Unix(1_000_000, 0),
	}
	for i := 1; i <= n; i++ {
		c.addNode(NodeID(i))
	}
	t.Cleanup(c.close)
	return c
}

// addNode creates a node with an empty filesystem and starts its host.
func (c *cluster) addNode(id NodeID) {
	c.ids = append(c.ids, id)
	c.fs[id] = vfs.NewCrashableMem()
	c.openHost(id)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (c *cluster) openHost(id NodeID) {
	c.t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: c.fs[id], Logger: quietPebble{}})
	if err != nil {
		c.t.Fatalf("node %d: open pebble: %v", id, err)
	}
	cfg := Config{
		NodeID:          id,
		DB:              db,
		Transport:       c.net.transport(id),
		ElectionTicks:   10,
		HeartbeatTicks:  1,
		SnapshotEntries: 10000,
		Logger:          quietLogger(),
		TickInterval:    simTick,
		Now:             c.now,
	}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	h, err := NewHost(cfg)
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	c.dbs[id] = db
	c.hosts[id] = h
	c.sms[id] = make(map[GroupID]*kvSM)
	c.net.mu.Lock()
	c.net.hosts[id] = h
	c.net.down[id] = false
	c.net.mu.Unlock()
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// addGroup creates group g on every member with the same peer list.
func (c *cluster) addGroup(g GroupID, members ...NodeID) {
	c.t.Helper()
	if len(members) == 0 {
		members = c.ids
	}
	for _, id := range members {
		c.addReplica(id, g, members)
	}
}

func (c *cluster) addReplica(id NodeID, g GroupID, peers []NodeID) {
	c.t.Helper()
	sm := newKV()
	var m StateMachine = sm
	if c.batched {
		m = &batchKV{kvSM: sm}
	}
	if err := c.hosts[id].AddGroup(g, peers, m, GroupOptions{}); err != nil {
		c.t.Fatalf("node %d: add group %d: %v", id, g, err)
	}
	c.sms[id][g] = sm
}

// step runs one round on every live host, after delivering what is due.
func (c *cluster) step() {
	c.net.mu.Lock()
	tick := (c.net.round+1)%c.roundsPerTick == 0
	c.net.mu.Unlock()
	c.stepWith(tick)
}

// stepWith runs one round, ticking or not.
func (c *cluster) stepWith(tick bool) {
	c.net.mu.Lock()
	c.net.round++
	c.net.mu.Unlock()
	if tick {
		c.advance(simTick)
	}
	c.net.deliverDue()
	for _, id := range c.ids {
		if c.isDown(id) {
			continue
		}
		c.hosts[id].processRound(tick)
	}
}

func (c *cluster) isDown(id NodeID) bool {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return c.net.down[id]
}

// runUntil steps until cond holds, failing the test after max rounds.
func (c *cluster) runUntil(what string, max int, cond func() bool) {
	c.t.Helper()
	for i := 0; i < max; i++ {
		if cond() {
			return
		}
		c.step()
	}
	if !cond() {
		c.t.Fatalf("after %d rounds: %s did not happen\n%s", max, what, c.describe())
	}
}

func (c *cluster) run(rounds int) {
	for range rounds {
		c.step()
	}
}

func (c *cluster) describe() string {
	var b strings.Builder
	for _, id := range c.ids {
		h := c.hosts[id]
		if c.isDown(id) {
			fmt.Fprintf(&b, "node %d: down\n", id)
			continue
		}
		for _, g := range h.Groups() {
			st, err := h.Status(g)
			fmt.Fprintf(&b, "node %d group %d: lead %d term %d commit %d applied %d last %d quiesced %v voters %v err %v %v\n",
				id, g, st.Leader, st.Term, st.Commit, st.Applied, st.LastIndex, st.Quiesced, st.Voters, st.Err, err)
		}
	}
	return b.String()
}

// holders returns the nodes that host a replica of g.
func (c *cluster) holders(g GroupID) []NodeID {
	var ids []NodeID
	for _, id := range c.ids {
		if _, err := c.hosts[id].Status(g); !errors.Is(err, ErrGroupNotFound) {
			ids = append(ids, id)
		}
	}
	return ids
}

// leader returns the live node (of among, default all) that leads g with the
// highest term, or 0.
func (c *cluster) leader(g GroupID, among ...NodeID) NodeID {
	if len(among) == 0 {
		among = c.ids
	}
	var lead NodeID
	var term uint64
	for _, id := range among {
		if c.isDown(id) {
			continue
		}
		st, err := c.hosts[id].Status(g)
		if err == nil && st.IsLeader && st.Term >= term {
			lead, term = id, st.Term
		}
	}
	return lead
}

// waitLeader runs until g has a leader that every live member agrees on.
func (c *cluster) waitLeader(g GroupID, members ...NodeID) NodeID {
	c.t.Helper()
	if len(members) == 0 {
		members = c.holders(g)
	}
	var lead NodeID
	c.runUntil(fmt.Sprintf("leader of group %d", g), 2000, func() bool {
		lead = c.leader(g, members...)
		if lead == 0 {
			return false
		}
		for _, id := range members {
			if c.isDown(id) {
				continue
			}
			st, err := c.hosts[id].Status(g)
			if err != nil || st.Leader != lead {
				return false
			}
		}
		return true
	})
	return lead
}

// proposeAsync proposes on node id without blocking (the test drives rounds).
func (c *cluster) proposeAsync(id NodeID, g GroupID, data string) (<-chan proposalResult, error) {
	ch, _, err := c.hosts[id].propose(g, []byte(data))
	return ch, err
}

// propose proposes on g's leader and runs until it applies.
func (c *cluster) propose(g GroupID, data string) any {
	c.t.Helper()
	lead := c.waitLeader(g)
	ch, err := c.proposeAsync(lead, g, data)
	if err != nil {
		c.t.Fatalf("propose %q on node %d: %v", data, lead, err)
	}
	var res proposalResult
	done := false
	c.runUntil("proposal "+data+" applied", 500, func() bool {
		select {
		case res = <-ch:
			done = true
		default:
		}
		return done
	})
	if res.err != nil {
		c.t.Fatalf("proposal %q: %v", data, res.err)
	}
	return res.val
}

// converged reports whether g has a leader among the live members whose
// whole log is committed (so an entry of its term is), and every live member
// applied exactly that.
func (c *cluster) converged(g GroupID, members ...NodeID) bool {
	if len(members) == 0 {
		members = c.holders(g)
	}
	lead := c.leader(g, members...)
	if lead == 0 {
		return false
	}
	ls, err := c.hosts[lead].Status(g)
	if err != nil || ls.Commit != ls.LastIndex {
		return false
	}
	for _, id := range members {
		if c.isDown(id) {
			continue
		}
		st, err := c.hosts[id].Status(g)
		if err != nil || st.Applied != ls.Commit || st.Commit != ls.Commit {
			return false
		}
	}
	return true
}

// checkSame fails unless every live replica of g has the same history and
// state, and reports no apply-order violations. It returns the history.
func (c *cluster) checkSame(g GroupID, members ...NodeID) []string {
	c.t.Helper()
	if len(members) == 0 {
		members = c.holders(g)
	}
	var ref []string
	var refID NodeID
	for _, id := range members {
		if c.isDown(id) {
			continue
		}
		sm := c.sms[id][g]
		sm.mu.Lock()
		errs := slices.Clone(sm.errors)
		sm.mu.Unlock()
		if len(errs) > 0 {
			c.t.Fatalf("node %d group %d: state machine saw: %v", id, g, errs)
		}
		h := sm.history()
		if ref == nil {
			ref, refID = h, id
			continue
		}
		if !slices.Equal(ref, h) {
			c.t.Fatalf("group %d: node %d history (%d) differs from node %d (%d):\n%v\n%v", g, id, len(h), refID, len(ref), h, ref)
		}
	}
	return ref
}

// crash simulates kill -9 of node id: the host stops at once, and its
// filesystem keeps only synced data (plus, with unsyncedPct > 0, a random
// part of the rest). restart then reopens it.
func (c *cluster) crash(id NodeID, unsyncedPct int) {
	c.t.Helper()
	c.net.setDown(id, true)
	c.hosts[id].Stop()
	cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPct}
	if unsyncedPct > 0 {
		cfg.RNG = rand.New(rand.NewPCG(uint64(id), 42))
	}
	clone := c.fs[id].CrashClone(cfg)
	if err := c.dbs[id].Close(); err != nil {
		c.t.Fatalf("node %d: close crashed db: %v", id, err)
	}
	c.dbs[id] = nil
	c.fs[id] = clone
}

// restart reopens node id's DB and host and re-adds the given groups with
// fresh state machines (rebuilt from snapshot and log).
func (c *cluster) restart(id NodeID, groups ...GroupID) {
	c.t.Helper()
	c.openHost(id)
	for _, g := range groups {
		c.addReplica(id, g, nil)
	}
}

func (c *cluster) close() {
	for _, id := range c.ids {
		c.hosts[id].Stop()
		if db := c.dbs[id]; db != nil {
			_ = db.Close()
		}
	}
}

// waitResult runs until ch yields.
func (c *cluster) waitResult(what string, ch <-chan proposalResult, max int) proposalResult {
	c.t.Helper()
	var res proposalResult
	got := false
	c.runUntil(what, max, func() bool {
		if !got {
			select {
			case res = <-ch:
				got = true
			default:
			}
		}
		return got
	})
	return res
}
