package datanode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/membership"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// minAlignGap spaces alignment passes triggered by kicks (a storm of failed
// appends must not become a storm of listings).
const minAlignGap = 500 * time.Millisecond

// maintain is the partition's background goroutine: alignment with peers
// (at start, every AlignInterval, and when kicked), paced scrubbing every
// ScrubInterval, repair of blocks reads found bad, and reopening a failed
// store. It is owned by the partition and ends with p.ctx.
func (p *partition) maintain() {
	defer p.wg.Done()
	opts := p.h.opts
	alignT := time.NewTimer(opts.AlignDelay)
	defer alignT.Stop()
	// The first scrub comes at a random point of the interval, so that
	// partitions opened together do not scrub together.
	scrubT := time.NewTimer(opts.ScrubInterval/2 + rand.N(opts.ScrubInterval/2+1))
	defer scrubT.Stop()
	moveT := time.NewTicker(moveInterval)
	defer moveT.Stop()
	journalT := time.NewTicker(opts.JournalIdleAfter)
	defer journalT.Stop()
	var journalSeen int64
	var last time.Time
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-moveT.C:
			if p.retiring.Load() {
				p.checkRetired()
			} else {
				p.driveMove()
			}
			continue
		case bb := <-p.repairs:
			p.repair(bb)
			continue
		case <-journalT.C:
			journalSeen = p.compactIdle(journalSeen)
			continue
		case <-scrubT.C:
			p.scrub()
			scrubT.Reset(opts.ScrubInterval)
			continue
		case <-p.kick:
			if wait := minAlignGap - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-p.ctx.Done():
					return
				}
			}
		case <-alignT.C:
		}
		if p.retiring.Load() {
			alignT.Reset(opts.AlignInterval)
			continue // no longer a replica: nothing to align
		}
		last = time.Now()
		p.checkStore()
		p.leadFromPrimary()
		next := opts.AlignInterval
		if err := p.align(p.ctx); err != nil && p.ctx.Err() == nil {
			p.h.m.alignErrors.Inc()
			p.log.Warn("alignment with peers failed; retrying", "err", err)
			next = min(next, 2*time.Second)
		}
		if len(p.behind) > 0 || p.skippedLag {
			next = min(next, opts.AlignQuietPeriod+opts.AlignQuietPeriod/4)
		}
		if v := p.view(); (v.self(v.stale) && p.syncedEpoch.Load() != v.epoch) || v.joining == v.node {
			next = min(next, 2*time.Second) // a stale or joining replica catches up promptly
		}
		alignT.Reset(next)
	}
}

// compactIdle rewrites the store's metadata log if it has grown by
// Options.JournalIdleBytes since its last rewrite and not since the last
// look, which saw it at seen bytes; it returns the length to compare with
// next time.
func (p *partition) compactIdle(seen int64) int64 {
	st := p.st()
	j := st.Journal()
	if j.Bytes != seen || j.Bytes-j.SnapshotBytes < p.h.opts.JournalIdleBytes || st.Err() != nil {
		return j.Bytes
	}
	if err := st.Compact(); err != nil {
		p.log.Warn("rewriting the idle metadata log", "err", err)
		return j.Bytes
	}
	after := st.Journal()
	p.h.m.journalCompactions.Inc()
	p.h.m.journalReclaimed.Add(float64(max(j.Bytes-after.Bytes, 0)))
	return after.Bytes
}

// moveInterval is how often a partition's leader checks for a replica move
// to drive.
const moveInterval = 500 * time.Millisecond

// driveMove makes the next Raft configuration change of a replica move the
// map asks for, or removes a member an abandoned move left, if this replica
// leads the partition's group.
func (p *partition) driveMove() {
	v := p.view()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	step, err := membership.Drive(ctx, p.h.env.Raft, multiraft.GroupID(p.id), v.node, v.replicas, v.joining, v.leaving, true)
	if err != nil {
		p.log.Warn("replica move", "joining", v.joining, "leaving", v.leaving, "step", step.Kind.String(), "err", err)
	} else if step.Kind != membership.None {
		p.log.Info("replica move", "joining", v.joining, "leaving", v.leaving, "step", step.Kind.String(), "node", step.Node)
	}
}

// leadFromPrimary hands Raft leadership of the partition to the head of
// its write chain when this replica leads instead: reads go to the head
// first, and the leader is the replica that has applied every acknowledged
// overwrite, so read-after-overwrite holds there.
func (p *partition) leadFromPrimary() {
	v := p.view()
	if v.head == 0 || v.head == v.node || v.head == v.leaving {
		return // a head being moved away must not get leadership back
	}
	gs, err := p.h.env.Raft.Status(multiraft.GroupID(p.id))
	if err != nil || !gs.IsLeader {
		return
	}
	if err := p.h.env.Raft.TransferLeader(multiraft.GroupID(p.id), multiraft.NodeID(v.head)); err != nil {
		p.log.Debug("transfer leadership to the head of the chain", "err", err)
	}
}

// align brings this replica in line with a peer (CFS §2.2.5):
//
//   - a follower takes the list of the write chain's head: it creates the
//     extents it lacks, appends the committed bytes it lacks (copied from
//     the head), and deletes the extents the head no longer has (freed
//     while this replica was away);
//   - extents marked stale (an overwrite this replica could not apply, a
//     Raft snapshot installed, a store reopened or rebuilt) are also
//     compared block by block (CRCs) with the peer, and differing blocks
//     copied with Overwrite.
//
// The head holds every acknowledged byte by construction (pkg/replicaset:
// a stale replica never heads the chain), so it is a follower's only
// source, and the head itself aligns only stale extents, from fresh
// followers, never deleting or extending from their lists unless it is
// being rebuilt. With no head that may lead, nobody aligns.
//
// A follower in the chain that completes a pass with nothing left behind
// records the partition epoch it did so at (syncedEpoch): the master clears
// its stale mark on that report.
func (p *partition) align(ctx context.Context) error {
	v := p.view()
	if !v.member() || v.head == 0 {
		return nil
	}
	marks, all, _ := p.staleState()
	full := all != 0 || len(marks) > 0 || p.rebuilding.Load()
	head := v.head == v.node
	if head && !full {
		return nil
	}
	var sources []uint64
	if head {
		for _, r := range v.chain {
			if r != v.node && !slices.Contains(v.stale, r) {
				sources = append(sources, r)
			}
		}
	} else {
		sources = []uint64{v.head}
	}
	var errs []error
	for _, src := range sources {
		// The marks as they stand now: a source tried before this one
		// cleared those it compared.
		marks, all, gen := p.staleState()
		err := p.alignFrom(ctx, src, !head, marks, all, gen)
		if err == nil {
			if !head && (v.pos > 0 || v.joining == v.node) {
				p.noteSynced(v)
			}
			return nil
		}
		errs = append(errs, fmt.Errorf("from node %d: %w", src, err))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// noteSynced records that a follower pass begun at view v left nothing to
// do: no extent behind the head, none marked stale, not rebuilding, Raft
// caught up with what it knows to be committed, and the replica set
// unchanged since the pass began.
//
// The head must also have listed its extents at v's epoch or later, and
// this replica must hold every byte of that list. Until the head learns the
// replica set that puts this replica in the chain, it acknowledges appends
// without it; a pass that compared against such a head could find nothing
// missing just before the head appended more, and report a replica in sync
// that lacks acknowledged bytes (the master would then clear its stale
// mark, and no pass would come back for AlignInterval).
func (p *partition) noteSynced(v chainView) {
	if len(p.behind) > 0 || p.skippedLag || p.sizeLag || p.rebuilding.Load() || p.sourceEpoch < v.epoch {
		return
	}
	if marks, all, _ := p.staleState(); all != 0 || len(marks) > 0 {
		return
	}
	if gs, err := p.h.env.Raft.Status(multiraft.GroupID(p.id)); err != nil || gs.Applied < gs.Commit {
		return
	}
	if p.view().epoch != v.epoch {
		return
	}
	if p.syncedEpoch.Swap(v.epoch) != v.epoch && v.self(v.stale) {
		p.log.Info("caught up with the head of the chain", "head", v.head, "epoch", v.epoch)
		p.h.env.Refresh() // report it now
	}
}

func (p *partition) alignFrom(ctx context.Context, src uint64, follower bool, marks map[uint64]uint64, all, gen uint64) error {
	addr, ok := p.h.env.ResolveData(src)
	if !ok || addr == "" {
		return fmt.Errorf("no data-path address known for node %d", src)
	}
	conn, err := p.h.peers.get(ctx, addr)
	if err != nil {
		return err
	}
	st := p.st()
	rebuilding := p.rebuilding.Load()
	extend := follower || rebuilding
	local := st.Extents()
	quiet := p.h.opts.AlignQuietPeriod
	p.behindSeen = map[uint64]bool{}
	defer func() {
		for id := range p.behind {
			if !p.behindSeen[id] {
				delete(p.behind, id) // caught up by the chain, or gone
			}
		}
	}()
	p.skippedLag, p.sizeLag, p.sourceEpoch = false, false, 0
	var after uint64
	var copied int64
	notReady := 0 // marked extents the source could not answer for
	for page := 0; ; page++ {
		h, payload, err := conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{
			Op: dataproto.OpListExtents, Partition: p.id, Arg: after, Flags: dataproto.FlagForwarded,
		}})
		if err != nil {
			return fmt.Errorf("list extents: %w", err)
		}
		if page == 0 || h.Epoch < p.sourceEpoch {
			p.sourceEpoch = h.Epoch
		}
		entries, err := dataproto.DecodeExtentEntries(payload)
		if err != nil {
			return fmt.Errorf("list extents: %w", err)
		}
		if len(entries) == 0 {
			break
		}
		last := entries[len(entries)-1].ID
		remote := make(map[uint64]bool, len(entries))
		for _, e := range entries {
			remote[e.ID] = true
			_, marked := marks[e.ID]
			full := all != 0 || marked || rebuilding
			grow := extend
			if follower && p.recentlyAppended(e.ID, quiet) {
				// A stream is writing it: the chain, not alignment, feeds it.
				// If this replica is behind on it all the same (the stream
				// failed here), come back after the quiet period rather than
				// at the next interval. Its blocks below both committed
				// sizes are still compared when it is marked: the mark is
				// cleared below, and a small-file extent is appended to all
				// the time.
				if info, err := st.Stat(e.ID); err == nil && info.Size < e.Committed {
					p.skippedLag = true
				}
				if !full {
					continue
				}
				grow = false
			}
			n, err := p.alignExtent(ctx, conn, st, e, grow, full)
			copied += n
			if errors.Is(err, errSourceNotReady) {
				// The source awaits repair of this extent too, or cannot
				// confirm it has applied every overwrite: nothing to
				// compare with yet. The other extents go on.
				p.log.Info("source cannot answer for an extent marked here yet", "extent", e.ID, "source", src, "err", err)
				p.keepStale(e.ID)
				notReady++
				continue
			}
			if err != nil {
				return fmt.Errorf("extent %d: %w", e.ID, err)
			}
			if e.Size > 0 {
				if info, err := st.Stat(e.ID); err != nil || info.Size < e.Size {
					p.sizeLag = true
				}
			}
		}
		if follower {
			// Ids only grow, so a local extent at or below the last id of a
			// page that the page lacks was deleted at the source (one
			// created later would have a larger id).
			i := sort.Search(len(local), func(i int) bool { return local[i].ID > after })
			for ; i < len(local) && local[i].ID <= last; i++ {
				id := local[i].ID
				if remote[id] {
					continue
				}
				if err := st.DeleteExtent(id); err != nil && !errors.Is(err, extentstore.ErrNotFound) {
					return fmt.Errorf("delete extent %d freed at the primary: %w", id, err)
				}
				p.log.Info("deleted an extent the primary no longer has", "extent", id)
			}
		}
		if h.Flags&dataproto.FlagMore == 0 {
			break
		}
		after = last
	}
	if err := st.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	ids := make([]uint64, 0, len(marks))
	for id := range marks {
		ids = append(ids, id)
	}
	p.clearStale(gen, all != 0 || rebuilding, ids...)
	if rebuilding {
		p.rebuilding.Store(false)
		p.log.Info("rebuilt from a peer", "source", src)
	}
	if copied > 0 {
		p.log.Info("aligned extents with a peer", "source", src, "bytes", copied)
	}
	if notReady > 0 {
		// Their marks stay (keepStale); another source may answer.
		return fmt.Errorf("%d extents marked here: %w", notReady, errSourceNotReady)
	}
	return nil
}

// alignExtent brings one extent in line with remote entry e: creating it
// and appending its missing committed tail when extend, comparing every
// whole block below both committed sizes when full. It returns the bytes
// copied.
func (p *partition) alignExtent(ctx context.Context, conn *dataproto.Conn, st *extentstore.Store, e dataproto.ExtentEntry, extend, full bool) (int64, error) {
	info, err := st.Stat(e.ID)
	created := false
	switch {
	case errors.Is(err, extentstore.ErrNotFound):
		created = true
		if !extend || e.Committed == 0 {
			return 0, nil // an empty extent's creation may still be on its way down the chain
		}
		if err := st.CreateExtent(e.ID, extentstore.Kind(e.Kind)); err != nil {
			if errors.Is(err, extentstore.ErrExists) {
				return 0, nil // deleted here, deletion not yet committed
			}
			return 0, err
		}
		info = extentstore.ExtentInfo{ID: e.ID, Kind: extentstore.Kind(e.Kind)}
	case err != nil:
		return 0, err
	}
	var copied int64
	if extend && info.Size < e.Committed && (created || p.view().pos < 0 || p.settled(e)) {
		// No chain to race: a replica outside the write chain (joining by
		// a move, or held down) gets no forwarded appends, and an extent
		// this replica did not have fails every append sent here until
		// alignment created it. Copy at once.
		n, err := p.copyTail(ctx, conn, st, info, e.Committed)
		copied += n
		if err != nil {
			return copied, err
		}
	}
	if full {
		n, err := p.compareBlocks(ctx, conn, st, e)
		copied += n
		if err != nil {
			return copied, err
		}
	}
	return copied, nil
}

// settled reports whether the source's committed size of e has stayed the
// same for AlignQuietPeriod, as seen by successive passes. A follower is
// behind the primary for a moment on every packet (the primary commits
// while the packet travels down the chain); copying then would race the
// chain. Only a lag that lasts is repaired, one quiet period after it was
// first seen (the maintenance loop comes back in time).
func (p *partition) settled(e dataproto.ExtentEntry) bool {
	now := time.Now()
	p.behindSeen[e.ID] = true
	if s, ok := p.behind[e.ID]; ok && s.committed == e.Committed {
		if now.Sub(s.since) >= p.h.opts.AlignQuietPeriod {
			delete(p.behind, e.ID)
			return true
		}
		return false
	}
	if len(p.behind) >= maxBehind {
		return false
	}
	p.behind[e.ID] = behindSince{committed: e.Committed, since: now}
	return false
}

// maxBehind bounds the lagging extents remembered between passes.
const maxBehind = 1 << 16

type behindSince struct {
	committed int64
	since     time.Time
}

// copyTail appends the source's bytes [info.Size, to) of the extent.
func (p *partition) copyTail(ctx context.Context, conn *dataproto.Conn, st *extentstore.Store, info extentstore.ExtentInfo, to int64) (int64, error) {
	chunk := int64(p.h.opts.maxWrite())
	if info.Kind == extentstore.KindSmall {
		chunk = min(chunk, int64(p.h.opts.smallMax()))
	}
	buf := make([]byte, min(chunk, to-info.Size))
	var copied int64
	for off := info.Size; off < to; {
		n := min(chunk, to-off)
		if err := p.h.recovery.wait(ctx, n); err != nil {
			return copied, err
		}
		_, data, err := conn.Do(ctx, &dataproto.Request{
			Header: dataproto.Header{Op: dataproto.OpRead, Partition: p.id, Extent: info.ID, Offset: off, Arg: uint64(n), Size: to, Flags: dataproto.FlagForwarded | dataproto.FlagVerify},
			Dst:    buf,
		})
		if err != nil {
			return copied, fmt.Errorf("read [%d,%d): %w", off, off+n, err)
		}
		if int64(len(data)) != n {
			return copied, fmt.Errorf("read [%d,%d): got %d bytes", off, off+n, len(data))
		}
		if _, err := st.Append(info.ID, off, data); err != nil {
			return copied, err
		}
		off += n
		copied += n
		p.h.m.alignedBytes.Add(float64(n))
	}
	return copied, nil
}

// errSourceNotReady is a source's refusal to answer for an extent: it
// awaits repair itself, or cannot confirm its state (see
// session.checksums).
var errSourceNotReady = errors.New("the source cannot answer for the extent yet")

// compareBlocks overwrites every whole block below both committed sizes
// whose CRC differs from the source's with the source's bytes, but for
// the holes punched here (copyLive: their files were deleted).
//
// A copied block holds what the source had applied when it answered (its
// read barrier makes that every overwrite committed before the read was
// asked for); an overwrite applied here meanwhile may be newer, and the
// copy would undo it. So an extent an overwrite applied to while blocks
// were copied stays marked, for the next pass.
func (p *partition) compareBlocks(ctx context.Context, conn *dataproto.Conn, st *extentstore.Store, e dataproto.ExtentEntry) (copied int64, err error) {
	before := p.overwrittenAt(e.ID)
	defer func() {
		if copied > 0 && p.overwrittenAt(e.ID) != before {
			p.log.Info("an overwrite applied while alignment copied blocks; comparing again next pass", "extent", e.ID)
			p.keepStale(e.ID)
		}
	}()
	var remote []uint32
	var bs, rsize int64
	for {
		h, payload, err := conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{
			Op: dataproto.OpChecksums, Partition: p.id, Extent: e.ID, Arg: uint64(len(remote)), Flags: dataproto.FlagForwarded,
		}})
		switch dataproto.CodeOf(err) {
		case dataproto.CodeNotFound:
			return 0, nil // freed at the source meanwhile
		case dataproto.CodeNotHeld:
			return 0, fmt.Errorf("checksums: %w: %v", errSourceNotReady, err)
		}
		if err != nil {
			return 0, fmt.Errorf("checksums: %w", err)
		}
		crcs, err := dataproto.DecodeChecksums(payload)
		if err != nil {
			return 0, err
		}
		remote = append(remote, crcs...)
		bs, rsize = int64(h.Arg), h.Size
		if h.Flags&dataproto.FlagMore == 0 || len(crcs) == 0 {
			break
		}
	}
	if bs != int64(st.BlockSize()) {
		return 0, fmt.Errorf("block size %d at the source, %d here: cannot compare", bs, st.BlockSize())
	}
	_, local, err := st.Checksums(e.ID)
	if err != nil {
		return 0, err
	}
	info, err := st.Stat(e.ID)
	if err != nil {
		return 0, err
	}
	limit := min(info.Committed, e.Committed, rsize)
	buf := make([]byte, bs)
	for b := int64(0); b < limit/bs && b < int64(len(local)) && b < int64(len(remote)); b++ {
		if local[b] == remote[b] {
			continue
		}
		if err := p.h.recovery.wait(ctx, bs); err != nil {
			return copied, err
		}
		_, data, err := conn.Do(ctx, &dataproto.Request{
			Header: dataproto.Header{Op: dataproto.OpRead, Partition: p.id, Extent: e.ID, Offset: b * bs, Arg: uint64(bs), Size: limit, Flags: dataproto.FlagForwarded | dataproto.FlagVerify},
			Dst:    buf,
		})
		if err != nil {
			return copied, fmt.Errorf("read block %d: %w", b, err)
		}
		n, err := p.copyLive(st, e.ID, b*bs, data)
		copied += n
		if err != nil {
			return copied, fmt.Errorf("block %d: %w", b, err)
		}
	}
	// The partial block at the end (a small extent has only that one):
	// its CRCs cover each side's own size, so they compare only when the
	// sizes are equal; otherwise the bytes both sides hold are compared.
	if b, from := limit/bs, limit/bs*bs; from < limit {
		if info.Size == rsize && b < int64(len(local)) && b < int64(len(remote)) && local[b] == remote[b] {
			return copied, nil
		}
		n, err := p.compareTail(ctx, conn, st, e.ID, from, limit)
		copied += n
		if err != nil {
			return copied, fmt.Errorf("bytes [%d,%d): %w", from, limit, err)
		}
	}
	return copied, nil
}

// compareTail overwrites bytes [from, to) of extent ext with the source's
// when they differ; it returns the bytes copied.
func (p *partition) compareTail(ctx context.Context, conn *dataproto.Conn, st *extentstore.Store, ext uint64, from, to int64) (int64, error) {
	n := to - from
	if err := p.h.recovery.wait(ctx, n); err != nil {
		return 0, err
	}
	_, theirs, err := conn.Do(ctx, &dataproto.Request{
		Header: dataproto.Header{Op: dataproto.OpRead, Partition: p.id, Extent: ext, Offset: from, Arg: uint64(n), Size: to, Flags: dataproto.FlagForwarded | dataproto.FlagVerify},
	})
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	if int64(len(theirs)) != n {
		return 0, fmt.Errorf("read: got %d bytes of %d", len(theirs), n)
	}
	ours := make([]byte, n)
	if _, err := st.ReadAt(ext, ours, from); err != nil {
		return 0, err
	}
	if bytes.Equal(ours, theirs) {
		return 0, nil
	}
	return p.copyLive(st, ext, from, theirs)
}

// copyLive writes a peer's bytes theirs over bytes [off, off+len(theirs))
// of extent ext, except where a hole is punched here: a deleted small
// file's range stays a hole, and the live files beside it in the same
// block get the peer's bytes. It returns the bytes written. (A block
// holding one deleted file used to be skipped whole, and alignment then
// cleared the extent's mark with a live file's overwrite missing: a
// replica whose disk had been full served the bytes that overwrite
// replaced; the simulation found it, test/sim, seed 1009.)
func (p *partition) copyLive(st *extentstore.Store, ext uint64, off int64, theirs []byte) (int64, error) {
	err := st.Overwrite(ext, off, theirs)
	if err == nil {
		p.h.m.alignedBytes.Add(float64(len(theirs)))
		return int64(len(theirs)), nil
	}
	if !errors.Is(err, extentstore.ErrPunched) {
		return 0, err
	}
	live, err := st.Unpunched(ext, off, int64(len(theirs)))
	if err != nil {
		return 0, err
	}
	var copied int64
	for _, r := range live {
		part := theirs[r.Off-off : r.Off-off+r.Len]
		ours := make([]byte, r.Len)
		if _, err := st.ReadAt(ext, ours, r.Off); err != nil {
			return copied, err
		}
		if bytes.Equal(ours, part) {
			continue
		}
		if err := st.Overwrite(ext, r.Off, part); err != nil {
			if errors.Is(err, extentstore.ErrPunched) {
				continue // the file there was deleted here meanwhile
			}
			return copied, err
		}
		copied += r.Len
		p.h.m.alignedBytes.Add(float64(r.Len))
	}
	return copied, nil
}

// scrub reads the whole partition at the configured pace and repairs what
// fails its checksum.
func (p *partition) scrub() {
	bad, err := p.st().Scrub(p.ctx, extentstore.ScrubOptions{BytesPerSecond: p.h.opts.ScrubBytesPerSecond})
	if err != nil && p.ctx.Err() == nil {
		p.log.Warn("scrub stopped", "err", err)
	}
	for _, bb := range bad {
		p.h.m.badBlocks.Inc()
		p.repair(bb)
	}
}

// repair restores a bad block from the first peer whose bytes match the CRC
// this replica recorded; if none does, the extent is marked for full
// alignment.
func (p *partition) repair(bb extentstore.BadBlock) {
	v := p.view()
	st := p.st()
	for _, r := range v.replicas {
		if r == v.node {
			continue
		}
		addr, ok := p.h.env.ResolveData(r)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		conn, err := p.h.peers.get(ctx, addr)
		var data []byte
		if err == nil {
			_, data, err = conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{
				Op: dataproto.OpRead, Partition: p.id, Extent: bb.Extent, Offset: bb.Offset, Arg: uint64(bb.Length),
				Size: bb.Offset + bb.Length, Flags: dataproto.FlagForwarded | dataproto.FlagVerify,
			}})
		}
		cancel()
		if err == nil {
			err = st.RepairBlock(bb.Extent, bb.Block, data)
		}
		if err == nil {
			p.h.m.repairedBlocks.Inc()
			p.log.Warn("repaired a bad block from a peer", "extent", bb.Extent, "block", bb.Block, "peer", r)
			return
		}
		p.log.Warn("repair from peer failed", "extent", bb.Extent, "block", bb.Block, "peer", r, "err", err)
	}
	p.markStale(bb.Extent)
}
