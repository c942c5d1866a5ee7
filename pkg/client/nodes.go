package client

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// MetaMetricsAddrs returns the Prometheus endpoints (HOST:PORT of each
// node's /metrics) of every node that holds a replica of any of the
// volume's meta partitions, sorted and without duplicates. It reads a fresh
// cluster map and the nodes' reported addresses from the master leader (the
// routing view the volume holds is not consulted, so partitions added since
// Open are included). A node that reports its endpoint on an unspecified
// host (":9100", "[::]:9100") is given the host of its gRPC address.
//
// When some hosting node has not reported an endpoint (the leader has had
// no heartbeat from it yet), the addresses of the others are returned
// together with an error naming it; the error alone is returned when the
// master cannot be asked or the volume no longer exists (ENOENT).
func (v *Volume) MetaMetricsAddrs(ctx context.Context) ([]string, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	var resp *pb.StatusResponse
	err := v.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Status(ctx, &pb.StatusRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta nodes of volume %q: read the cluster status: %w", v.name, err)
	}
	return metaMetricsAddrs(resp, v.name)
}

// metaMetricsAddrs picks the endpoints of the volume's meta nodes out of a
// status answer.
func metaMetricsAddrs(resp *pb.StatusResponse, volume string) ([]string, error) {
	m := resp.GetMap()
	w, err := newView(m, volume)
	if err != nil {
		return nil, fmt.Errorf("meta nodes of volume %q: %w", volume, err)
	}
	hosts := map[uint64]bool{}
	for _, p := range w.parts {
		for _, n := range p.GetReplicas() {
			hosts[n] = true
		}
	}
	status := map[uint64]*pb.NodeStatus{}
	for _, ns := range resp.GetNodes() {
		status[ns.GetNode().GetId()] = ns
	}
	var out, missing []string
	ids := make([]uint64, 0, len(hosts))
	for id := range hosts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ns := status[id]
		addr := clustermap.MetricsEndpoint(ns.GetMetricsAddr(), ns.GetNode().GetAddr())
		if addr == "" {
			name := fmt.Sprintf("node %d", id)
			if a := m.GetNodes()[id].GetAddr(); a != "" {
				name += " (" + a + ")"
			}
			missing = append(missing, name)
			continue
		}
		out = append(out, addr)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(missing) > 0 {
		return out, fmt.Errorf("meta nodes of volume %q: the master knows no metrics address of %s (no heartbeat from it yet?)",
			volume, strings.Join(missing, ", "))
	}
	return out, nil
}
