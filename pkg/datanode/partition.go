package datanode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// partition is one data partition replica on this node.
type partition struct {
	id     uint64
	volume uint64 // the volume it belongs to (a partition never changes volume)
	h      *Host
	dir    string
	log    *slog.Logger
	sm     *overwriteSM

	store atomic.Pointer[extentstore.Store]

	mu sync.RWMutex
	cv chainView // the replica set as last assigned

	// syncedEpoch is the partition epoch at which this replica, in the
	// write chain as a follower, last completed a full alignment with the
	// head (reported to the master, which then clears a stale mark).
	syncedEpoch atomic.Uint64

	// appendSeq counts local appends; durableSeq is the highest count a
	// returned Sync covers. A replica acknowledges append n once
	// durableSeq >= n.
	appendSeq, durableSeq atomic.Uint64

	// leading is whether this replica leads the partition's Raft group, as
	// last noted: a leader confirms its reads with its read lease, any
	// other replica with Raft's ReadIndex (readBarrier).
	leading atomic.Bool

	// Reads wait until Raft has re-applied the overwrites committed before
	// the partition was opened (they may be newer than the bytes on disk).
	replayTo uint64
	replayed atomic.Bool

	staleMu  sync.Mutex
	stale    map[uint64]uint64 // extent -> generation of its mark: awaits full alignment
	staleAll uint64            // generation of a whole-partition mark, 0 if none
	staleGen uint64
	// overwritten records, while any mark stands, the generation at which
	// an overwrite last applied to each extent: a block alignment copied
	// while one applied may be older than what the overwrite wrote (see
	// compareBlocks). Emptied with the last mark.
	overwritten map[uint64]uint64
	// rebuilding: the store was recreated empty; until a full alignment
	// from a peer completes this replica is no source for anyone.
	rebuilding atomic.Bool
	// retiring: the map no longer has this replica, but its Raft group
	// still counts it as a member (retire.go).
	retiring atomic.Bool

	// recent: when a forwarded append last reached each extent (followers
	// only), so alignment leaves extents being streamed alone.
	recentMu sync.Mutex
	recent   map[uint64]time.Time
	// behind: extents found lagging the source, by the maintenance
	// goroutine only (see settled).
	behind     map[uint64]behindSince
	behindSeen map[uint64]bool
	// skippedLag: the last pass left alone an extent this replica is
	// behind on because a stream wrote it recently (maintenance only).
	skippedLag bool
	// sourceEpoch is the oldest replica-set epoch the source listed its
	// extents at in the last pass, and sizeLag whether it then held bytes
	// of an extent, written or not yet committed, that this replica lacked
	// and no stream was bringing (maintenance only; see noteSynced).
	sourceEpoch uint64
	sizeLag     bool

	usageMu sync.Mutex
	usage   extentstore.Usage
	usageAt time.Time

	kick    chan struct{}             // wakes maintenance to align now
	repairs chan extentstore.BadBlock // blocks found bad by reads
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func openPartition(h *Host, p *pb.Partition) (*partition, error) {
	dir := filepath.Join(h.env.DataDir, fmt.Sprintf("dp-%d", p.Id))
	st, err := extentstore.Open(dir, h.opts.Store)
	rebuilt := false
	if errors.Is(err, extentstore.ErrCorruptMeta) {
		st, err = rebuildStore(h, dir, err)
		rebuilt = true
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	part := &partition{
		id: p.Id, volume: p.VolumeId, h: h, dir: dir, log: h.log.With("partition", p.Id),
		cv:    newChainView(p, h.env.NodeID, h.env.Epoch()),
		stale: map[uint64]uint64{}, overwritten: map[uint64]uint64{}, recent: map[uint64]time.Time{}, behind: map[uint64]behindSince{}, kick: make(chan struct{}, 1), repairs: make(chan extentstore.BadBlock, 64),
		ctx: ctx, cancel: cancel,
	}
	part.store.Store(st)
	part.sm = &overwriteSM{p: part}
	var peers []multiraft.NodeID // none for a joining replica: the leader adds it
	if slices.Contains(p.Replicas, h.env.NodeID) {
		for _, r := range p.Replicas {
			peers = append(peers, multiraft.NodeID(r))
		}
	}
	opts := multiraft.GroupOptions{OnLeaderChange: func(li multiraft.LeaderInfo) { part.leading.Store(li.IsLeader) }}
	if err := h.env.Raft.AddGroup(multiraft.GroupID(p.Id), peers, part.sm, opts); err != nil {
		cancel()
		st.Close()
		return nil, fmt.Errorf("raft group: %w", err)
	}
	part.sm.running.Store(true)
	if gs, err := h.env.Raft.Status(multiraft.GroupID(p.Id)); err == nil {
		part.replayTo = gs.Commit
	}
	if rebuilt {
		part.rebuilding.Store(true)
		part.markAllStale()
	}
	if len(p.Replicas) > 0 && p.Replicas[0] == h.env.NodeID {
		// The primary of the chain also leads the Raft group when it can, so
		// that overwrites and appends meet the same replica first.
		if err := h.env.Raft.Campaign(multiraft.GroupID(p.Id)); err != nil {
			part.log.Debug("campaign", "err", err)
		}
	}
	part.wg.Add(1)
	go part.maintain()
	part.log.Info("data partition opened", "replicas", p.Replicas, "dir", dir, "extents", len(st.Extents()), "rebuilt", rebuilt)
	return part, nil
}

// rebuildStore moves a store whose metadata is damaged aside and starts an
// empty one, to be filled by full alignment from a peer.
func rebuildStore(h *Host, dir string, cause error) (*extentstore.Store, error) {
	aside := fmt.Sprintf("%s.corrupt-%d", dir, time.Now().UnixNano())
	h.log.Error("extent store damaged; moving it aside and rebuilding from peers", "dir", dir, "aside", aside, "err", cause)
	if err := os.Rename(dir, aside); err != nil {
		return nil, fmt.Errorf("move damaged store aside: %w (store: %v)", err, cause)
	}
	h.m.reopens.Inc()
	return extentstore.Open(dir, h.opts.Store)
}

// st is the partition's store (replaced when a failed store is reopened).
func (p *partition) st() *extentstore.Store { return p.store.Load() }

func (p *partition) close() error {
	p.cancel()
	p.wg.Wait()
	err := p.h.env.Raft.RemoveGroup(multiraft.GroupID(p.id), false)
	if errors.Is(err, multiraft.ErrGroupNotFound) || errors.Is(err, multiraft.ErrStopped) {
		err = nil
	}
	if cerr := p.st().Close(); cerr != nil && !errors.Is(cerr, extentstore.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	p.log.Info("data partition closed")
	return err
}

// setView installs the replica set p assigns. A changed set takes p's epoch
// (or, for a partition the master never changed, the map epoch at which
// this node learned it), so that writers with an older view are refused.
func (p *partition) setView(part *pb.Partition, mapEpoch uint64) {
	cv := newChainView(part, p.h.env.NodeID, mapEpoch)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cv.same(cv) {
		return
	}
	if old := p.cv; old.pos == 0 && cv.pos != 0 {
		// No longer the primary: another may append meanwhile, to extents
		// this replica may hold unacknowledged bytes of (extentstore.SealSmall).
		p.st().SealSmall()
	}
	p.cv = cv
	p.log.Info("replica set changed", "replicas", cv.replicas, "chain", cv.chain, "stale", cv.stale, "writable", cv.writable, "epoch", cv.epoch)
	if (cv.pos > 0 && cv.self(cv.stale)) || cv.joining == cv.node {
		p.wakeup() // a stale or joining replica catches up at once
	}
}

// maxIDEpoch is the largest epoch idFloor separates; ids of later epochs
// still grow, from the floor of this one.
const maxIDEpoch = 1<<31 - 1

// idFloor is the least extent id a primary of the replica set of epoch
// hands out: the epoch takes the high 32 bits, so that primaries of
// different epochs never pick the same id for different extents (see
// extentstore.RaiseIDs; an epoch's primary would need 2^32 extents to
// reach the next epoch's floor).
func idFloor(epoch uint64) uint64 { return min(epoch, maxIDEpoch) << 32 }

// raiseIDs makes the extents this replica creates as primary from now on
// take ids of its current epoch (idFloor).
func (p *partition) raiseIDs() { p.st().RaiseIDs(idFloor(p.view().epoch)) }

// view returns the replica set as this node last learned it.
func (p *partition) view() chainView {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cv
}

// chainView is a partition's replica set as seen from one node
// (pkg/replicaset): immutable once made.
type chainView struct {
	node     uint64   // this node
	replicas []uint64 // every replica, in the master's order
	chain    []uint64 // the write chain: replicas not down
	stale    []uint64 // replicas that may lack acknowledged writes
	pos      int      // this node's position in chain, -1 if not in it
	head     uint64   // the chain's head if it may lead (not stale), else 0
	writable bool     // the chain takes writes
	epoch    uint64
	// A replica move in progress: joining replaces leaving (pkg/membership).
	joining, leaving uint64
}

func newChainView(p *pb.Partition, node, mapEpoch uint64) chainView {
	chain := replicaset.Chain(p)
	epoch := p.GetEpoch()
	if epoch == 0 {
		epoch = mapEpoch
	}
	return chainView{
		node: node, replicas: slices.Clone(p.GetReplicas()), chain: chain, stale: slices.Clone(p.GetStale()),
		pos: slices.Index(chain, node), head: replicaset.Head(p), writable: replicaset.Writable(p), epoch: epoch,
		joining: p.GetJoining(), leaving: p.GetLeaving(),
	}
}

// member reports whether this node holds a replica or is receiving one.
func (v chainView) member() bool {
	return v.self(v.replicas) || (v.joining != 0 && v.joining == v.node)
}

// same reports whether o describes the same replica set (the epoch a node
// learned an unchanged set at does not count).
func (v chainView) same(o chainView) bool {
	return slices.Equal(v.replicas, o.replicas) && slices.Equal(v.chain, o.chain) && slices.Equal(v.stale, o.stale) &&
		v.joining == o.joining && v.leaving == o.leaving
}

// self reports whether this node is in list.
func (v chainView) self(list []uint64) bool { return slices.Contains(list, v.node) }

// syncThrough makes local append number seq durable (sharing the store's
// group commit with every concurrent caller).
func (p *partition) syncThrough(seq uint64) error {
	if p.durableSeq.Load() >= seq {
		return nil
	}
	target := p.appendSeq.Load()
	if err := p.st().Sync(); err != nil {
		p.wakeup()
		return err
	}
	for {
		cur := p.durableSeq.Load()
		if cur >= target || p.durableSeq.CompareAndSwap(cur, target) {
			return nil
		}
	}
}

// noteAppend records a forwarded append to ext.
func (p *partition) noteAppend(ext uint64) {
	now := time.Now()
	p.recentMu.Lock()
	p.recent[ext] = now
	p.recentMu.Unlock()
}

// recentlyAppended reports whether ext got a forwarded append within
// quiet, forgetting older records as it goes.
func (p *partition) recentlyAppended(ext uint64, quiet time.Duration) bool {
	p.recentMu.Lock()
	defer p.recentMu.Unlock()
	t, ok := p.recent[ext]
	if ok && time.Since(t) >= quiet {
		delete(p.recent, ext)
		ok = false
	}
	if len(p.recent) > 4096 {
		for id, t := range p.recent {
			if time.Since(t) >= quiet {
				delete(p.recent, id)
			}
		}
	}
	return ok
}

// serving reports whether reads of extent ext may be served here: Raft has
// caught up with what was committed before opening, the extent awaits no
// repair, and the replica is not being rebuilt.
func (p *partition) serving(ext uint64) bool {
	if !p.replayed.Load() {
		gs, err := p.h.env.Raft.Status(multiraft.GroupID(p.id))
		if err != nil || gs.Applied < p.replayTo {
			return false
		}
		p.replayed.Store(true)
	}
	return !p.marked(ext)
}

// marked reports whether ext awaits repair here: marked itself, the whole
// partition marked, or the replica being rebuilt.
func (p *partition) marked(ext uint64) bool {
	if p.rebuilding.Load() {
		return true
	}
	p.staleMu.Lock()
	defer p.staleMu.Unlock()
	_, ok := p.stale[ext]
	return ok || p.staleAll != 0
}

// markStale records that ext may miss overwrites: reads of it are refused
// here until a full alignment copies every differing block from a peer.
func (p *partition) markStale(ext uint64) {
	p.keepStale(ext)
	p.log.Warn("extent marked for repair from a peer", "extent", ext)
}

// keepStale marks ext as markStale does, without the warning: for a mark
// an alignment pass could not clear and leaves to the next.
func (p *partition) keepStale(ext uint64) {
	p.staleMu.Lock()
	p.staleGen++
	p.stale[ext] = p.staleGen
	p.staleMu.Unlock()
	p.wakeup()
}

// noteOverwrite records that an overwrite applied to ext, while any mark
// stands (see partition.overwritten).
func (p *partition) noteOverwrite(ext uint64) {
	p.staleMu.Lock()
	defer p.staleMu.Unlock()
	if len(p.stale) == 0 && p.staleAll == 0 {
		return
	}
	p.staleGen++
	p.overwritten[ext] = p.staleGen
}

// overwrittenAt is the generation of the last overwrite noteOverwrite
// recorded for ext, 0 if none.
func (p *partition) overwrittenAt(ext uint64) uint64 {
	p.staleMu.Lock()
	defer p.staleMu.Unlock()
	return p.overwritten[ext]
}

// markAllStale does markStale for every extent (a Raft snapshot replaced
// entries this replica never applied).
func (p *partition) markAllStale() {
	p.staleMu.Lock()
	p.staleGen++
	p.staleAll = p.staleGen
	p.staleMu.Unlock()
	p.wakeup()
}

// staleState returns the marks and the current generation.
func (p *partition) staleState() (marks map[uint64]uint64, all, gen uint64) {
	p.staleMu.Lock()
	defer p.staleMu.Unlock()
	marks = make(map[uint64]uint64, len(p.stale))
	for k, v := range p.stale {
		marks[k] = v
	}
	return marks, p.staleAll, p.staleGen
}

// clearStale drops the marks made at or before generation gen for ext (or
// every extent and the whole-partition mark when all).
func (p *partition) clearStale(gen uint64, all bool, exts ...uint64) {
	p.staleMu.Lock()
	defer p.staleMu.Unlock()
	for _, e := range exts {
		if g, ok := p.stale[e]; ok && g <= gen {
			delete(p.stale, e)
		}
	}
	if all {
		for e, g := range p.stale {
			if g <= gen {
				delete(p.stale, e)
			}
		}
		if p.staleAll <= gen {
			p.staleAll = 0
		}
	}
	if len(p.stale) == 0 && p.staleAll == 0 {
		clear(p.overwritten)
	}
}

// wakeup asks the maintenance goroutine to run an alignment pass now.
func (p *partition) wakeup() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// reportBad queues a block a read found corrupt for repair.
func (p *partition) reportBad(err error) {
	var ce *extentstore.CorruptionError
	if !errors.As(err, &ce) {
		return
	}
	p.h.m.badBlocks.Inc()
	select {
	case p.repairs <- extentstore.BadBlock{Extent: ce.Extent, Block: ce.Block, Offset: ce.Offset, Length: ce.Length, Err: err}:
	default:
	}
}

func (p *partition) report() *pb.PartitionReport {
	r := &pb.PartitionReport{Id: p.id}
	if gs, err := p.h.env.Raft.Status(multiraft.GroupID(p.id)); err == nil {
		r.Leader = gs.IsLeader
		if gs.IsLeader {
			r.Voters, r.Learners = gs.Members()
		}
	}
	p.usageMu.Lock()
	defer p.usageMu.Unlock()
	if time.Since(p.usageAt) > p.h.opts.UsageTTL {
		if u, err := p.st().Usage(); err == nil {
			p.usage, p.usageAt = u, time.Now()
		}
	}
	r.ReadOnly = p.st().Err() != nil || p.h.space.Full()
	r.LogicalBytes = uint64(max(p.st().LogicalBytes(), 0))
	r.UsedBytes = uint64(p.usage.PhysicalBytes)
	r.Items = uint64(p.usage.Extents)
	if e := p.syncedEpoch.Load(); e != 0 && e == p.view().epoch {
		r.InSyncEpoch = e
	}
	return r
}

// checkStore reopens a store that failed (a failed fsync or metadata
// write leaves what is durable unknown in memory; reopening recovers the
// last committed state, and alignment then fills what is missing), and one
// that turned read-only on ENOSPC once ResumeFreeRatio of the disk is free
// again (a write that hit ENOSPC may have left a torn tail, which the same
// reopen and alignment repair). A store whose metadata is damaged is
// rebuilt from peers.
//
// A reopen that fails (its redo of the journal cannot write: the disk is
// still full) leaves the old store closed; the next pass tries again, so
// that the replica does not stay closed until the node restarts. While the
// disk is full a failed store is not reopened: the redo would fail too.
func (p *partition) checkStore() {
	st := p.st()
	err := st.Err()
	room := func() (uint64, bool) {
		free, total, ferr := p.h.opts.FreeSpace(p.dir)
		return free, ferr == nil && total != 0 && float64(free) >= ResumeFreeRatio*float64(total)
	}
	switch {
	case err == nil:
		return
	case errors.Is(err, extentstore.ErrFailed), errors.Is(err, extentstore.ErrClosed) && p.ctx.Err() == nil:
		full := errors.Is(err, extentstore.ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, extentstore.ErrClosed)
		if _, ok := room(); full && !ok {
			return // the disk is full: the reopen's redo would fail
		}
		p.log.Error("extent store failed; reopening", "err", err)
	case errors.Is(err, extentstore.ErrReadOnly):
		free, ok := room()
		if !ok {
			return // still full: keep refusing new data
		}
		p.log.Info("disk has room again; reopening the read-only extent store", "free_bytes", free, "err", err)
	default:
		return
	}
	if cerr := st.Close(); cerr != nil && !errors.Is(cerr, extentstore.ErrClosed) {
		p.log.Warn("close failed store", "err", cerr)
	}
	ns, oerr := extentstore.Open(p.dir, p.h.opts.Store)
	if errors.Is(oerr, extentstore.ErrCorruptMeta) {
		ns, oerr = rebuildStore(p.h, p.dir, oerr)
		if oerr == nil {
			p.rebuilding.Store(true)
		}
	}
	if oerr != nil {
		p.log.Error("reopen extent store", "err", oerr)
		return
	}
	p.h.m.reopens.Inc()
	// Marked before the new store serves: it lacks the overwrites the old
	// one failed to apply, and a read between the two would get old bytes.
	p.markAllStale()
	p.store.Store(ns)
}
