package datanode

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
)

// A data node shares its file system with its Raft log (Pebble, in the
// node's db) and with its stores' metadata logs. Pebble ends the process
// when its log cannot be written, and a store that cannot write its
// metadata fails; so when the disk fills, whoever filled it (this node's
// own data, or anything else on the disk), room must be left for those.
// The node holds a reserve file of ReserveBytes while the disk has room;
// once free space falls below half of it, the node frees the file, giving
// that room to its logs, and refuses new data (CodeReadOnly, so clients
// move to other partitions) until ResumeFreeRatio of the disk is free
// again and the reserve is taken back. This is the ballast of CubeFS's
// reserved space and of Ceph's full ratios, kept as a file so that it is
// there to give back even when something else fills the disk.

// ReserveName is the reserve file's name in the data dir.
const ReserveName = "reserve"

// reserveEvery is how often the reserve looks at the disk's free space.
const reserveEvery = 100 * time.Millisecond

// defaultReserve is Options.ReserveBytes's default for a file system of
// total bytes: 2% of it, at least 16 MiB, at most 1 GiB, and never more
// than 5% of a small disk.
func defaultReserve(total uint64) int64 {
	return min(max(int64(total/50), 16<<20), 1<<30, int64(total/20))
}

// reserve is the data node's ballast file and what it says about the disk.
type reserve struct {
	path string
	dir  string
	size int64 // 0: the disk's default, once known
	free func(dir string) (free, total uint64, err error)
	log  *slog.Logger

	mu   sync.Mutex
	held int64 // bytes the file holds
	// full: the reserve was given up (or never taken) for lack of room;
	// new data is refused.
	full atomic.Bool
	// seen: the first check ran; until then nothing is refused.
	seen bool

	stop chan struct{}
	done chan struct{}
}

// newReserve makes the reserve of dir; size 0 picks defaultReserve, a
// negative one turns the reserve off. It checks once before it returns.
func newReserve(dir string, size int64, free func(string) (uint64, uint64, error), log *slog.Logger) *reserve {
	r := &reserve{path: filepath.Join(dir, ReserveName), dir: dir, size: size, free: free, log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
	if fi, err := os.Stat(r.path); err == nil {
		r.held = fi.Size()
	}
	r.check()
	return r
}

// run checks the disk every reserveEvery until close.
func (r *reserve) run() {
	defer close(r.done)
	t := time.NewTicker(reserveEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.check()
		}
	}
}

func (r *reserve) close() {
	close(r.stop)
	<-r.done
}

// Full reports whether the node refuses new data for lack of room.
func (r *reserve) Full() bool { return r != nil && r.full.Load() }

// check is one look at the disk: give the reserve up when free space is
// below half of it, take it back when ResumeFreeRatio of the disk is free.
func (r *reserve) check() {
	if r.size < 0 {
		return
	}
	free, total, err := r.free(r.dir)
	if err != nil || total == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := r.size
	if size == 0 {
		size = defaultReserve(total)
	}
	switch {
	case !r.full.Load() && int64(free) < size/2:
		r.full.Store(true)
		if err := r.release(); err != nil {
			r.log.Error("disk nearly full: could not free the reserve", "path", r.path, "err", err)
		}
		r.log.Error("disk nearly full: reserve freed for the node's logs; refusing new data until it has room",
			"free_bytes", free, "freed_bytes", size, "resume_at_free_bytes", uint64(ResumeFreeRatio*float64(total)))
	case r.full.Load() && float64(free) >= ResumeFreeRatio*float64(total) && int64(free) >= 2*size,
		!r.seen && int64(free) >= 2*size:
		if err := r.take(size); err != nil {
			r.log.Warn("could not take the disk reserve back", "path", r.path, "err", err)
			return
		}
		if r.full.Swap(false) {
			r.log.Info("disk has room again; reserve taken back, taking new data", "free_bytes", free)
		}
	case !r.seen:
		r.full.Store(true) // starting on a disk with no room for the reserve
		r.log.Error("disk nearly full at start: refusing new data until it has room", "free_bytes", free, "reserve_bytes", size)
	}
	r.seen = true
}

// take makes the reserve file hold size bytes of the disk.
func (r *reserve) take(size int64) error {
	if r.held >= size {
		return nil
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		_ = f.Truncate(r.held)
		return fmt.Errorf("reserve: allocate %d bytes: %w", size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	r.held = size
	return nil
}

// release gives the reserve's bytes back to the file system.
func (r *reserve) release() error {
	err := os.Truncate(r.path, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reserve: %w", err)
	}
	r.held = 0
	return nil
}

// addsData reports whether op stores new bytes (which a node whose disk is
// nearly full refuses); a free, a read or a check does not.
func addsData(op dataproto.Op) bool {
	switch op {
	case dataproto.OpCreateExtent, dataproto.OpAppend, dataproto.OpWriteSmall, dataproto.OpOverwrite, dataproto.OpWriteChunk:
		return true
	}
	return false
}
