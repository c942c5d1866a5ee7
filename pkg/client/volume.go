// Package client is the Cairn Go SDK. This part is the metadata half: it
// opens a volume, keeps the volume's routing view (meta partitions, slot
// table, inode ranges, node addresses) and runs POSIX metadata operations
// by inode handle against the meta partitions. Lookup, create, mkdir,
// mknod, symlink and unlink are one request to the name's partition, which
// runs their cross-partition steps itself; for rename, link, rmdir and
// setattr the SDK orchestrates those steps, in the order that leaves only
// orphans after a crash (see docs/design.md, "Client metadata").
//
// Every Txn the client sends carries a request id, random per logical step
// and reused on every retry of that step, so a retry after an ambiguous
// failure is answered by the partition instead of applied twice.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/chunkcache"
	"github.com/cairnfs/cairn/pkg/chunker"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/diskcache"
	"github.com/cairnfs/cairn/pkg/gate"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/perm"
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
	// WriteBackBytes bounds one open File's buffer of in-place overwrites
	// (bytes written over existing data, sent at the next flush point or
	// when the buffer passes this size). 0 means 8 MiB; negative disables
	// write-back: every overwrite is sent before WriteAt returns.
	WriteBackBytes int
	// ChunkBufferBytes bounds one open chunked File's unflushed writes
	// (past it the handle commits what it has). 0 means 64 MiB.
	ChunkBufferBytes int
	// ChunkCacheBytes bounds the volume's cache of chunk contents, shared
	// by its chunked Files. 0 means 256 MiB; negative caches nothing.
	ChunkCacheBytes int64
	// FileCacheBytes bounds the volume's cache of files' contents read
	// through read-only handles (filecache.go): small files (up to 1 MiB)
	// whole, larger ones that fit in it whole in blocks filled by random
	// reads. 0 means 32 MiB; negative caches nothing.
	FileCacheBytes int64
	// DiskCache, when set, keeps the file cache's blocks and small files
	// on local disk as well (pkg/diskcache), for when they have left
	// memory; the caller opened it and closes it after the Volume. It is
	// used only with the file cache (FileCacheBytes not negative).
	DiskCache *diskcache.Cache
	// Logger receives a warning for every failed attempt of a metadata
	// step that is retried and every data write moved off a partition
	// (Data.Logger, if unset), and the step that then fails for want of
	// an answer; default: discarded.
	Logger *slog.Logger
	// TLS is the client configuration of the connections to the masters,
	// meta nodes and data nodes (pkg/pki: this client's certificate and the
	// cluster's CA; Data.Conn.TLS, if set, wins for data nodes); nil
	// connects in plain text.
	TLS *tls.Config
	// Network is where the client connects (nil: the host's TCP stack;
	// Data.Conn.Network, if set, wins for data nodes).
	Network network.Network
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
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Data.Logger == nil {
		out.Data.Logger = out.Logger
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
	// grants are the extent grants the meta nodes' answers carried, which
	// the data client presents to data nodes (pkg/grant).
	grants *grant.Book
	// receipts are the data nodes' tokens for what this client wrote,
	// which it shows the meta nodes with the keys it records.
	receipts *grant.Book

	mu   sync.RWMutex
	view *view

	// refreshGate lets one refresh read the map at a time; lastRefresh is
	// its. A caller waits for another's refresh (a call to the masters)
	// only as long as its own context allows.
	refreshGate gate.Gate
	lastRefresh time.Time

	dataGate gate.Gate                         // held while the data client is created
	data     atomic.Pointer[dataclient.Client] // created by the first OpenFile

	space usage // capacity accounting (capacity.go)

	bytesWritten, bytesRead, metaRequests atomic.Int64
	// dedupBytes counts bytes of new chunks the chunk index already had, so
	// they were not sent.
	dedupBytes atomic.Int64
	chunks     *chunkcache.Cache[chunker.Fingerprint]
	files      *chunkcache.Cache[fileKey] // nil: no file cache
	disk       *diskcache.Cache           // nil: the file cache is in memory only
	// fetchedBefore admits small files to the disk cache (filecache.go).
	fetchedBefore fetchedSet
	layouts       dirLayouts

	unfences *metaclient.UnfenceBatch // fences of removed directories (unfence.go)

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
	routing uint64 // the volume's live routing version
	vol     *pb.Volume
	table   *hybridindex.Table
	parts   map[uint64]*pb.Partition // the volume's meta partitions by id
	byStart []*pb.Partition          // the same, by inode_start
	nodes   map[uint64]string        // node id -> address
	// bytes estimates the view's memory: the map records it keeps (their
	// encoded size, a lower bound of the decoded form) and its indexes.
	bytes int64
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
	// The live routing only: a migration in progress (vol.migration) is
	// the partitions' business until the master switches the live routing.
	ex := hybridindex.NewExceptionTable()
	for _, e := range vol.GetExceptions() {
		r := hybridindex.Redirect{Kind: hybridindex.Kind(e.GetKind()), MP: e.GetMp()}
		if err := ex.Set(string(e.GetName()), r); err != nil {
			return nil, fmt.Errorf("volume %q: %w", volume, err)
		}
	}
	w := &view{
		epoch: m.GetEpoch(), routing: vol.GetRoutingVersion(), vol: vol,
		table: &hybridindex.Table{Slots: vol.GetSlotOwners(), Exceptions: ex},
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
	w.bytes = int64(proto.Size(vol)) + int64(len(w.nodes))*48 + int64(len(w.table.Slots))*8
	for _, p := range w.parts {
		w.bytes += int64(proto.Size(p)) + 2*16
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
	// The servers refuse another volume to a client identity bound to
	// one, and the master does not say whether it exists: say why here.
	if caps, err := capability.FromTLS(o.TLS); err != nil {
		return nil, errnoErr("open", syscall.EACCES, "the client certificate: %v", err)
	} else if caps.Volume != "" && caps.Volume != volume {
		return nil, errnoErr("open", syscall.EACCES, "this client identity may use volume %q only, not %q", caps.Volume, volume)
	}
	mc, err := masterclient.New(masters, o.TLS, o.Network)
	if err != nil {
		return nil, err
	}
	v := &Volume{name: volume, opts: o, mc: mc, pool: redirect.NewPool(o.TLS, o.Network), stop: make(chan struct{}), refreshGate: gate.New(), dataGate: gate.New()}
	cacheBytes := o.ChunkCacheBytes
	if cacheBytes == 0 {
		cacheBytes = defaultChunkCacheBytes
	}
	v.chunks = chunkcache.New[chunker.Fingerprint](cacheBytes)
	v.files = newFileCache(o.FileCacheBytes)
	if v.files != nil {
		v.disk = o.DiskCache
	}
	v.unfences = v.newUnfenceBatch()
	v.meta = metaclient.New(v.pool, func(node uint64) (string, bool) {
		a, ok := v.current().nodes[node]
		return a, ok && a != ""
	})
	v.meta.SetOrigin(newID())
	v.grants, v.receipts = grant.NewBook(maxGrantRanges), grant.NewBook(maxReceiptRanges)
	v.meta.SetGrants(v.grants.Add)
	v.meta.SetReceipts(v.receiptsFor)
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

// maxGrantRanges bounds the extent ranges the volume keeps grants for
// (about 150 bytes each): a traversal of a large tree drops the oldest
// rather than grow, and a file whose grant went is fetched again when a
// data node asks for it.
const maxGrantRanges = 1 << 16

// maxReceiptRanges bounds the receipts kept: one per extent, small file
// or chunk written, needed until its key is recorded (at the latest when
// the file is closed or synced); the oldest go first.
const maxReceiptRanges = 1 << 16

// receiptsFor returns the tokens that show the meta node this client may
// store txn's data references (metaclient.SetReceipts): for each extent
// key and chunk registration a write token (the data node's receipt, or a
// write grant of a file it had the key from), for each spliced chunk any
// token (a chunk index answer's grant of a chunk stored before).
func (v *Volume) receiptsFor(txn *metapb.Txn) [][]byte {
	now := time.Now()
	var out [][]byte
	seen := map[*grant.Token]bool{}
	for ref := range metapb.DataRefs(txn) {
		m := grant.Read
		if ref.Kind.Own() {
			m = grant.Write
		}
		pid, ext, off, n := ref.Range()
		t := v.receipts.Find(pid, ext, off, n, m, now)
		if t == nil {
			t = v.grants.Find(pid, ext, off, n, m, now)
		}
		if t != nil && !seen[t] {
			seen[t] = true
			out = append(out, t.Bytes)
		}
	}
	return out
}

// regrant fetches inode ino again, for the grants of its answer
// (dataclient.Options.Regrant): checked for writing when write, as an
// open for writing is, for a client whose ids the servers map.
func (v *Volume) regrant(ctx context.Context, ino uint64, write bool) error {
	access := uint32(perm.Read)
	if write {
		access = perm.Write
	}
	_, err := v.getInodeFor(ctx, "grant", ino, access)
	return err
}

// background runs fn, bounded work an operation leaves behind (lifting its
// fences), on its own goroutine; Close waits for it.
func (v *Volume) background(fn func()) {
	select {
	case <-v.stop:
		fn() // closing: Close must not wait for work it cannot see
		return
	default:
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		fn()
	}()
}

// Close stops the background refresh and closes all connections. Calls
// after Close fail.
func (v *Volume) Close() error {
	v.once.Do(func() { close(v.stop) })
	v.wg.Wait()
	if dc := v.data.Load(); dc != nil {
		dc.Close()
	}
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
func (v *Volume) refresh(ctx context.Context) { v.readMap(ctx, false) }

// readMap is refresh, and reads the map however recent the last read was
// when force is set.
func (v *Volume) readMap(ctx context.Context, force bool) {
	if v.refreshGate.Lock(ctx) != nil {
		return
	}
	defer v.refreshGate.Unlock()
	if !force && time.Since(v.lastRefresh) < refreshMinGap {
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
			v.readMap(ctx, true) // a periodic refresh always reads
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

// Routing answers of a partition (docs/routing.md). They never reach a
// caller: the step is retried until the operation's deadline, which ends
// it with ETIMEDOUT like any other failure to reach a partition.
const (
	errnoWrongMP    = syscall.Errno(metapb.EWRONGMP)
	errnoMoving     = syscall.Errno(metapb.EMOVING)
	routeBackoffMin = 10 * time.Millisecond
	routeBackoffMax = 200 * time.Millisecond
)

// routingError is a partition's refusal of a step because of the routing:
// EWRONGMP (it does not own a name of the step) or EMOVING (a name is
// being moved by a routing change).
type routingError struct {
	errno syscall.Errno
	part  uint64
	msg   string
}

func (e *routingError) Error() string {
	name := "EWRONGMP"
	if e.errno == errnoMoving {
		name = "EMOVING"
	}
	return fmt.Sprintf("meta partition %d: %s %s", e.part, name, e.msg)
}

// routingCheck turns a routing errno of partition part into a
// *routingError; nil for every other errno.
func routingCheck(errno int32, part uint64, msg string) error {
	switch n := syscall.Errno(errno); n {
	case errnoWrongMP, errnoMoving:
		return &routingError{errno: n, part: part, msg: msg}
	}
	return nil
}

// errReplan says that a step planned under an older view (which names
// share a partition, which inode records ride in the same Txn) no longer
// fits the routing: the partition refused it, so nothing was applied, and
// the caller plans the step again under the current view. It never leaves
// the package.
var errReplan = errors.New("routing changed under the plan of the step")

// nameKey is a dentry's name.
type nameKey struct {
	parent uint64
	name   string
}

// pinned chooses partition id for a Txn planned with every name in names
// routed there; once the view routes one of them elsewhere it returns
// errReplan.
func pinned(id uint64, names ...nameKey) picker {
	return func(w *view) (*pb.Partition, error) {
		for _, n := range names {
			p, err := w.route(n.parent, n.name)
			if err != nil {
				return nil, err
			}
			if p.GetId() != id {
				return nil, errReplan
			}
		}
		return byID(id)(w)
	}
}

// replanned runs body again while it ends in errReplan (the view changed
// before the body applied anything).
func replanned(ctx context.Context, op string, body func() error) error {
	for {
		err := body()
		if !errors.Is(err, errReplan) {
			return err
		}
		if ctx.Err() != nil {
			return transportErr(op, ctx.Err())
		}
	}
}

// do runs call against the partition pick chooses, retrying retryable
// failures with bounded backoff and a view refresh until ctx ends. A
// routing refusal (a *routingError from call) is retried as docs/routing.md
// says; when pick then finds the plan outdated, do returns errReplan.
func (v *Volume) do(ctx context.Context, op string, pick picker, call func(ctx context.Context, p *pb.Partition) error) error {
	select {
	case <-v.stop:
		return errnoErr(op, syscall.EIO, "volume %q is closed", v.name)
	default:
	}
	backoff, routeBackoff := backoffMin, routeBackoffMin
	for {
		p, err := pick(v.current())
		if err != nil {
			var e *Error
			switch {
			case errors.Is(err, errReplan):
				return err
			case errors.As(err, &e):
				e.Op = op
				return e
			}
			// The view does not know the partition: refresh and retry.
			v.refresh(ctx)
			if p, err = pick(v.current()); errors.Is(err, errReplan) {
				return err
			} else if err != nil {
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
		var re *routingError
		if errors.As(err, &re) && ctx.Err() == nil {
			// Not an error of the operation: the routing moved under it.
			// EWRONGMP: our view is stale, read the map; wait only if
			// that brought nothing new (rate limit, or the master has not
			// switched yet). EMOVING: wait for the move to finish.
			w0 := v.current()
			if re.errno == errnoWrongMP {
				v.refresh(ctx)
			}
			if re.errno == errnoMoving || v.current() == w0 {
				select {
				case <-ctx.Done():
					return transportErr(op, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err))
				case <-time.After(routeBackoff):
				}
				routeBackoff = min(2*routeBackoff, routeBackoffMax)
			}
			continue
		}
		if ctx.Err() != nil || !retryable(err) {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
			}
			v.opts.Logger.Warn("metadata step failed", "op", op, "partition", p.GetId(), "err", err)
			return transportErr(op, err)
		}
		v.opts.Logger.Warn("metadata attempt failed; retrying", "op", op, "partition", p.GetId(), "err", err)
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
// the partition pick chooses. A non-zero errno becomes an *Error; the
// routing errnos are retried (see do), or end in errReplan with a pinned
// picker.
func (v *Volume) txn(ctx context.Context, op string, pick picker, ops ...*metapb.Op) (*metapb.TxnResult, error) {
	return v.txnID(ctx, op, pick, newID(), ops...)
}

// txnID is txn with the request id given: a step a meta node may have run
// already for a request of this client (metapb.FollowUpID).
func (v *Volume) txnID(ctx context.Context, op string, pick picker, id uint64, ops ...*metapb.Op) (*metapb.TxnResult, error) {
	t := &metapb.Txn{Ops: ops, RequestId: id}
	var res *metapb.TxnResult
	err := v.do(ctx, op, pick, func(ctx context.Context, p *pb.Partition) (err error) {
		res, err = v.meta.Txn(ctx, p, t)
		if err == nil {
			err = routingCheck(res.GetErrno(), p.GetId(), res.GetMessage())
		}
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
