package multiraft

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
)

// Host drives many raft groups in one process: one processing loop, one
// transport, one Pebble DB. See the package documentation for the design.
//
// All methods are safe for concurrent use.
type Host struct {
	cfg         Config
	id          NodeID
	log         *slog.Logger
	incarnation uint64

	// roundMu serializes processing rounds with AddGroup and RemoveGroup,
	// which write the DB outside a round. Lock order: roundMu, then mu.
	roundMu sync.Mutex

	// mu guards every field below and all raft state (RawNodes, storages,
	// state machines' callers). A round releases it only while its batch
	// syncs, so API calls are not held up by disk latency.
	mu         sync.Mutex
	groups     map[GroupID]*group
	order      []*group // groups sorted by id: deterministic processing order
	peers      map[NodeID]*peerState
	peersFresh bool   // peers matches the groups' current members
	ticks      uint64 // ticks since NewHost
	seq        uint64 // last proposal/read id issued
	stopped    bool
	fatal      error
	stats      HostStats

	// inboxMu guards the inbound queue filled by Deliver.
	inboxMu      sync.Mutex
	inbox        []*Batch
	inboxDropped uint64

	closed  atomic.Bool   // set by Stop; Deliver drops from then on
	wakec   chan struct{} // cap 1: a round has work
	stopc   chan struct{}
	started bool // guarded by mu
	wg      sync.WaitGroup
	stopMu  sync.Mutex // serializes Stop

	// notifications for OnLeaderChange, coalesced per group.
	notifyMu    sync.Mutex
	notifyQueue []GroupID
	notifyLast  map[GroupID]pendingNote
	notifyc     chan struct{} // cap 1

	// clockBase is the zero of the lease clock; leaseNanos the lease
	// duration (0: no leases). See lease.go.
	clockBase  time.Time
	leaseNanos int64

	// notices are the commit notices held back (notice.go); noticeArmed
	// says a round is scheduled for when the oldest is due.
	notices     map[noticeKey]heldNotice
	noticeArmed atomic.Bool
}

type pendingNote struct {
	info LeaderInfo
	fn   func(LeaderInfo)
}

// peerState is the node-level view of a peer host.
type peerState struct {
	lastHeard   uint64 // tick of the last batch received
	alive       bool
	member      bool // scratch for refreshMembers: holds a replica of some group here
	incarnation uint64
}

// NewHost creates a host. It does not start processing: add groups, then call
// Start. The DB and transport stay owned by the caller.
func NewHost(cfg Config) (*Host, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	h := &Host{
		cfg:         cfg,
		id:          cfg.NodeID,
		log:         cfg.Logger.With("node", uint64(cfg.NodeID)),
		incarnation: rand.Uint64() | 1,
		groups:      make(map[GroupID]*group),
		peers:       make(map[NodeID]*peerState),
		wakec:       make(chan struct{}, 1),
		stopc:       make(chan struct{}),
		notifyLast:  make(map[GroupID]pendingNote),
		notices:     make(map[noticeKey]heldNotice),
		notifyc:     make(chan struct{}, 1),
		// Proposal ids start at a random point so that ids issued before a
		// restart, still in the log, never match waiters after it.
		seq: rand.Uint64() >> 1,
	}
	h.clockBase = cfg.Now()
	h.leaseNanos = int64(cfg.leaseDuration())
	h.stats.BatchesSentPerPeer = make(map[NodeID]uint64)
	return h, nil
}

// Start starts the processing loop (ticker included) and the notifier
// goroutine. Both are owned by the host and stopped by Stop. Start after Stop
// does nothing.
func (h *Host) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.stopped {
		return
	}
	h.started = true
	h.wg.Add(2)
	go h.run()
	go h.runNotifier()
}

// Stop stops the loop and the notifier and waits for them. Pending calls fail
// with ErrStopped. Idempotent. It does not close the DB or the transport.
func (h *Host) Stop() {
	h.stopMu.Lock()
	defer h.stopMu.Unlock()
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	h.mu.Unlock()
	h.closed.Store(true)
	close(h.stopc)
	h.wg.Wait()
	h.roundMu.Lock()
	h.mu.Lock()
	for _, g := range h.order {
		g.failWaiters(ErrStopped)
	}
	h.mu.Unlock()
	h.roundMu.Unlock()
}

// run is the processing loop: a round per tick and per wake-up.
func (h *Host) run() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		tick := false
		select {
		case <-h.stopc:
			return
		case <-t.C:
			tick = true
		case <-h.wakec:
		}
		if h.processRound(tick) {
			h.wake()
		}
	}
}

// wake asks the loop for a round.
func (h *Host) wake() {
	select {
	case h.wakec <- struct{}{}:
	default:
	}
}

// Deliver hands an inbound batch to the host; transports call it. It never
// blocks for long: the batch is queued for the next round, or dropped (and
// counted) when InboxBatches are already queued; raft retransmits.
func (h *Host) Deliver(b *Batch) {
	if b == nil || h.closed.Load() {
		return
	}
	h.inboxMu.Lock()
	if len(h.inbox) >= h.cfg.InboxBatches {
		h.inboxDropped++
		h.inboxMu.Unlock()
		return
	}
	h.inbox = append(h.inbox, b)
	h.inboxMu.Unlock()
	h.wake()
}

func (h *Host) takeInbox() []*Batch {
	h.inboxMu.Lock()
	defer h.inboxMu.Unlock()
	in := h.inbox
	h.inbox = nil
	return in
}

// readyWork is one group's Ready in flight through a round.
type readyWork struct {
	g  *group
	rd raft.Ready
	n  uint64 // g.readies after this Ready
}

// processRound runs one processing round and reports whether more work is
// already pending. A round:
//
//  1. steps every queued inbound batch into its groups;
//  2. on a tick: ticks every active group, runs quiescence and peer liveness;
//  3. collects every group's Ready and stages all their log, hard-state and
//     snapshot writes in ONE Pebble batch;
//  4. sends the messages that need nothing durable (appends, heartbeats),
//     then commits the batch (with Sync if any group needs durability:
//     group commit) in the background;
//  5. meanwhile applies the committed entries (durable on a quorum already)
//     and answers their proposers;
//  6. once the batch is durable, sends the rest of the round's messages
//     (append and vote responses), one Batch per peer (plus an empty beat
//     per peer on a tick);
//  7. advances every RawNode and takes the snapshots that are due (each in
//     its own unsynced batch: losing it in a crash loses nothing, the log
//     still covers it).
//
// Tests drive it directly; Start calls it from the loop.
func (h *Host) processRound(tick bool) (more bool) {
	h.roundMu.Lock()
	defer h.roundMu.Unlock()
	h.mu.Lock()
	if h.stopped || h.fatal != nil {
		h.mu.Unlock()
		return false
	}
	h.stats.Rounds++
	out := newOutbox(h)
	for _, b := range h.takeInbox() {
		h.handleBatch(b)
	}
	if tick {
		h.stats.Ticks++
		h.tick(out)
	}

	// Phase 3: collect and stage.
	wb := h.cfg.DB.NewBatch()
	defer wb.Close()
	var work []readyWork
	mustSync := false
	for _, g := range h.order {
		if g.err != nil {
			continue
		}
		var rd raft.Ready
		has := false
		if !h.guard(g, "ready", func() {
			if has = g.rn.HasReady(); has {
				rd = g.rn.Ready()
				g.readies++
			}
		}) || !has {
			continue
		}
		if err := g.st.checkReady(&rd); err != nil {
			// A Ready that does not fit the stored log is a bug or a
			// corrupt DB: stop this group, not the host. Nothing of it was
			// staged.
			h.failGroup(g, err)
			continue
		}
		if err := g.st.stageReady(wb, &rd); err != nil {
			// Only an unusable batch fails after checkReady passed.
			for _, w := range work {
				w.g.st.dropStaged()
			}
			g.st.dropStaged()
			h.mu.Unlock()
			h.setFatal(err)
			return false
		}
		// raft's MustSync does not count a received snapshot, but the
		// follower acknowledges it right after this round: it must be
		// durable, or a crash would lose state the leader counts as
		// replicated (and later commit indexes would point past the log).
		mustSync = mustSync || rd.MustSync || !raft.IsEmptySnap(rd.Snapshot)
		work = append(work, readyWork{g: g, rd: rd, n: g.readies})
	}

	// Phase 3b: send what may leave before the batch is durable: every
	// message but acknowledgements of appends and votes (raft's msgs as
	// opposed to its msgsAfterAppend). A leader's appends thus reach its
	// followers while its own write is in flight, so the leader's and the
	// followers' syncs overlap (Raft thesis §10.2.1); the leader still
	// counts itself toward a commit only once its write is durable (its own
	// acknowledgement is stepped at Advance).
	if !wb.Empty() {
		early := newOutbox(h)
		for i := range work {
			h.queueMessages(work[i].g, &work[i].rd, early, sendEarly)
		}
		early.flush(false)
	}

	// Phase 4: group commit, in the background while phase 5 runs.
	var commitDone chan struct{}
	var commitErr error
	if !wb.Empty() {
		opts := pebble.NoSync
		if mustSync {
			opts = pebble.Sync
		}
		commitDone = make(chan struct{})
		go func() {
			defer close(commitDone)
			commitErr = wb.Commit(opts)
		}()
	}

	// Phase 5: apply the committed entries while the batch is written.
	// They are durable on a quorum already (that is what committed means),
	// raft's contract lets applying run in parallel with persisting, and a
	// proposer's answer then does not wait for this round's sync, which
	// under load carries the next entries. Advance waits for the sync.
	for i := range work {
		if work[i].g.err == nil {
			h.applyCommitted(work[i].g, &work[i].rd, work[i].n)
		}
	}
	if commitDone != nil {
		// The state lock is released meanwhile, so proposals keep
		// arriving for the next round.
		h.mu.Unlock()
		<-commitDone
		h.mu.Lock()
		if err := commitErr; err != nil {
			for _, w := range work {
				w.g.st.dropStaged()
			}
			h.mu.Unlock()
			h.setFatal(fmt.Errorf("commit round batch: %w", err))
			return false
		}
		h.stats.Commits++
		if mustSync {
			h.stats.SyncCommits++
		}
	}
	for _, w := range work {
		w.g.st.commitStaged()
	}

	// Phase 6: send. Everything raft asked to persist before sending is durable.
	late := sendLate
	if wb.Empty() {
		late = sendAll
	}
	for i := range work {
		h.queueMessages(work[i].g, &work[i].rd, out, late)
	}
	h.releaseNotices(out)
	out.flush(tick)

	// Phase 7: advance.
	for _, w := range work {
		if w.g.err != nil {
			continue
		}
		h.advanceReady(w.g, &w.rd)
		if w.g.err == nil && h.snapshotDue(w.g) {
			h.takeSnapshot(w.g)
		}
	}
	for _, g := range h.order {
		if g.quiesceReq != nil {
			h.maybeQuiesceFollower(g)
		}
		if g.st.freshWanted {
			g.st.freshWanted = false
			if g.err == nil && g.applied > g.st.snapIndex() {
				h.takeSnapshot(g)
			}
		}
		if g.err == nil && !more {
			more = g.rn.HasReady()
		}
	}
	h.mu.Unlock()
	h.kickNotifier()
	return more
}

// setFatal stops all processing after a DB write failed: raft's durability
// promises can no longer be kept, so nothing may be sent or applied. Every
// waiter fails with ErrHostFailed.
func (h *Host) setFatal(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fatal != nil {
		return
	}
	h.fatal = err
	h.log.Error("multiraft host stopped processing", "err", err)
	for _, g := range h.order {
		g.failWaiters(fmt.Errorf("%w: %v", ErrHostFailed, err))
	}
}

// checkUsable returns the error API calls report when the host cannot serve.
// Called with mu held.
func (h *Host) checkUsable() error {
	if h.stopped {
		return ErrStopped
	}
	if h.fatal != nil {
		return fmt.Errorf("%w: %v", ErrHostFailed, h.fatal)
	}
	return nil
}

// guard runs fn, a call into g's RawNode, and turns a raft panic (an
// invariant violation, possibly caused by a bad peer message) into the failure
// of that group alone.
func (h *Host) guard(g *group, what string, fn func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			h.failGroup(g, fmt.Errorf("%s: raft panic: %v", what, r))
			ok = false
		}
	}()
	fn()
	return true
}

// failGroup stops g on this host; it keeps its place so Status can report why.
func (h *Host) failGroup(g *group, err error) {
	if g.err != nil {
		return
	}
	g.err = fmt.Errorf("group %d: %w", g.id, err)
	h.log.Error("raft group failed", "group", uint64(g.id), "err", err)
	g.failWaiters(fmt.Errorf("%w: %v", ErrGroupFailed, g.err))
	g.quiesced = false
	h.peersFresh = false
}

// insertGroup adds g to the map and the sorted order. Called with mu held.
func (h *Host) insertGroup(g *group) {
	h.groups[g.id] = g
	i, _ := slices.BinarySearchFunc(h.order, g.id, func(x *group, id GroupID) int {
		switch {
		case x.id < id:
			return -1
		case x.id > id:
			return 1
		}
		return 0
	})
	h.order = slices.Insert(h.order, i, g)
	h.peersFresh = false
}

func (h *Host) deleteGroup(g *group) {
	delete(h.groups, g.id)
	h.order = slices.DeleteFunc(h.order, func(x *group) bool { return x == g })
	h.peersFresh = false
}

// nextID issues a proposal or read id. Called with mu held.
func (h *Host) nextID() uint64 {
	h.seq++
	return h.seq
}

// Stats returns the host's counters.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	s := h.stats
	s.BatchesSentPerPeer = make(map[NodeID]uint64, len(h.stats.BatchesSentPerPeer))
	for k, v := range h.stats.BatchesSentPerPeer {
		s.BatchesSentPerPeer[k] = v
	}
	s.Groups = len(h.order)
	for _, g := range h.order {
		if g.quiesced {
			s.GroupsQuiesced++
		}
	}
	h.mu.Unlock()
	h.inboxMu.Lock()
	s.DroppedInboxFull = h.inboxDropped
	h.inboxMu.Unlock()
	return s
}

// queueNote records a leadership change for the notifier. Called with mu held.
func (h *Host) queueNote(g *group, info LeaderInfo) {
	if g.opts.OnLeaderChange == nil {
		return
	}
	h.notifyMu.Lock()
	if _, ok := h.notifyLast[g.id]; !ok {
		h.notifyQueue = append(h.notifyQueue, g.id)
	}
	h.notifyLast[g.id] = pendingNote{info: info, fn: g.opts.OnLeaderChange}
	h.notifyMu.Unlock()
}

func (h *Host) kickNotifier() {
	select {
	case h.notifyc <- struct{}{}:
	default:
	}
}

// runNotifier calls OnLeaderChange callbacks off the processing loop.
func (h *Host) runNotifier() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stopc:
			return
		case <-h.notifyc:
		}
		h.deliverNotes()
	}
}

// deliverNotes runs every queued callback, latest state per group.
func (h *Host) deliverNotes() {
	for {
		h.notifyMu.Lock()
		if len(h.notifyQueue) == 0 {
			h.notifyMu.Unlock()
			return
		}
		id := h.notifyQueue[0]
		h.notifyQueue = h.notifyQueue[1:]
		n := h.notifyLast[id]
		delete(h.notifyLast, id)
		h.notifyMu.Unlock()
		n.fn(n.info)
	}
}
