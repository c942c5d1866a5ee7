// Package client is the Cairn Go SDK. This part is the metadata half: it
// opens a volume, keeps the volume's routing view (meta partitions, slot
// table, inode ranges, node addresses) and runs POSIX metadata operations
// by inode handle against the meta partitions, orchestrating the
// cross-partition steps in the order that leaves only orphans after a crash
// (see docs/design.md, "Client metadata").
//
// Every Txn the client sends carries a request id, random per logical step
// and reused on every retry of that step, so a retry after an ambiguous
// failure is answered by the partition instead of applied twice.
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Options tune a Volume. Zero values take the defaults.
type Options struct {
	// OpTimeout bounds one operation (all its steps and retries) when the
	// caller's context has no deadline. Default 30 s.
	OpTimeout time.Duration
	// AttemptTimeout bounds one attempt of one step against a partition;
	// after it the client refreshes its view and retries the step with the
	// same request id. Default 5 s.
	AttemptTimeout time.Duration
	// RefreshInterval is how often a background goroutine re-reads the
	// cluster map to follow epoch changes. Default 30 s; negative disables.
	RefreshInterval time.Duration
	// Data tunes the data client files read and write through.
	Data dataclient.Options
}

func (o *Options) withDefaults() Options {
	out := Options{}
	if o != nil {
		out = *o
	}
	if out.OpTimeout <= 0 {
		out.OpTimeout = 30 * time.Second
	}
	if out.AttemptTimeout <= 0 {
		out.AttemptTimeout = 5 * time.Second
	}
	if out.RefreshInterval == 0 {
		out.RefreshInterval = 30 * time.Second
	}
	return out
}

// Bounds of retries and refreshes.
const (
	refreshMinGap = 200 * time.Millisecond // at most 5 map reads per second
	backoffMin    = 50 * time.Millisecond
	backoffMax    = time.Second
	maxWalkDepth  = 4096 // parent-pointer walk of the subtree check
	fanOut        = 16   // concurrent GetInode calls of ReadDirPlus
)

// Volume is an open volume. It is safe for concurrent use; Close releases
// it. Operations are by inode number; the root directory is RootIno.
type Volume struct {
	name string
	opts Options
	mc   *masterclient.Client
	pool *redirect.Pool
	meta *metaclient.Client

	mu   sync.RWMutex
	view *view

	refreshMu   sync.Mutex
	lastRefresh time.Time

	dataMu sync.Mutex
	data   *dataclient.Client // created by the first OpenFile

	bytesWritten, bytesRead, metaRequests atomic.Int64

	openMu   sync.Mutex
	opens    map[uint64]int  // ino -> open Files
	evictOff map[uint64]bool // ino -> lost its last link while open

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// RootIno is the inode number of every volume's root directory.
const RootIno = 1

// view is one version of the cluster map, reduced to what routing needs.
// Immutable once built.
type view struct {
	epoch   uint64
	vol     *pb.Volume
	table   *hybridindex.Table
	parts   map[uint64]*pb.Partition // the volume's meta partitions by id
	byStart []*pb.Partition          // the same, by inode_start
	nodes   map[uint64]string        // node id -> address
}

func newView(m *pb.ClusterMap, volume string) (*view, error) {
	var vol *pb.Volume
	for _, v := range m.GetVolumes() {
		if v.GetName() == volume {
			vol = v
		}
	}
	if vol == nil {
		return nil, errnoErr("open", syscall.ENOENT, "volume %q does not exist", volume)
	}
	w := &view{
		epoch: m.GetEpoch(), vol: vol,
		table: &hybridindex.Table{Slots: vol.GetSlotOwners()},
		parts: map[uint64]*pb.Partition{},
		nodes: map[uint64]string{},
	}
	if err := w.table.Validate(); err != nil {
		return nil, fmt.Errorf("volume %q: %w", volume, err)
	}
	for _, id := range vol.GetMetaPartitions() {
		p, ok := m.GetPartitions()[id]
		if !ok {
			return nil, fmt.Errorf("volume %q: meta partition %d is not in the map", volume, id)
		}
		w.parts[id] = p
		w.byStart = append(w.byStart, p)
	}
	for _, id := range w.table.MPs() {
		if _, ok := w.parts[id]; !ok {
			return nil, fmt.Errorf("volume %q: slot owner %d is not one of its meta partitions", volume, id)
		}
	}
	sort.Slice(w.byStart, func(i, j int) bool { return w.byStart[i].GetInodeStart() < w.byStart[j].GetInodeStart() })
	for id, n := range m.GetNodes() {
		w.nodes[id] = n.GetAddr()
	}
	return w, nil
}

// route returns the partition holding the dentry (parent, name).
func (w *view) route(parent uint64, name string) (*pb.Partition, error) {
	id, _ := w.table.Route(parent, name)
	p, ok := w.parts[id]
	if !ok {
		return nil, fmt.Errorf("name %q under %d routes to unknown meta partition %d", name, parent, id)
	}
	return p, nil
}

// home returns the partition whose inode range holds ino; ENOENT if none.
func (w *view) home(ino uint64) (*pb.Partition, error) {
	i := sort.Search(len(w.byStart), func(i int) bool { return w.byStart[i].GetInodeStart() > ino }) - 1
	if ino == 0 || i < 0 {
		return nil, errnoErr("route", syscall.ENOENT, "no meta partition holds inode %d", ino)
	}
	p := w.byStart[i]
	if end := p.GetInodeEnd(); end != 0 && ino > end {
		return nil, errnoErr("route", syscall.ENOENT, "no meta partition holds inode %d", ino)
	}
	return p, nil
}

// all returns the volume's meta partitions sorted by id.
func (w *view) all() []*pb.Partition {
	out := make([]*pb.Partition, 0, len(w.parts))
	for _, p := range w.parts {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *pb.Partition) int { return int(a.GetId()) - int(b.GetId()) })
	return out
}

// Open connects to the masters, reads the cluster map and opens volume. It
// fails with an *Error carrying ENOENT if the volume does not exist, or with
// the master client's error if no master answers before ctx ends.
func Open(ctx context.Context, masters []string, volume string, opts *Options) (*Volume, error) {
	o := opts.withDefaults()
	mc, err := masterclient.New(masters)
	if err != nil {
		return nil, err
	}
	v := &Volume{name: volume, opts: o, mc: mc, pool: redirect.NewPool(), stop: make(chan struct{})}
	v.meta = metaclient.New(v.pool, func(node uint64) (string, bool) {
		a, ok := v.current().nodes[node]
		return a, ok && a != ""
	})
	m, err := v.getMap(ctx)
	if err == nil {
		v.view, err = newView(m, volume)
	}
	if err != nil {
		v.pool.Close()
		mc.Close()
		return nil, fmt.Errorf("open volume %q: %w", volume, err)
	}
	v.lastRefresh = time.Now()
	if o.RefreshInterval > 0 {
		v.wg.Add(1)
		go v.refreshLoop()
	}
	return v, nil
}

// Close stops the background refresh and closes all connections. Calls
// after Close fail.
func (v *Volume) Close() error {
	v.once.Do(func() { close(v.stop) })
	v.wg.Wait()
	v.dataMu.Lock()
	if v.data != nil {
		v.data.Close()
	}
	v.dataMu.Unlock()
	v.pool.Close()
	return v.mc.Close()
}

// Name returns the volume's name.
func (v *Volume) Name() string { return v.name }

// Epoch returns the epoch of the cluster map the volume routes by.
func (v *Volume) Epoch() uint64 { return v.current().epoch }

// Partitions returns the ids of the volume's meta partitions, sorted.
func (v *Volume) Partitions() []uint64 {
	var out []uint64
	for _, p := range v.current().all() {
		out = append(out, p.GetId())
	}
	return out
}

// RouteName returns the meta partition that holds the name (parent, name)
// under the current view (0 if the table routes it nowhere).
func (v *Volume) RouteName(parent uint64, name string) uint64 {
	p, err := v.current().route(parent, name)
	if err != nil {
		return 0
	}
	return p.GetId()
}

// HomeOf returns the meta partition whose inode range holds ino (0 if none).
func (v *Volume) HomeOf(ino uint64) uint64 {
	p, err := v.current().home(ino)
	if err != nil {
		return 0
	}
	return p.GetId()
}

func (v *Volume) current() *view {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.view
}

func (v *Volume) getMap(ctx context.Context) (*pb.ClusterMap, error) {
	var resp *pb.GetMapResponse
	err := v.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetMap(), nil
}

// refresh re-reads the map, at most once per refreshMinGap, and installs it
// if its epoch is not older than the current view's.
func (v *Volume) refresh(ctx context.Context) {
	v.refreshMu.Lock()
	defer v.refreshMu.Unlock()
	if time.Since(v.lastRefresh) < refreshMinGap {
		return
	}
	v.lastRefresh = time.Now()
	m, err := v.getMap(ctx)
	if err != nil {
		return // keep routing by the old view; the caller retries
	}
	w, err := newView(m, v.name)
	if err != nil {
		return
	}
	v.mu.Lock()
	if w.epoch >= v.view.epoch {
		v.view = w
	}
	v.mu.Unlock()
}

func (v *Volume) refreshLoop() {
	defer v.wg.Done()
	t := time.NewTicker(v.opts.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), v.opts.AttemptTimeout)
			v.refreshMu.Lock()
			v.lastRefresh = time.Time{} // a periodic refresh always reads
			v.refreshMu.Unlock()
			v.refresh(ctx)
			cancel()
		}
	}
}

// opCtx bounds an operation by OpTimeout unless ctx has a deadline.
func (v *Volume) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, v.opts.OpTimeout)
}

// picker chooses the partition of a step from a view.
type picker func(w *view) (*pb.Partition, error)

func byName(parent uint64, name string) picker {
	return func(w *view) (*pb.Partition, error) { return w.route(parent, name) }
}

func byIno(ino uint64) picker {
	return func(w *view) (*pb.Partition, error) { return w.home(ino) }
}

func byID(id uint64) picker {
	return func(w *view) (*pb.Partition, error) {
		if p, ok := w.parts[id]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("meta partition %d is no longer in volume", id)
	}
}

// retryable reports whether a failed attempt may succeed elsewhere or
// later: no replica answered as leader, the partition is not where the map
// said, overload, or the attempt's own timeout.
func retryable(err error) bool {
	if errors.Is(err, redirect.ErrNoLeader) {
		return true
	}
	switch status.Code(errors.Unwrap(err)) {
	case codes.Unavailable, codes.ResourceExhausted, codes.NotFound, codes.DeadlineExceeded:
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.NotFound, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// do runs call against the partition pick chooses, retrying retryable
// failures with bounded backoff and a view refresh until ctx ends.
func (v *Volume) do(ctx context.Context, op string, pick picker, call func(ctx context.Context, p *pb.Partition) error) error {
	select {
	case <-v.stop:
		return errnoErr(op, syscall.EIO, "volume %q is closed", v.name)
	default:
	}
	backoff := backoffMin
	for {
		p, err := pick(v.current())
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Op = op
				return e
			}
			// The view does not know the partition: refresh and retry.
			v.refresh(ctx)
			if p, err = pick(v.current()); err != nil {
				return &Error{Op: op, Errno: syscall.EIO, Err: err}
			}
		}
		actx, cancel := context.WithTimeout(ctx, v.opts.AttemptTimeout)
		v.metaRequests.Add(1)
		err = call(actx, p)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retryable(err) {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
			}
			return transportErr(op, err)
		}
		v.refresh(ctx)
		select {
		case <-ctx.Done():
			return transportErr(op, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// newID returns a random non-zero 64-bit id (request ids, op ids, fence
// tokens).
func newID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// txn runs ops as one exactly-once Txn (one request id for all retries) on
// the partition pick chooses. A non-zero errno becomes an *Error.
func (v *Volume) txn(ctx context.Context, op string, pick picker, ops ...*metapb.Op) (*metapb.TxnResult, error) {
	t := &metapb.Txn{Ops: ops, RequestId: newID()}
	var res *metapb.TxnResult
	err := v.do(ctx, op, pick, func(ctx context.Context, p *pb.Partition) (err error) {
		res, err = v.meta.Txn(ctx, p, t)
		return err
	})
	if err != nil {
		return nil, err
	}
	if res.GetErrno() != 0 {
		return res, &Error{Op: op, Errno: syscall.Errno(res.GetErrno()), Msg: res.GetMessage()}
	}
	return res, nil
}

// each runs fn on every partition of the view in parallel and returns the
// first error.
func (v *Volume) each(parts []*pb.Partition, fn func(p *pb.Partition) error) error {
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
