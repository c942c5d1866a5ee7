package dataclient

import (
	"context"
	"errors"
	"slices"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
)

// silence remembers the data nodes that did not answer this client (a
// connection that timed out or was refused, a request without a
// response), until a deadline. A node cut off from the client costs one
// timeout, not one per partition it heads: while it is silent, writes go to
// partitions it does not head, and preferably to partitions it is not in
// at all (its primary would wait the chain timeout for it), and reads try
// its replicas last. The master hears of it too (Options.ReportFailure)
// and marks it down, after which the map's chains leave it out.
//
// The zero value is empty. Not safe for concurrent use: Client.mu guards
// it.
type silence map[uint64]time.Time

// mark makes node silent until until.
func (s *silence) mark(node uint64, until time.Time) {
	if *s == nil {
		*s = silence{}
	}
	(*s)[node] = until
}

// is reports whether node is silent at now, forgetting it once its time
// is over.
func (s silence) is(node uint64, now time.Time) bool {
	until, ok := s[node]
	if ok && !now.Before(until) {
		delete(s, node)
		return false
	}
	return ok
}

// any reports whether some node is silent at now, forgetting those whose
// time is over.
func (s silence) any(now time.Time) bool {
	for node := range s {
		s.is(node, now)
	}
	return len(s) > 0
}

// noAnswer reports whether err says the node did not answer at all: an
// answer with an error code shows it alive, and a caller that gave up or
// a client that closed says nothing about the node.
func noAnswer(err error) bool {
	var pe *dataproto.Error
	return err != nil && !errors.As(err, &pe) && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed)
}

// unreachable records that node did not answer, when err says so: it is
// silent for Options.ExcludeFor, and reported to Options.ReportFailure.
func (c *Client) unreachable(node uint64, err error) {
	if node == 0 || !noAnswer(err) {
		return
	}
	c.markSilent(node)
	if c.opts.ReportFailure != nil {
		c.opts.ReportFailure(node, err)
	}
}

// silenceFailedReplica makes the replica that p's primary named as not
// answering it (CodeReplicaFailed's Arg) silent for Options.ExcludeFor, as
// if it had not answered this client. It is not reported: the primary
// told the master.
func (c *Client) silenceFailedReplica(p *pb.Partition, err error) {
	var pe *dataproto.Error
	if !errors.As(err, &pe) || pe.Code != dataproto.CodeReplicaFailed {
		return
	}
	if node := pe.Header.Arg; node != 0 && slices.Contains(p.GetReplicas(), node) {
		c.markSilent(node)
	}
}

// markSilent makes node silent for Options.ExcludeFor.
func (c *Client) markSilent(node uint64) {
	c.mu.Lock()
	c.silent.mark(node, time.Now().Add(c.opts.ExcludeFor))
	c.mu.Unlock()
}
