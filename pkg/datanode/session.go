package datanode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// redialAfter is how long a session waits before dialing a replica it
// could not reach again (the requests meanwhile fail at once).
const redialAfter = time.Second

// session serves one data-path connection. Order-sensitive requests
// (create, append, small write, chunk write, free) run their local step and their
// forwarding on the connection's reader goroutine, so they reach the next
// replica in the order they arrived; waiting for durability and for the
// next replica's answer happens on a goroutine per request (at most
// ServerOptions.MaxInflight per connection). Reads, overwrites and
// listings run on their own goroutines.
type session struct {
	h *Host
	// forwarder: the connection's peer may send what only the replicas of
	// a chain send each other (FlagForwarded): a node certificate, or no
	// TLS at all (the cluster runs with --insecure).
	forwarder bool
	// The connection's certificate: its serial, checked against the
	// revocation list on every request (so that a revocation ends open
	// connections too), and the capabilities it grants (pkg/capability).
	// denied, if set, refuses every request: unreadable capabilities.
	serial  string
	caps    capability.Caps
	denied  error
	counted bool // among the client's connections (countConn)
	// spans, for a client certificate, is what it may use here: the
	// ranges of the grants it presented and of what it wrote (grants.go).
	// nil for nodes, admins and plain text, which need no grant.
	spans *grant.Spans
	// down holds this session's connections to next replicas, used only on
	// the reader goroutine: one connection per next replica keeps a
	// stream's packets in order along the chain.
	down map[string]*downConn
	wg   sync.WaitGroup
}

type downConn struct {
	c        *dataproto.Conn
	err      error
	failedAt time.Time
}

// Close fails the calls to next replicas (their waiters answer and exit)
// and waits for the session's goroutines.
func (s *session) Close() {
	if s.counted {
		s.h.countConn(s.serial, -1)
	}
	for _, d := range s.down {
		if d.c != nil {
			d.c.Close()
		}
	}
	s.wg.Wait()
}

// Handle dispatches one request.
func (s *session) Handle(in *dataproto.Inbound) {
	if in.Header.Flags&dataproto.FlagForwarded != 0 && !s.forwarder {
		// A replica trusts a forwarded write to come from its chain's
		// head: from anyone else it would make the replicas disagree.
		in.Release()
		s.begin(in).fail(dataproto.CodePermissionDenied, "%v with FlagForwarded: only cluster nodes send those", in.Header.Op)
		return
	}
	if in.Header.Op == dataproto.OpRead && in.Header.Flags&dataproto.FlagGrant != 0 && !s.takeGrant(in) {
		return
	}
	if !s.permit(in) {
		return
	}
	if s.h.space.Full() && addsData(in.Header.Op) {
		in.Release()
		s.begin(in).fail(dataproto.CodeReadOnly, "%v: this data node's disk is nearly full; it takes no new data until it has room", in.Header.Op)
		return
	}
	switch in.Header.Op {
	case dataproto.OpGrant:
		s.presentGrant(in)
	case dataproto.OpCreateExtent:
		s.create(in)
	case dataproto.OpAppend:
		s.append(in)
	case dataproto.OpWriteSmall:
		s.writeSmall(in)
	case dataproto.OpWriteChunk:
		s.writeChunk(in)
	case dataproto.OpFree:
		s.free(in)
	case dataproto.OpPing:
		s.begin(in).ok(dataproto.Header{}, nil)
	default:
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			switch in.Header.Op {
			case dataproto.OpRead:
				s.read(in)
			case dataproto.OpOverwrite:
				s.overwrite(in)
			case dataproto.OpListExtents:
				s.list(in)
			case dataproto.OpChecksums:
				s.checksums(in)
			default:
				s.begin(in).fail(dataproto.CodeBadRequest, "op %v not served by data nodes", in.Header.Op)
			}
		}()
	}
}

// reply answers a request once and records its metrics.
type reply struct {
	in    *dataproto.Inbound
	m     *metrics
	start time.Time
	inLen int
}

func (s *session) begin(in *dataproto.Inbound) *reply {
	return &reply{in: in, m: s.h.m, start: time.Now(), inLen: int(in.Header.Length)}
}

func (r *reply) done(code dataproto.Code, out int) {
	r.m.observe(r.in.Header.Op, code, r.inLen, out, time.Since(r.start).Seconds())
}

func (r *reply) ok(h dataproto.Header, payload []byte) {
	r.in.Respond(h, payload, nil)
	r.done(dataproto.CodeOK, len(payload))
}

func (r *reply) section(h dataproto.Header, sec dataproto.Section) {
	n := sec.Len()
	r.in.RespondSection(h, sec)
	r.done(dataproto.CodeOK, int(n))
}

func (r *reply) fail(code dataproto.Code, format string, args ...any) {
	r.failHeader(dataproto.Header{}, code, fmt.Sprintf(format, args...))
}

func (r *reply) failHeader(h dataproto.Header, code dataproto.Code, msg string) {
	r.in.FailHeader(h, code, msg)
	r.done(code, 0)
}

// storeErr answers with the code of an extent store error (the replica's
// extent size for an offset mismatch).
func (r *reply) storeErr(err error) {
	var h dataproto.Header
	var oe *extentstore.OffsetError
	if errors.As(err, &oe) {
		h.Size = oe.Size
	}
	r.failHeader(h, storeCode(err), err.Error())
}

// storeCode maps extent store (and context) errors to protocol codes.
func storeCode(err error) dataproto.Code {
	switch {
	case errors.Is(err, extentstore.ErrNotFound):
		return dataproto.CodeNotFound
	case errors.Is(err, extentstore.ErrOffset):
		return dataproto.CodeOffsetMismatch
	case errors.Is(err, extentstore.ErrOutOfRange), errors.Is(err, extentstore.ErrPunched):
		return dataproto.CodeOutOfRange
	case errors.Is(err, extentstore.ErrTooLarge):
		return dataproto.CodeTooLarge
	case errors.Is(err, extentstore.ErrExtentFull):
		return dataproto.CodeExtentFull
	case errors.Is(err, extentstore.ErrWrongKind):
		return dataproto.CodeWrongKind
	case errors.Is(err, extentstore.ErrReadOnly), errors.Is(err, extentstore.ErrNoSpace), errors.Is(err, extentstore.ErrTooManyExtents):
		return dataproto.CodeReadOnly
	case errors.Is(err, extentstore.ErrCorrupt):
		return dataproto.CodeCorrupt
	case errors.Is(err, extentstore.ErrFailed), errors.Is(err, extentstore.ErrIO), errors.Is(err, extentstore.ErrClosed):
		return dataproto.CodeFailed
	case errors.Is(err, extentstore.ErrInvalid), errors.Is(err, extentstore.ErrExists):
		return dataproto.CodeBadRequest
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return dataproto.CodeBusy
	}
	return dataproto.CodeInternal
}

// target finds the request's partition and checks its epoch and, for
// writes, that this replica is where the request may enter the write chain
// (pkg/replicaset): its head, while the chain takes writes, for a client's
// write; a later member for a forwarded one. It returns the chain and this
// node's position in it.
func (s *session) target(r *reply, write bool) (p *partition, chain []uint64, pos int, ok bool) {
	h := r.in.Header
	p = s.h.partition(h.Partition)
	if p == nil || p.retiring.Load() {
		// A retiring replica (retire.go) votes in its Raft group and
		// serves no I/O: the map has moved it away.
		r.fail(dataproto.CodeUnknownPartition, "partition %d is not on node %d", h.Partition, s.h.env.NodeID)
		return nil, nil, 0, false
	}
	if write && h.Epoch > s.h.env.AppliedEpoch() {
		// The writer has seen a newer map than this node: the chain may
		// have changed (a replica back in it) in ways this node has not
		// heard of yet, and writing down the old one would acknowledge
		// bytes a member of the new chain lacks. Learn the map first.
		s.awaitEpoch(r.in.Context(), h.Epoch)
	}
	v := p.view()
	forwarded := h.Flags&dataproto.FlagForwarded != 0
	if h.Epoch < v.epoch && (write || !forwarded) {
		r.failHeader(dataproto.Header{Epoch: v.epoch}, dataproto.CodeStaleEpoch,
			fmt.Sprintf("request carries map epoch %d; this partition's replica set is of epoch %d", h.Epoch, v.epoch))
		return nil, nil, 0, false
	}
	if !write {
		return p, v.chain, v.pos, true
	}
	var (
		code dataproto.Code
		msg  string
	)
	switch {
	case v.pos < 0:
		code, msg = dataproto.CodeUnknownPartition, fmt.Sprintf("node %d is not in the write chain %v of partition %d", s.h.env.NodeID, v.chain, h.Partition)
	case !forwarded && v.pos != 0:
		code, msg = dataproto.CodeNotPrimary, fmt.Sprintf("node %d is replica %d of partition %d's write chain; writes go to node %d", s.h.env.NodeID, v.pos, h.Partition, v.chain[0])
	case !forwarded && !v.writable:
		code, msg = dataproto.CodeDegraded, fmt.Sprintf("partition %d takes no writes: its write chain %v has fewer than %d replicas or a stale head (stale: %v)",
			h.Partition, v.chain, replicaset.Quorum(len(v.replicas)), v.stale)
	case forwarded && v.pos == 0:
		r.fail(dataproto.CodeBadRequest, "a forwarded write reached the head of partition %d's write chain", h.Partition)
		return nil, nil, 0, false
	default:
		return p, v.chain, v.pos, true
	}
	if h.Epoch > s.h.env.Epoch() {
		// The writer has seen a newer map than this node: the chain may have
		// changed in ways this node has not heard of yet. Ask for the map now
		// and let the writer retry shortly rather than avoid the partition.
		s.h.env.Refresh()
		code, msg = dataproto.CodeBusy, fmt.Sprintf("node %d has not yet learned map epoch %d (it knows %d): %s", s.h.env.NodeID, h.Epoch, s.h.env.Epoch(), msg)
	}
	r.fail(code, "%s", msg)
	return nil, nil, 0, false
}

// awaitEpochFor bounds how long a write waits for this node to learn the
// map epoch its writer has seen (one heartbeat round trip, normally).
const awaitEpochFor = time.Second

// awaitEpoch asks for the map now and waits until this node has applied
// epoch's replica sets (not only heard of it: the views change a moment
// later), for at most awaitEpochFor.
func (s *session) awaitEpoch(ctx context.Context, epoch uint64) {
	s.h.env.Refresh()
	deadline := time.Now().Add(awaitEpochFor)
	for s.h.env.AppliedEpoch() < epoch && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// forwardAfterAppend forwards a write this node has just applied locally:
// down the chain of the partition's current view when that changed since
// target checked the request. So an append is either in the extent list
// this node serves from then on, or reaches every member of the chain a
// newer view names (see list and noteSynced); a node whose role in the
// chain changed fails the write with CodeStaleEpoch instead.
func (s *session) forwardAfterAppend(ctx context.Context, p *partition, chain []uint64, pos int, h dataproto.Header, payload []byte) (*dataproto.Call, uint64, error) {
	if v := p.view(); !slices.Equal(v.chain, chain) {
		if v.pos < 0 || (v.pos == 0) != (pos == 0) {
			return nil, 0, &dataproto.Error{Op: h.Op, Code: dataproto.CodeStaleEpoch, Header: dataproto.Header{Epoch: v.epoch},
				Msg: fmt.Sprintf("partition %d's write chain changed to %v during the write; node %d is at position %d of it", p.id, v.chain, s.h.env.NodeID, v.pos)}
		}
		chain, pos = v.chain, v.pos
	}
	return s.forward(ctx, chain, pos, h, payload)
}

// forward sends h and payload to the replica after pos on this session's
// connection to it. It returns a nil call at the end of the chain.
func (s *session) forward(ctx context.Context, chain []uint64, pos int, h dataproto.Header, payload []byte) (*dataproto.Call, uint64, error) {
	if pos+1 >= len(chain) {
		return nil, 0, nil
	}
	next := chain[pos+1]
	addr, ok := s.h.env.ResolveData(next)
	if !ok || addr == "" {
		return nil, next, fmt.Errorf("no data-path address known for node %d", next)
	}
	c, err := s.downConn(addr)
	if err != nil {
		return nil, next, err
	}
	h.Flags |= dataproto.FlagForwarded
	call, err := c.Start(ctx, &dataproto.Request{Header: h, Payload: payload, KeepCRC: true})
	if err != nil {
		return nil, next, err
	}
	return call, next, nil
}

func (s *session) downConn(addr string) (*dataproto.Conn, error) {
	d := s.down[addr]
	if d != nil && d.c != nil && d.c.Err() == nil {
		return d.c, nil
	}
	if d != nil && d.c == nil && time.Since(d.failedAt) < redialAfter {
		return nil, d.err
	}
	if d != nil && d.c != nil {
		d.c.Close()
	}
	// Dial bounds the connect and the handshake (Chain's timeouts).
	c, err := dataproto.Dial(context.Background(), addr, s.h.opts.Chain)
	if err != nil {
		s.down[addr] = &downConn{err: err, failedAt: time.Now()}
		return nil, err
	}
	s.down[addr] = &downConn{c: c}
	return c, nil
}

// finishChain waits until local append seq (if any) is durable and the next
// replica answered. On failure it answers the request and returns false.
func (s *session) finishChain(r *reply, p *partition, seq uint64, call *dataproto.Call, next uint64, ferr error) bool {
	if seq > 0 {
		if err := p.syncThrough(seq); err != nil {
			r.storeErr(err)
			return false
		}
	}
	if ferr == nil && call != nil {
		_, _, ferr = call.Wait(r.in.Context())
	}
	if ferr == nil {
		return true
	}
	s.h.m.chainFailures.Inc()
	var pe *dataproto.Error
	if errors.As(ferr, &pe) && pe.Code == dataproto.CodeStaleEpoch {
		r.failHeader(dataproto.Header{Epoch: pe.Header.Epoch}, dataproto.CodeStaleEpoch, fmt.Sprintf("replica node %d: %v", next, ferr))
		return false
	}
	if pe == nil && !errors.Is(ferr, context.Canceled) {
		// The next replica did not answer at all: the master may mark it
		// down without waiting for its down timer.
		s.h.reporter.Report(next, ferr)
	}
	if pe != nil && pe.Code == dataproto.CodeReadOnly {
		// Out of space down the chain: the writer must learn it is space,
		// not a failed replica.
		r.fail(dataproto.CodeReadOnly, "replica node %d: %v", next, ferr)
		return false
	}
	// The writer learns which node did not answer (Arg), so that its
	// next write avoids the partitions that node is in instead of
	// waiting the chain's timeout for it again: the next replica when it
	// said nothing, the node it named when it failed the same way.
	var silent uint64
	switch {
	case pe == nil:
		silent = next
	case pe.Code == dataproto.CodeReplicaFailed:
		silent = pe.Header.Arg
	}
	r.failHeader(dataproto.Header{Arg: silent}, dataproto.CodeReplicaFailed, fmt.Sprintf("replica node %d: %v", next, ferr))
	return false
}

func (s *session) create(in *dataproto.Inbound) {
	r := s.begin(in)
	p, chain, pos, ok := s.target(r, true)
	if !ok {
		return
	}
	h := in.Header
	st := p.st()
	id := h.Extent
	if h.Flags&dataproto.FlagForwarded != 0 {
		if err := st.CreateExtent(id, extentstore.Kind(h.Kind)); err != nil && !createdEmpty(st, id, err) {
			r.storeErr(err)
			return
		}
	} else {
		var err error
		p.raiseIDs()
		if id, err = st.NewExtent(extentstore.KindLarge); err != nil {
			r.storeErr(err)
			return
		}
	}
	// The client's certificate travels down the chain with the creation,
	// so that every replica lets it use the extent: an overwrite goes to
	// the partition's Raft leader, which may be another replica.
	holder := in.Payload
	if h.Flags&dataproto.FlagForwarded == 0 && s.spans != nil {
		holder = []byte(s.serial)
	}
	if h.Flags&dataproto.FlagForwarded != 0 && len(holder) > 0 {
		s.h.grants.spans(string(holder)).Own(h.Partition, id, 0, math.MaxInt64, time.Now().Add(ownFor).Unix())
	}
	fh := h
	fh.Extent, fh.Kind = id, uint8(extentstore.KindLarge)
	fh.PayloadCRC = dataproto.Checksum(holder) // forward keeps the CRC it is given
	call, next, ferr := s.forward(in.Context(), chain, pos, fh, holder)
	in.Release()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if !s.finishChain(r, p, 0, call, next, ferr) {
			if pos == 0 {
				_ = st.DeleteExtent(id) // never handed out: no one refers to it
			}
			return
		}
		var receipt []byte
		if pos == 0 {
			receipt = s.ownWhole(h.Partition, id)
		}
		r.ok(dataproto.Header{Extent: id, Kind: uint8(extentstore.KindLarge)}, receipt)
	}()
}

// createdEmpty reports whether a CreateExtent that failed with err found the
// extent already there, empty and live: alignment may have created it from
// the primary's list just before the forwarded creation arrived.
func createdEmpty(st *extentstore.Store, id uint64, err error) bool {
	if !errors.Is(err, extentstore.ErrExists) {
		return false
	}
	info, serr := st.Stat(id)
	return serr == nil && info.Size == 0
}

func (s *session) append(in *dataproto.Inbound) {
	r := s.begin(in)
	p, chain, pos, ok := s.target(r, true)
	if !ok {
		in.Release()
		return
	}
	h := in.Header
	forwarded := h.Flags&dataproto.FlagForwarded != 0
	if h.Length == 0 || h.Extent == 0 || (h.Flags&dataproto.FlagCreate != 0 && !forwarded) {
		in.Release()
		r.fail(dataproto.CodeBadRequest, "append: extent %d, %d bytes, flags %b", h.Extent, h.Length, h.Flags)
		return
	}
	st := p.st()
	if h.Flags&dataproto.FlagCreate != 0 {
		if err := st.CreateExtent(h.Extent, extentstore.Kind(h.Kind)); err != nil && !errors.Is(err, extentstore.ErrExists) {
			in.Release()
			r.storeErr(err)
			return
		}
	}
	size, err := st.Append(h.Extent, h.Offset, in.Payload)
	if err != nil {
		in.Release()
		if forwarded && (errors.Is(err, extentstore.ErrOffset) || errors.Is(err, extentstore.ErrNotFound)) {
			p.wakeup() // this replica is behind the primary: align
		}
		r.storeErr(err)
		return
	}
	seq := p.appendSeq.Add(1)
	if forwarded {
		p.noteAppend(h.Extent)
	}
	call, next, ferr := s.forwardAfterAppend(in.Context(), p, chain, pos, h, in.Payload)
	in.Release()
	end := h.Offset + int64(h.Length)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if s.finishChain(r, p, seq, call, next, ferr) {
			r.ok(dataproto.Header{Extent: h.Extent, Offset: h.Offset, Arg: uint64(end), Size: size}, nil)
			if forwarded {
				// Reads go to the chain's head; a follower's copy of
				// these bytes need not stay in its page cache.
				st.Evict(h.Extent, h.Offset, int64(h.Length))
			}
		}
	}()
}

func (s *session) writeSmall(in *dataproto.Inbound) {
	r := s.begin(in)
	p, chain, pos, ok := s.target(r, true)
	if !ok {
		in.Release()
		return
	}
	h := in.Header
	if h.Length == 0 || h.Flags&dataproto.FlagForwarded != 0 {
		in.Release()
		r.fail(dataproto.CodeBadRequest, "small write of %d bytes, flags %b", h.Length, h.Flags)
		return
	}
	st := p.st()
	p.raiseIDs()
	ctx, cancel := context.WithTimeout(in.Context(), s.h.opts.LeaseTimeout)
	lease, err := st.LeaseSmall(ctx)
	cancel()
	if err != nil {
		in.Release()
		r.storeErr(err)
		return
	}
	ext := lease.Extent()
	info, err := st.Stat(ext)
	var size int64
	if err == nil {
		size, err = st.Append(ext, info.Size, in.Payload)
	}
	if err != nil {
		in.Release()
		lease.Release()
		r.storeErr(err)
		return
	}
	off := info.Size
	seq := p.appendSeq.Add(1)
	fh := h
	fh.Op, fh.Extent, fh.Offset = dataproto.OpAppend, ext, off
	fh.Flags |= dataproto.FlagCreate
	fh.Kind = uint8(extentstore.KindSmall)
	call, next, ferr := s.forwardAfterAppend(in.Context(), p, chain, pos, fh, in.Payload)
	in.Release()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if !s.finishChain(r, p, seq, call, next, ferr) {
			// The replicas may now disagree on the extent's size: no
			// further small file goes there.
			lease.Retire()
			return
		}
		lease.Release()
		receipt := s.own(h.Partition, ext, uint64(off), uint64(off)+uint64(h.Length))
		r.ok(dataproto.Header{Extent: ext, Offset: off, Arg: uint64(off) + uint64(h.Length), Size: size, Kind: uint8(extentstore.KindSmall)}, receipt)
	}()
}

func (s *session) free(in *dataproto.Inbound) {
	r := s.begin(in)
	p, chain, pos, ok := s.target(r, true)
	if !ok {
		return
	}
	h := in.Header
	st := p.st()
	info, err := st.Stat(h.Extent)
	switch {
	case errors.Is(err, extentstore.ErrNotFound):
		err = nil // freed here already (a retry), or never held
	case err != nil:
	case info.Kind == extentstore.KindLarge:
		// A large extent holds one file from offset 0: the key at offset 0,
		// or any key the sender marks as the file's last reference, frees it
		// whole; a key further in (a truncated tail) frees nothing on its own.
		if h.Offset == 0 || h.Flags&dataproto.FlagWhole != 0 {
			err = st.DeleteExtent(h.Extent)
		}
	default:
		if h.Arg == 0 || h.Arg > 1<<62 {
			r.fail(dataproto.CodeBadRequest, "free of %d bytes", h.Arg)
			return
		}
		err = st.PunchSmall(h.Extent, h.Offset, int64(h.Arg))
	}
	if err != nil && !errors.Is(err, extentstore.ErrNotFound) {
		r.storeErr(err)
		return
	}
	call, next, ferr := s.forward(in.Context(), chain, pos, h, nil)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := st.Sync(); err != nil {
			r.storeErr(err)
			return
		}
		if s.finishChain(r, p, 0, call, next, ferr) {
			r.ok(dataproto.Header{}, nil)
		}
	}()
}

func (s *session) read(in *dataproto.Inbound) {
	r := s.begin(in)
	p, _, _, ok := s.target(r, false)
	if !ok {
		return
	}
	h := in.Header
	n := int64(h.Arg)
	switch {
	case n <= 0 || n > dataproto.MaxPayload || h.Extent == 0:
		r.fail(dataproto.CodeBadRequest, "read of %d bytes of extent %d", n, h.Extent)
		return
	case h.Offset > h.Size-n:
		r.fail(dataproto.CodeOutOfRange, "read [%d,%d) of extent %d past the committed size %d the reader named", h.Offset, h.Offset+n, h.Extent, h.Size)
		return
	}
	// Confirm the read: without it a replica that is behind (a follower,
	// one that just rejoined, a deposed leader) could hand out bytes an
	// overwrite acknowledged before the reader opened the file replaced.
	if !s.confirmed(r, p, h.Extent, "the read") {
		return
	}
	st := p.st()
	info, err := st.Stat(h.Extent)
	if err != nil {
		r.storeErr(err)
		return
	}
	if h.Offset > info.Size-n {
		r.failHeader(dataproto.Header{Size: info.Size}, dataproto.CodeNotHeld,
			fmt.Sprintf("node %d holds %d bytes of extent %d, not [%d,%d)", s.h.env.NodeID, info.Size, h.Extent, h.Offset, h.Offset+n))
		return
	}
	rh := dataproto.Header{Extent: h.Extent, Offset: h.Offset, Size: info.Size}
	sec, err := st.Section(h.Extent, h.Offset, n, h.Flags&dataproto.FlagVerify != 0)
	if errors.Is(err, extentstore.ErrPunched) {
		// A freed small file in the range: ReadAt gives zeros there.
		buf := make([]byte, n)
		if _, err := st.ReadAt(h.Extent, buf, h.Offset); err != nil {
			p.reportBad(err)
			r.storeErr(err)
			return
		}
		r.ok(rh, buf)
		return
	}
	if err != nil {
		p.reportBad(err)
		r.storeErr(err)
		return
	}
	r.section(rh, sec)
}

// confirmed runs the read barrier for a read of extent ext of p (what
// names the read in a refusal) and then checks that ext is not marked for
// repair here; it answers a refusal and returns false otherwise. The mark
// is looked at after the barrier, not before: an overwrite that failed
// here (a full disk) marks the extent as it applies, and the barrier is
// what waits for that apply, so a read that came in just before it passed
// a check made first and then served the bytes the overwrite replaced
// (TestFullReplicaRefusesAReadBeforeItsFailedOverwrite; it made
// TestFullReplicaComparesExtentsBeingAppended fail about one run in ten).
func (s *session) confirmed(r *reply, p *partition, ext uint64, what string) bool {
	if err := s.readBarrier(r.in.Context(), p); err != nil {
		r.fail(dataproto.CodeNotHeld, "partition %d on node %d cannot confirm %s: %v", p.id, s.h.env.NodeID, what, err)
		return false
	}
	if !p.serving(ext) {
		r.fail(dataproto.CodeNotHeld, "extent %d awaits repair or replay on node %d", ext, s.h.env.NodeID)
		return false
	}
	return true
}

func (s *session) overwrite(in *dataproto.Inbound) {
	r := s.begin(in)
	// Any replica may take it: Raft sends the caller to the leader.
	p, _, _, ok := s.target(r, false)
	if !ok {
		in.Release()
		return
	}
	h := in.Header
	if h.Length == 0 || h.Extent == 0 {
		in.Release()
		r.fail(dataproto.CodeBadRequest, "overwrite of %d bytes of extent %d", h.Length, h.Extent)
		return
	}
	info, err := p.st().Stat(h.Extent)
	if err != nil {
		in.Release()
		r.storeErr(err)
		return
	}
	if h.Offset > info.Committed-int64(h.Length) {
		in.Release()
		r.failHeader(dataproto.Header{Size: info.Committed}, dataproto.CodeOutOfRange,
			fmt.Sprintf("overwrite [%d,%d) of extent %d beyond its committed size %d", h.Offset, h.Offset+int64(h.Length), h.Extent, info.Committed))
		return
	}
	cmd := encodeOverwrite(h.Arg, h.Extent, h.Offset, in.Payload)
	in.Release()
	ctx, cancel := context.WithTimeout(in.Context(), s.h.opts.ProposeTimeout)
	defer cancel()
	_, err = s.h.env.Raft.Propose(ctx, multiraft.GroupID(p.id), cmd)
	var nl *multiraft.NotLeaderError
	switch {
	case err == nil:
		r.ok(dataproto.Header{Extent: h.Extent, Offset: h.Offset}, nil)
	case errors.As(err, &nl):
		r.failHeader(dataproto.Header{Arg: uint64(nl.Leader)}, dataproto.CodeNotLeader, err.Error())
	case errors.Is(err, multiraft.ErrProposalDropped), errors.Is(err, multiraft.ErrLeadershipLost),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, multiraft.ErrGroupRemoved):
		r.fail(dataproto.CodeBusy, "overwrite: %v (it is idempotent: retry)", err)
	default:
		r.storeErr(err)
	}
}

// checksums answers the CRCs of an extent's blocks, a page at a time.
// They are what a reader would read: refused while the extent awaits
// repair here, and taken after a read barrier, so that alignment, which
// keeps a block whose CRC matches its source's, never takes bytes this
// replica has not applied every acknowledged overwrite to as the truth.
func (s *session) checksums(in *dataproto.Inbound) {
	r := s.begin(in)
	p, _, _, ok := s.target(r, false)
	if !ok {
		return
	}
	if !s.confirmed(r, p, in.Header.Extent, "its checksums") {
		return
	}
	st := p.st()
	size, crcs, err := st.Checksums(in.Header.Extent)
	if err != nil {
		r.storeErr(err)
		return
	}
	first := in.Header.Arg
	if first > uint64(len(crcs)) {
		r.fail(dataproto.CodeBadRequest, "checksums from block %d of %d", first, len(crcs))
		return
	}
	page := crcs[first:]
	rh := dataproto.Header{Extent: in.Header.Extent, Size: size, Arg: uint64(st.BlockSize()), Offset: int64(first)}
	if len(page) > dataproto.MaxPayload/4 {
		page, rh.Flags = page[:dataproto.MaxPayload/4], dataproto.FlagMore
	}
	r.ok(rh, dataproto.AppendChecksums(make([]byte, 0, 4*len(page)), page))
}
