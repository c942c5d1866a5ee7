package multiraft

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/multiraft/transportpb"
	"github.com/cairnfs/cairn/pkg/network"
)

// GRPCTransport is the Transport between hosts over the processes' RPC
// servers (the service transportpb.Transport): a bounded queue and one
// sender goroutine per peer, which sends everything queued in one
// Transport/Deliver call at a time (lightrpc framing, so that calls cost
// little and arrive in order), reconnects with exponential backoff and
// re-resolves the peer's address on every attempt (addresses may change).
// A peer without Deliver (an earlier version) gets the batches on one
// long-lived gRPC client stream (Transport/Stream) instead. Inbound calls
// and streams are served by the caller's RPC server (see Register) and
// handed to the host with Host.Deliver.
//
// A batch larger than the wire limit (WithMaxMessageBytes, default 3.5 MiB,
// under gRPC's default 4 MiB receive limit) is split into several
// messages, each a valid batch. A single raft message is never split, so the
// server's message bound must admit the largest one: the largest
// state-machine snapshot, or MaxSizePerMsg of entries.
type GRPCTransport struct {
	self       NodeID
	resolve    func(NodeID) (string, bool)
	log        *slog.Logger
	dialOpts   []grpc.DialOption
	net        network.Network
	tls        *tls.Config
	peerTLS    func(NodeID) *tls.Config
	queueLen   int
	maxBytes   int
	backoffMin time.Duration
	backoffMax time.Duration

	host atomic.Pointer[Host]

	ctx    context.Context // canceled by Close; parent of every stream
	cancel context.CancelFunc
	mu     sync.Mutex // guards peers and closed
	peers  map[NodeID]*grpcPeer
	closed bool
	wg     sync.WaitGroup // sender goroutines

	sent, dropped, sendErrors, received, malformed, undelivered, oneWay atomic.Uint64
}

type grpcPeer struct {
	id NodeID
	q  chan *Batch
	// requeued are encoded batches a Deliver call could not hand over
	// because the peer has no Deliver; the stream sends them first. Only
	// the peer's sender goroutine touches it.
	requeued []*transportpb.Batch
}

// TransportOption configures a GRPCTransport.
type TransportOption func(*GRPCTransport)

// WithDialOptions sets the options for dialing peers, credentials included.
// Without it the transport dials without TLS.
func WithDialOptions(opts ...grpc.DialOption) TransportOption {
	return func(t *GRPCTransport) { t.dialOpts = append([]grpc.DialOption(nil), opts...) }
}

// WithNetwork dials peers on n (default: the host's TCP stack).
func WithNetwork(n network.Network) TransportOption {
	return func(t *GRPCTransport) { t.net = n }
}

// WithQueueBatches bounds the batches queued per peer (default 256); Send
// drops batches beyond it, and raft retransmits.
func WithQueueBatches(n int) TransportOption {
	return func(t *GRPCTransport) {
		if n > 0 {
			t.queueLen = n
		}
	}
}

// WithMaxMessageBytes sets the size above which a batch is split into several
// stream messages (default 3.5 MiB).
func WithMaxMessageBytes(n int) TransportOption {
	return func(t *GRPCTransport) {
		if n > 0 {
			t.maxBytes = n
		}
	}
}

// WithTLS runs the connections to peers over TLS with cfg (a client
// configuration: this node's certificate, the peers' CA); a nil cfg keeps
// them in plain text.
func WithTLS(cfg *tls.Config) TransportOption {
	return func(t *GRPCTransport) {
		if cfg == nil {
			return
		}
		t.tls = cfg
		t.dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	}
}

// WithPeerTLS runs the connection to each peer over TLS with the
// configuration peerTLS returns for it, in place of WithTLS's: a node
// gives one that also checks the peer's certificate name
// (pki.Identity.NodeClientConfig). It is called once per connection to an
// address (the configuration itself is consulted at every handshake,
// reconnections included); a nil result, or a nil peerTLS, keeps WithTLS's.
func WithPeerTLS(peerTLS func(NodeID) *tls.Config) TransportOption {
	return func(t *GRPCTransport) { t.peerTLS = peerTLS }
}

// WithBackoff sets the reconnect backoff range (default 50ms to 2s).
func WithBackoff(minDelay, maxDelay time.Duration) TransportOption {
	return func(t *GRPCTransport) {
		if minDelay > 0 && maxDelay >= minDelay {
			t.backoffMin, t.backoffMax = minDelay, maxDelay
		}
	}
}

// NewGRPCTransport creates the transport of host self. resolve maps a peer to
// its current gRPC address; it is called from the sender goroutines before
// each connection attempt and must be safe for concurrent use. log may be
// nil. Call SetHost and Register before traffic flows; Close stops it.
func NewGRPCTransport(self NodeID, resolve func(NodeID) (string, bool), log *slog.Logger, opts ...TransportOption) *GRPCTransport {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &GRPCTransport{
		self:       self,
		resolve:    resolve,
		log:        log.With("node", uint64(self), "component", "raft-transport"),
		dialOpts:   []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		queueLen:   256,
		maxBytes:   3<<20 + 1<<19,
		backoffMin: 50 * time.Millisecond,
		backoffMax: 2 * time.Second,
		ctx:        ctx,
		cancel:     cancel,
		peers:      make(map[NodeID]*grpcPeer),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// SetHost sets the host inbound batches are delivered to. Batches arriving
// before it is set are dropped.
func (t *GRPCTransport) SetHost(h *Host) { t.host.Store(h) }

// Register registers the transport's service on s, the process's gRPC server.
func (t *GRPCTransport) Register(s grpc.ServiceRegistrar) {
	transportpb.RegisterTransportServer(s, &grpcService{t: t})
}

// Send queues b for its peer without blocking; it drops b when the peer's
// queue is full or the transport is closed.
func (t *GRPCTransport) Send(b *Batch) {
	if b == nil || b.To == 0 || b.To == t.self {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.dropped.Add(1)
		return
	}
	p := t.peers[b.To]
	if p == nil {
		p = &grpcPeer{id: b.To, q: make(chan *Batch, t.queueLen)}
		t.peers[b.To] = p
		t.wg.Add(1)
		go t.runPeer(p)
	}
	t.mu.Unlock()
	select {
	case p.q <- b:
	default:
		t.dropped.Add(1)
	}
}

// Close stops every sender goroutine and closes their connections, and waits.
// Inbound streams end when their peers or the gRPC server close them; batches
// they still carry are dropped. Idempotent.
func (t *GRPCTransport) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	t.cancel()
	t.mu.Unlock()
	t.wg.Wait()
}

// TransportStats are a GRPCTransport's counters.
type TransportStats struct {
	// BatchesSent went out on a stream; BatchesDropped were dropped for a
	// full queue or a closed transport; SendErrors are streams that broke.
	BatchesSent, BatchesDropped, SendErrors uint64
	// BatchesReceived were delivered to the host; Malformed raft messages or
	// misaddressed batches were dropped; Undelivered arrived before SetHost.
	BatchesReceived, Malformed, Undelivered uint64
	// OneWayCalls are Deliver calls sent one-way (no answer awaited).
	OneWayCalls uint64
}

// Stats returns the transport's counters.
func (t *GRPCTransport) Stats() TransportStats {
	return TransportStats{
		BatchesSent: t.sent.Load(), BatchesDropped: t.dropped.Load(), SendErrors: t.sendErrors.Load(),
		BatchesReceived: t.received.Load(), Malformed: t.malformed.Load(), Undelivered: t.undelivered.Load(),
		OneWayCalls: t.oneWay.Load(),
	}
}

// runPeer owns the connection to one peer.
func (t *GRPCTransport) runPeer(p *grpcPeer) {
	defer t.wg.Done()
	var (
		conn    *lightrpc.Conn
		addr    string
		backoff = t.backoffMin
		failing bool // log a broken peer once, not on every retry
	)
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	for t.ctx.Err() == nil {
		a, ok := t.resolve(p.id)
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("no address for node %d", p.id)
		case conn == nil || a != addr:
			if conn != nil {
				_ = conn.Close()
			}
			addr = a
			tlsConf, dialOpts := t.tlsFor(p.id)
			conn = lightrpc.Dial(a, lightrpc.ClientOptions{TLS: tlsConf, Network: t.net, GRPC: func() (*grpc.ClientConn, error) {
				return grpc.NewClient(a, append(lightrpc.GRPCDialOptions(t.net), dialOpts...)...)
			}})
		}
		if err == nil {
			var sentAny bool
			sentAny, err = t.deliver(conn, p)
			if status.Code(err) == codes.Unimplemented {
				sentAny, err = t.stream(conn, p)
			}
			if sentAny {
				backoff = t.backoffMin
				failing = false
			}
		}
		if t.ctx.Err() != nil {
			return
		}
		t.sendErrors.Add(1)
		if !failing {
			t.log.Warn("raft transport to peer broken; retrying with backoff", "peer", uint64(p.id), "addr", addr, "err", err)
			failing = true
		}
		// Full jitter keeps peers that broke together from retrying together.
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, t.backoffMax)
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// tlsFor returns the TLS configuration and gRPC dial options of a
// connection to peer: WithPeerTLS's when it gives one, else WithTLS's.
func (t *GRPCTransport) tlsFor(peer NodeID) (*tls.Config, []grpc.DialOption) {
	if t.peerTLS == nil {
		return t.tls, t.dialOpts
	}
	c := t.peerTLS(peer)
	if c == nil {
		return t.tls, t.dialOpts
	}
	// A later credentials option replaces an earlier one.
	return c, append(slices.Clone(t.dialOpts), grpc.WithTransportCredentials(credentials.NewTLS(c)))
}

// Bounds of one Deliver call: the batches it gathers from the queue, and
// how long the peer may take to take them (it only queues them).
const (
	deliverMaxBatches = 64
	deliverTimeout    = 10 * time.Second
)

// deliver sends p's queued batches, everything queued at once in one call,
// until a call fails or the transport closes. The first call of a
// connection is unary; when the peer's Ack says it takes one-way calls, the
// rest go one-way on that connection (lightrpc.Conn.Notify): the sender no
// longer waits for an answer before sending what queued meanwhile, and
// neither side pays for one, which was a write and a read on each side
// for every call. Raft needs no acknowledgement of the transport; a
// connection that breaks loses what it carried, as a dropped batch does,
// and the next connection starts with a unary call again.
func (t *GRPCTransport) deliver(conn *lightrpc.Conn, p *grpcPeer) (sentAny bool, err error) {
	client := transportpb.NewTransportClient(conn)
	oneWay := false
	var pending []*transportpb.Batch // encoded, not yet sent
	for {
		if len(pending) == 0 {
			select {
			case <-t.ctx.Done():
				return sentAny, t.ctx.Err()
			case b := <-p.q:
				pending = t.appendEncoded(pending, p, b)
			}
		}
	gather:
		for n := 1; n < deliverMaxBatches; n++ {
			select {
			case b := <-p.q:
				pending = t.appendEncoded(pending, p, b)
			default:
				break gather
			}
		}
		// One call carries up to maxBytes; a batch split by splitWire
		// goes in as many calls as it has parts.
		call, size := &transportpb.Batches{}, 0
		for len(pending) > 0 {
			n := proto.Size(pending[0])
			if len(call.Batches) > 0 && size+n > t.maxBytes {
				break
			}
			call.Batches = append(call.Batches, pending[0])
			size += n
			pending = pending[1:]
		}
		if len(call.Batches) == 0 {
			continue
		}
		if oneWay {
			if err := conn.Notify(t.ctx, transportpb.Transport_Deliver_FullMethodName, call); err != nil {
				return sentAny, fmt.Errorf("deliver one-way to node %d: %w", p.id, err)
			}
			t.oneWay.Add(1)
		} else {
			// A large call (a snapshot) may take longer on a slow link:
			// at least 1 MiB/s is allowed on top.
			ctx, cancel := context.WithTimeout(t.ctx, deliverTimeout+time.Duration(size>>20)*time.Second)
			ack, err := client.Deliver(ctx, call)
			cancel()
			if err != nil {
				if status.Code(err) == codes.Unimplemented {
					// Nothing was taken: requeue for the stream, in order.
					t.requeue(p, call.Batches, pending)
				}
				return sentAny, fmt.Errorf("deliver to node %d: %w", p.id, err)
			}
			oneWay = ack.GetOneWay()
		}
		t.sent.Add(uint64(len(call.Batches)))
		sentAny = true
	}
}

// appendEncoded appends b's wire parts to pending; an unencodable batch is
// dropped.
func (t *GRPCTransport) appendEncoded(pending []*transportpb.Batch, p *grpcPeer, b *Batch) []*transportpb.Batch {
	pb, err := encodeBatch(b)
	if err != nil {
		t.log.Error("dropping unencodable batch", "peer", uint64(p.id), "err", err)
		return pending
	}
	return append(pending, splitWire(pb, t.maxBytes)...)
}

// requeue puts encoded batches back at the head of p's queue for the
// stream (at most one call's worth and what was gathered with it).
func (t *GRPCTransport) requeue(p *grpcPeer, sent, pending []*transportpb.Batch) {
	p.requeued = append(append(p.requeued[:0], sent...), pending...)
}

// stream sends p's queued batches on one gRPC stream until it breaks or
// the transport closes: for a peer without Deliver.
func (t *GRPCTransport) stream(conn grpc.ClientConnInterface, p *grpcPeer) (sentAny bool, err error) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	s, err := transportpb.NewTransportClient(conn).Stream(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream to node %d: %w", p.id, err)
	}
	send := func(part *transportpb.Batch) error {
		if err := s.Send(part); err != nil {
			// Send reports io.EOF for a broken stream; the
			// cause comes from CloseAndRecv.
			if _, rerr := s.CloseAndRecv(); rerr != nil && !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			return fmt.Errorf("send to node %d: %w", p.id, err)
		}
		return nil
	}
	requeued := p.requeued
	p.requeued = nil
	for _, part := range requeued {
		if err := send(part); err != nil {
			return sentAny, err
		}
		sentAny = true
	}
	for {
		select {
		case <-ctx.Done():
			return sentAny, ctx.Err()
		case b := <-p.q:
			pb, err := encodeBatch(b)
			if err != nil {
				t.log.Error("dropping unencodable batch", "peer", uint64(p.id), "err", err)
				continue
			}
			for _, part := range splitWire(pb, t.maxBytes) {
				if err := send(part); err != nil {
					return sentAny, err
				}
			}
			t.sent.Add(1)
			sentAny = true
		}
	}
}

// splitWire splits pb into batches of at most limit bytes each (but never
// splits a raft message). Heartbeats go in the first part.
func splitWire(pb *transportpb.Batch, limit int) []*transportpb.Batch {
	if proto.Size(pb) <= limit {
		return []*transportpb.Batch{pb}
	}
	newPart := func() *transportpb.Batch {
		return &transportpb.Batch{From: pb.GetFrom(), To: pb.GetTo(), Incarnation: pb.GetIncarnation()}
	}
	cur := newPart()
	cur.Heartbeats = pb.GetHeartbeats()
	size := proto.Size(cur)
	var parts []*transportpb.Batch
	for _, m := range pb.GetMessages() {
		// A repeated field costs the message plus a tag and a length.
		ms := proto.Size(m) + 1 + protowire.SizeVarint(uint64(proto.Size(m)))
		if size+ms > limit && (len(cur.Messages) > 0 || len(cur.Heartbeats) > 0) {
			parts = append(parts, cur)
			cur = newPart()
			size = proto.Size(cur)
		}
		cur.Messages = append(cur.Messages, m)
		size += ms
	}
	return append(parts, cur)
}

// grpcService serves inbound streams.
type grpcService struct {
	transportpb.UnimplementedTransportServer
	t *GRPCTransport
}

func (s *grpcService) Stream(stream grpc.ClientStreamingServer[transportpb.Batch, transportpb.Ack]) error {
	for {
		pb, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&transportpb.Ack{})
		}
		if err != nil {
			return err
		}
		if err := s.t.receive(pb); err != nil {
			return err
		}
	}
}

// Deliver hands in's batches to the host. Its Ack offers one-way calls
// only to a caller on lightrpc: gRPC has no such call.
func (s *grpcService) Deliver(ctx context.Context, in *transportpb.Batches) (*transportpb.Ack, error) {
	for _, pb := range in.GetBatches() {
		if err := s.t.receive(pb); err != nil {
			return nil, err
		}
	}
	return &transportpb.Ack{OneWay: lightrpc.Served(ctx)}, nil
}

// receive hands one inbound batch to the host.
func (t *GRPCTransport) receive(pb *transportpb.Batch) error {
	if t.ctx.Err() != nil {
		return status.Error(codes.Unavailable, "raft transport closed")
	}
	b, bad := decodeBatch(pb)
	t.malformed.Add(uint64(bad))
	if b.To != t.self || b.From == 0 {
		t.malformed.Add(1)
		return nil
	}
	h := t.host.Load()
	if h == nil {
		t.undelivered.Add(1)
		return nil
	}
	t.received.Add(1)
	h.Deliver(b)
	return nil
}
