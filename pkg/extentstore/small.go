package extentstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// smallPool hands out small extents to writers, one writer per extent at a
// time, so that a small file's bytes are appended at an offset nobody else
// is appending at. At most Options.OpenSmallExtents leases exist at once;
// free holds the open (not full, not leased) small extents, at most as many.
type smallPool struct {
	s      *Store
	tokens chan struct{} // one per lease held
	mu     sync.Mutex
	free   []uint64
}

func (p *smallPool) init(s *Store) {
	p.s = s
	p.tokens = make(chan struct{}, s.opt.OpenSmallExtents)
	var ids []uint64
	for id, e := range s.extents {
		if e.kind == KindSmall && e.size < s.opt.SmallExtentBytes {
			ids = append(ids, id)
		}
	}
	// Newest first: the most recent extents are the least full.
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	if len(ids) > s.opt.OpenSmallExtents {
		ids = ids[:s.opt.OpenSmallExtents]
	}
	p.free = ids
}

func (p *smallPool) pop() (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return 0, false
	}
	id := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return id, true
}

func (p *smallPool) push(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < cap(p.tokens) {
		p.free = append(p.free, id)
	}
}

// forget drops a deleted extent from the free list.
func (p *smallPool) forget(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.free {
		if f == id {
			p.free = append(p.free[:i], p.free[i+1:]...)
			return
		}
	}
}

// SmallLease is the exclusive right, on this replica acting as primary, to
// append small files to one small extent: while a lease is held nobody
// else is handed that extent, so the offset the holder reads with Stat (or
// keeps from its last Append) is where its next small file goes. Replicas
// apply the primary's appends with Append at the same offsets and need no
// lease.
type SmallLease struct {
	s    *Store
	id   uint64
	done atomic.Bool
}

// LeaseSmall leases an open small extent, creating one (NewExtent) when
// none is free, and waits, until ctx is done, while
// Options.OpenSmallExtents leases are out. The holder appends one or more
// small files (each at most Options.SmallFileMax bytes), replicates and
// syncs them, and calls Release; an extent that has reached
// Options.SmallExtentBytes is then retired from the pool (it stays readable
// and punchable).
func (s *Store) LeaseSmall(ctx context.Context) (*SmallLease, error) {
	if err := s.stateError(stateOK); err != nil {
		return nil, fmt.Errorf("lease small extent: %w", err)
	}
	select {
	case s.small.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lease small extent: %w", ctx.Err())
	}
	for {
		id, ok := s.small.pop()
		if !ok {
			break
		}
		if info, err := s.Stat(id); err == nil && info.Size < s.opt.SmallExtentBytes {
			return &SmallLease{s: s, id: id}, nil
		}
	}
	id, err := s.NewExtent(KindSmall)
	if err != nil {
		<-s.small.tokens
		return nil, fmt.Errorf("lease small extent: %w", err)
	}
	return &SmallLease{s: s, id: id}, nil
}

// Extent returns the leased extent's id.
func (l *SmallLease) Extent() uint64 { return l.id }

// Release returns the lease; further calls (and Retire) do nothing.
func (l *SmallLease) Release() {
	if !l.done.CompareAndSwap(false, true) {
		return
	}
	if info, err := l.s.Stat(l.id); err == nil && info.Size < l.s.opt.SmallExtentBytes {
		l.s.small.push(l.id)
	}
	<-l.s.small.tokens
}

// Retire returns the lease without handing the extent out again (until the
// store is reopened): the holder calls it when an append to the extent failed
// on some replica, so that the replicas may disagree on the extent's size
// and no further small file should go there. The extent stays readable and
// punchable. Further calls (and Release) do nothing.
func (l *SmallLease) Retire() {
	if !l.done.CompareAndSwap(false, true) {
		return
	}
	<-l.s.small.tokens
}
