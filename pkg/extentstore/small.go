package extentstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// smallPool hands out small extents to writers, one writer per extent at a
// time, so that a small file's bytes are appended at an offset nobody else
// is appending at. At most Options.OpenSmallExtents leases exist at once;
// free holds the open (not full, not leased) small extents, at most as many.
//
// The pool only ever holds extents this store created since it was opened
// and since the last SealSmall (gen counts the seals): an extent is
// appended to by one primary, for as long as it stays primary, and so at
// offsets no replica has seen bytes for. A store opened anew may have lost
// appends it had forwarded (bytes past its last commit), and another
// primary may have appended meanwhile at offsets where this one holds bytes
// nobody acknowledged: appending there again would give the replicas
// different bytes at the same acknowledged offsets, which alignment (by
// size) does not see.
type smallPool struct {
	s      *Store
	tokens chan struct{} // one per lease held
	mu     sync.Mutex
	free   []uint64
	gen    uint64
}

func (p *smallPool) init(s *Store) {
	p.s = s
	p.tokens = make(chan struct{}, s.opt.OpenSmallExtents)
}

// seal empties the pool; leases out now are not taken back.
func (p *smallPool) seal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = nil
	p.gen++
}

func (p *smallPool) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
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

// push returns extent id, leased at generation gen, to the pool unless a
// seal came since.
func (p *smallPool) push(id, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen == p.gen && len(p.free) < cap(p.tokens) {
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
	gen  uint64 // the pool's generation when leased
	done atomic.Bool
}

// LeaseSmall leases an open small extent, creating one (NewExtent) when
// none is free, and waits, until ctx is done, while
// Options.OpenSmallExtents leases are out. The holder appends one or more
// small files (each at most Options.SmallFileMax bytes), replicates and
// syncs them, and calls Release; an extent that has reached
// Options.SmallExtentBytes is then retired from the pool (it stays readable
// and punchable). Only extents created since the store was opened and
// since the last SealSmall are handed out (see smallPool).
func (s *Store) LeaseSmall(ctx context.Context) (*SmallLease, error) {
	if err := s.stateError(stateOK); err != nil {
		return nil, fmt.Errorf("lease small extent: %w", err)
	}
	select {
	case s.small.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lease small extent: %w", ctx.Err())
	}
	gen := s.small.generation()
	for {
		id, ok := s.small.pop()
		if !ok {
			break
		}
		if info, err := s.Stat(id); err == nil && info.Size < s.opt.SmallExtentBytes {
			return &SmallLease{s: s, id: id, gen: gen}, nil
		}
	}
	id, err := s.NewExtent(KindSmall)
	if err != nil {
		<-s.small.tokens
		return nil, fmt.Errorf("lease small extent: %w", err)
	}
	return &SmallLease{s: s, id: id, gen: gen}, nil
}

// SealSmall stops handing out the small extents created so far: the next
// LeaseSmall creates a new one, and leases out now end as Retire does. The
// data node calls it when this replica stops being its partition's primary,
// so that if it becomes primary again it appends only to extents it creates
// then (see smallPool).
func (s *Store) SealSmall() { s.small.seal() }

// Extent returns the leased extent's id.
func (l *SmallLease) Extent() uint64 { return l.id }

// Release returns the lease; further calls (and Retire) do nothing.
func (l *SmallLease) Release() {
	if !l.done.CompareAndSwap(false, true) {
		return
	}
	if info, err := l.s.Stat(l.id); err == nil && info.Size < l.s.opt.SmallExtentBytes {
		l.s.small.push(l.id, l.gen)
	}
	<-l.s.small.tokens
}

// Retire returns the lease without handing the extent out again: the
// holder calls it when an append to the extent failed on some replica, so
// that the replicas may disagree on the extent's size and no further small
// file should go there. The extent stays readable and punchable. Further
// calls (and Release) do nothing.
func (l *SmallLease) Retire() {
	if !l.done.CompareAndSwap(false, true) {
		return
	}
	<-l.s.small.tokens
}
