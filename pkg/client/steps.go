package client

import (
	"context"
	"errors"
	"slices"
	"syscall"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// The steps of a name change: a Txn on the name's partition with the inode
// operations homed there, and the others on their homes, sent by that
// partition (then steps) or by the client.

// homedOp is an inode operation that must run on the home of ino.
type homedOp struct {
	ino uint64
	op  *metapb.Op
}

// nameStep runs dops, dentry operations on the one name (parent, name), as
// one Txn on the partition the name routes to, followed in the same Txn by
// every homed op whose inode lives there. When the name's routing changes
// under it, the step is planned again under the new view (the refused Txn
// applied nothing). It returns the Txn's result (dops' results first) and
// the homed ops it did not run, in order, for the caller to run on their
// homes.
func (v *Volume) nameStep(ctx context.Context, op string, parent uint64, name string, dops []*metapb.Op, homed []homedOp) (res *metapb.TxnResult, rest []homedOp, err error) {
	err = v.onNamePartition(op, parent, name, dops, homed, func(pick picker, ops []*metapb.Op, r []homedOp) (err error) {
		rest = r
		res, err = v.txn(ctx, op, pick, ops...)
		return err
	})
	return res, rest, err
}

// nameStepThen is nameStep whose homed ops on other partitions go with the
// Txn as its then steps (txnThen): the partition sends them, and the
// client sends one request. It returns the Txn's result and the results of
// the then steps.
func (v *Volume) nameStepThen(ctx context.Context, op string, parent uint64, name string, dops []*metapb.Op, homed []homedOp) (res *metapb.TxnResult, then []*metapb.OpResult, err error) {
	err = v.onNamePartition(op, parent, name, dops, homed, func(pick picker, ops []*metapb.Op, rest []homedOp) (err error) {
		res, then, err = v.txnThen(ctx, op, pick, ops, rest)
		return err
	})
	return res, then, err
}

// onNamePartition plans a name step under the current view (the name's
// partition, dops with the homed ops it homes folded in, the other homed
// ops) and sends it with send, planning again while the routing changed
// before the Txn applied (errReplan).
func (v *Volume) onNamePartition(op string, parent uint64, name string, dops []*metapb.Op, homed []homedOp, send func(pick picker, ops []*metapb.Op, rest []homedOp) error) error {
	for {
		w := v.current()
		p, err := w.route(parent, name)
		if err != nil {
			return &Error{Op: op, Errno: syscall.EIO, Err: err}
		}
		ops, rest := fold(w, p.GetId(), dops, homed)
		if err := send(pinned(p.GetId(), nameKey{parent, name}), ops, rest); !errors.Is(err, errReplan) {
			return err
		}
	}
}

// fold returns dops followed by the homed ops whose inode partition part
// homes under view w, and the other homed ops, in order.
func fold(w *view, part uint64, dops []*metapb.Op, homed []homedOp) ([]*metapb.Op, []homedOp) {
	ops := slices.Clip(slices.Clone(dops))
	var rest []homedOp
	for _, h := range homed {
		if hp, err := w.home(h.ino); err == nil && hp.GetId() == part {
			ops = append(ops, h.op)
		} else {
			rest = append(rest, h)
		}
	}
	return ops, rest
}

// txnThen is txn with then, the request's steps on other partitions,
// which the partition sends itself after the Txn applied
// (TxnRequest.then): one request instead of one per home. The groups it
// did not run (a node of an earlier version, a home that did not answer
// in time, a client whose capabilities restrict it) run here, each with
// the ops and request id the partition gave it, so that no step applies
// twice. It returns the Txn's result and the results of the then steps,
// best effort: a step whose group failed has none.
func (v *Volume) txnThen(ctx context.Context, op string, pick picker, ops []*metapb.Op, then []homedOp) (*metapb.TxnResult, []*metapb.OpResult, error) {
	if len(then) == 0 {
		res, err := v.txn(ctx, op, pick, ops...)
		return res, nil, err
	}
	t := &metapb.Txn{Ops: ops, RequestId: newID()}
	steps := make([]*metapb.HomedOp, len(then))
	for i, h := range then {
		steps[i] = &metapb.HomedOp{Ino: h.ino, Op: h.op}
	}
	var res *metapb.TxnResult
	var groups []*metapb.ThenGroup
	err := v.do(ctx, op, pick, func(ctx context.Context, p *pb.Partition) (err error) {
		res, groups, err = v.meta.TxnThen(ctx, p, t, steps)
		if err == nil {
			err = routingCheck(res.GetErrno(), p.GetId(), res.GetMessage())
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if res.GetErrno() != 0 {
		return res, nil, &Error{Op: op, Errno: syscall.Errno(res.GetErrno()), Msg: res.GetMessage()}
	}
	if len(groups) == 0 {
		out, _ := v.runHomed(ctx, op, then)
		return res, out, nil
	}
	var out []*metapb.OpResult
	for _, g := range groups {
		r := g.GetResult()
		if !g.GetDone() {
			var batch []*metapb.Op
			var ino uint64
			for _, st := range g.GetSteps() {
				if int(st) < len(then) {
					batch, ino = append(batch, then[st].op), then[st].ino
				}
			}
			if len(batch) == 0 {
				continue
			}
			var err error
			if r, err = v.txnID(ctx, op, byIno(ino), g.GetRequestId(), batch...); err != nil {
				continue // best effort, as the steps the client ran itself
			}
		}
		out = append(out, r.GetResults()...)
	}
	return res, out, nil
}

// runHomed runs ops on their homes, consecutive ops of one home in one
// Txn, and returns the results in order; it stops at the first failure.
func (v *Volume) runHomed(ctx context.Context, op string, ops []homedOp) ([]*metapb.OpResult, error) {
	var out []*metapb.OpResult
	for i := 0; i < len(ops); {
		w := v.current()
		h, err := w.home(ops[i].ino)
		if err != nil {
			return out, err
		}
		batch := []*metapb.Op{ops[i].op}
		j := i + 1
		for ; j < len(ops); j++ {
			if hj, err := w.home(ops[j].ino); err != nil || hj.GetId() != h.GetId() {
				break
			}
			batch = append(batch, ops[j].op)
		}
		res, err := v.txn(ctx, op, byIno(ops[i].ino), batch...)
		if err != nil {
			return out, err
		}
		out = append(out, res.GetResults()...)
		i = j
	}
	return out, nil
}
