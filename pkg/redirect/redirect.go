// Package redirect is how Cairn servers tell a client to ask the Raft leader
// instead: a follower fails the call with FAILED_PRECONDITION and names the
// leader's address in a trailer; a client that finds the trailer retries there.
// A call that fails FAILED_PRECONDITION without the trailer is a real refusal.
package redirect

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Trailer is the gRPC trailer that names the leader.
const Trailer = "cairn-leader"

// NotLeader builds a follower's answer. With no leader known it is UNAVAILABLE,
// which clients retry after a pause.
func NotLeader(ctx context.Context, what, leaderAddr string) error {
	if leaderAddr == "" {
		return status.Errorf(codes.Unavailable, "%s has no leader elected yet", what)
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(Trailer, leaderAddr))
	return status.Errorf(codes.FailedPrecondition, "not the leader of %s; the leader is %s", what, leaderAddr)
}

// Leader returns the leader address a failed call's trailer names, if any.
func Leader(err error, trailer metadata.MD) (string, bool) {
	if status.Code(err) != codes.FailedPrecondition {
		return "", false
	}
	if l := trailer.Get(Trailer); len(l) > 0 && l[0] != "" {
		return l[0], true
	}
	return "", false
}
