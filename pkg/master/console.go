package master

import (
	"context"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// consoleSource is what the web console reads of a master.
type consoleSource struct{ s *Server }

// IsLeader reports whether the master leads its Raft group.
func (c consoleSource) IsLeader() bool {
	isLeader, _, _ := c.s.leader()
	return isLeader
}

// Status is the leader's status, as 'cairn status' reads it.
func (c consoleSource) Status(ctx context.Context) (*pb.StatusResponse, error) {
	return (&service{s: c.s}).Status(ctx, &pb.StatusRequest{})
}

// LeaderHTTP is the leader's telemetry address, which serves its console.
func (c consoleSource) LeaderHTTP(ctx context.Context) string {
	isLeader, addr, _ := c.s.leader()
	if isLeader || addr == "" {
		return ""
	}
	r, err := c.s.peerClient.Ping(ctx, addr)
	if err != nil {
		return ""
	}
	return clustermap.MetricsEndpoint(r.GetMetricsAddr(), addr)
}
