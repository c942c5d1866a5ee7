package fsck

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// ErrNoInode is returned (wrapped) by Applier.GetInode for an inode that
// does not exist.
var ErrNoInode = errors.New("no such inode")

// Applier sends Txns to partitions and reads inodes; Remote implements it
// over the meta nodes.
type Applier interface {
	// Txn applies txn on partition part. An error means the outcome is
	// unknown (the Txn may have been applied); a TxnResult with a non-zero
	// errno means it was refused and changed nothing.
	Txn(ctx context.Context, part uint64, txn *metapb.Txn) (*metapb.TxnResult, error)
	// GetInode reads inode ino on its home partition part; ErrNoInode if
	// it does not exist.
	GetInode(ctx context.Context, part, ino uint64) (*metapb.Inode, error)
}

// Outcome is what happened to one action.
type Outcome struct {
	Action  int    `json:"action"`
	Applied bool   `json:"applied"`
	Reason  string `json:"reason,omitempty"` // why not applied
}

// ApplyOptions tune Apply. Zero values take the defaults.
type ApplyOptions struct {
	// Attempts bounds the tries of one Txn whose outcome is unknown; every
	// try carries the same request id, so a Txn applied once is not
	// applied again. Default 3.
	Attempts int
	// NewID returns a request id; default a random non-zero uint64.
	NewID func() uint64
}

// RandomID returns a random non-zero request id.
func RandomID() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			continue // crypto/rand does not fail on Linux; try again if it does
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// Apply runs plan's actions in order and returns one Outcome per action.
// Before each action it re-reads the inode the action depends on and skips
// the action if the inode changed since the scan (or, for a dangling name,
// came into existence), so that records an operation touched meanwhile are
// left alone. Apply stops early only when ctx ends; the actions not tried
// are reported as not applied.
func Apply(ctx context.Context, ap Applier, plan Plan, o ApplyOptions) []Outcome {
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.NewID == nil {
		o.NewID = RandomID
	}
	out := make([]Outcome, 0, len(plan.Actions))
	for i := range plan.Actions {
		a := &plan.Actions[i]
		oc := Outcome{Action: i}
		if err := ctx.Err(); err != nil {
			oc.Reason = err.Error()
			out = append(out, oc)
			continue
		}
		if reason, err := checkPrecondition(ctx, ap, a); err != nil {
			oc.Reason = err.Error()
		} else if reason != "" {
			oc.Reason = reason
		} else if err := applyTxn(ctx, ap, a, o); err != nil {
			oc.Reason = err.Error()
		} else {
			oc.Applied = true
		}
		out = append(out, oc)
	}
	return out
}

// checkPrecondition returns a reason to skip a, or "".
func checkPrecondition(ctx context.Context, ap Applier, a *Action) (string, error) {
	if a.CheckPartition == 0 {
		return "", nil
	}
	in, err := ap.GetInode(ctx, a.CheckPartition, a.CheckIno)
	switch {
	case errors.Is(err, ErrNoInode):
		if a.CheckMissing {
			return "", nil
		}
		return fmt.Sprintf("inode %d is gone since the scan", a.CheckIno), nil
	case err != nil:
		return "", fmt.Errorf("re-read inode %d on partition %d: %w", a.CheckIno, a.CheckPartition, err)
	case a.CheckMissing:
		return fmt.Sprintf("inode %d exists now", a.CheckIno), nil
	case in.GetNlink() != a.ExpectNlink || in.GetCtimeNs() != a.ExpectCtimeNs:
		return fmt.Sprintf("inode %d changed since the scan", a.CheckIno), nil
	}
	return "", nil
}

func applyTxn(ctx context.Context, ap Applier, a *Action, o ApplyOptions) error {
	txn := &metapb.Txn{Ops: a.Ops, RequestId: o.NewID()}
	var last error
	for range o.Attempts {
		res, err := ap.Txn(ctx, a.Partition, txn)
		if err != nil {
			last = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if e := res.GetErrno(); e != 0 {
			return fmt.Errorf("partition %d refused (errno %d, op %d): %s", a.Partition, e, res.GetFailedOp(), res.GetMessage())
		}
		return nil
	}
	return fmt.Errorf("txn on partition %d: %w", a.Partition, last)
}
