package metanode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// Bounds of the merger. The queue bounds memory under overload (callers get
// RESOURCE_EXHAUSTED instead of waiting forever); the in-flight bound keeps
// several proposals in the Raft pipeline while later requests accumulate into
// the next batch.
const (
	queueLen          = 4096
	maxInflight       = 4
	proposeTimeout    = 10 * time.Second
	errQueueFullEntry = "meta partition %d is overloaded: %d requests queued"
)

// merger turns concurrent Txns of one partition into few Raft proposals.
type merger struct {
	h     *Host
	id    uint64
	reqs  chan *pending
	stop  chan struct{}
	slots chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	// prepare, if set, runs on every Txn before it is queued (quota
	// charges, quota.go); a non-nil result is the answer instead.
	prepare func(ctx context.Context, txn *metapb.Txn) (*metapb.TxnResult, error)
}

type pending struct {
	ctx  context.Context
	txn  *metapb.Txn
	done chan outcome
}

type outcome struct {
	res *metapb.TxnResult
	err error
}

var errQueueFull = errors.New("queue full")

func newMerger(h *Host, id uint64) *merger {
	m := &merger{
		h: h, id: id,
		reqs:  make(chan *pending, queueLen),
		stop:  make(chan struct{}),
		slots: make(chan struct{}, maxInflight),
	}
	m.wg.Add(1)
	go m.run()
	return m
}

// submit queues txn and waits for its result.
func (m *merger) submit(ctx context.Context, txn *metapb.Txn) (*metapb.TxnResult, error) {
	stampOrigin(ctx, txn)
	if m.prepare != nil {
		if res, err := m.prepare(ctx, txn); res != nil || err != nil {
			return res, err
		}
	}
	p := &pending{ctx: ctx, txn: txn, done: make(chan outcome, 1)}
	select {
	case m.reqs <- p:
	case <-m.stop:
		return nil, multiraft.ErrGroupRemoved
	default:
		return nil, fmt.Errorf(errQueueFullEntry+": %w", m.id, queueLen, errQueueFull)
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *merger) close() {
	m.once.Do(func() { close(m.stop) })
	m.wg.Wait()
}

func (m *merger) run() {
	defer m.wg.Done()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		var first *pending
		select {
		case <-m.stop:
			return
		case first = <-m.reqs:
		}
		// Wait for a pipeline slot first: while all slots are busy, requests
		// keep queueing and join this batch.
		select {
		case m.slots <- struct{}{}:
		case <-m.stop:
			first.done <- outcome{err: multiraft.ErrGroupRemoved}
			return
		}
		batch := []*pending{first}
		if !m.h.opts.DisableMerging {
		drain:
			for len(batch) < m.h.opts.MaxBatchTxns {
				select {
				case p := <-m.reqs:
					batch = append(batch, p)
				default:
					break drain
				}
			}
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-m.slots }()
			m.propose(batch)
		}()
	}
}

// propose replicates one merged batch and hands every caller its own result.
// Callers whose context already ended are left out, so an abandoned request
// never commits after its caller was told it failed.
func (m *merger) propose(batch []*pending) {
	live := batch[:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.done <- outcome{err: p.ctx.Err()}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	b := &metapb.Batch{NowNs: time.Now().UnixNano(), Txns: make([]*metapb.Txn, len(live))}
	for i, p := range live {
		b.Txns[i] = p.txn
	}
	data, err := proto.Marshal(b)
	if err != nil {
		m.fail(live, fmt.Errorf("encode batch: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
	defer cancel()
	m.h.metrics.proposals.Inc()
	m.h.metrics.batchTxns.Observe(float64(len(live)))
	res, err := m.h.env.Raft.Propose(ctx, multiraft.GroupID(m.id), data)
	if err != nil {
		m.fail(live, err)
		return
	}
	results, ok := res.([]*metapb.TxnResult)
	if !ok || len(results) != len(live) {
		m.fail(live, fmt.Errorf("meta partition %d: apply returned %T for %d txns", m.id, res, len(live)))
		return
	}
	m.h.metrics.txns.Add(float64(len(live)))
	for i, p := range live {
		p.done <- outcome{res: results[i]}
	}
}

func (m *merger) fail(batch []*pending, err error) {
	for _, p := range batch {
		p.done <- outcome{err: err}
	}
}
