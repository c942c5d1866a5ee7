package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func newNodeAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List meta and data nodes, and decommission them",
		Long: `Meta and data nodes register with the masters and host the partitions the
cluster map assigns to them. A node that stays down for --out-after has its
replicas moved to other nodes by the master; 'cairn node decommission' does the
same for a node that is still alive, so that it can be shut down for good.`,
		Args: noArgs,
	}
	cmd.AddCommand(newNodeListCmd(), newNodeDecommissionCmd())
	return cmd
}

// nodeRow is one line of `cairn node list` (and its --json form).
type nodeRow struct {
	ID       uint64 `json:"id"`
	Role     string `json:"role"`
	Address  string `json:"address"`
	Zone     string `json:"zone,omitempty"`
	State    string `json:"state"`
	Draining bool   `json:"draining"`
	Replicas int    `json:"replicas"`
	// Joining and Leaving count the replica moves in progress to and from
	// the node.
	Joining int `json:"joining"`
	Leaving int `json:"leaving"`
	// CopyLeft is what the node's data replicas catching up (stale, or
	// joining by a move) still lack, in bytes.
	CopyLeft uint64 `json:"copy_left_bytes"`
	// DiskUsed is the used fraction of the node's data disk as it last
	// reported it (what non-root users cannot write counts as used), or -1
	// when it has not reported.
	DiskUsed float64 `json:"disk_used"`
	// Full says that the master places no new replica on the node.
	Full bool `json:"full"`
}

func nodeRows(resp *pb.StatusResponse) []nodeRow {
	m := resp.GetMap()
	rows := map[uint64]*nodeRow{}
	for id, n := range m.GetNodes() {
		rows[id] = &nodeRow{ID: id, Role: roleString(n.Role), Address: n.Addr, Zone: n.Zone, State: stateString(n.State), Draining: n.Draining, DiskUsed: -1}
	}
	for _, ns := range resp.GetNodes() {
		row := rows[ns.GetNode().GetId()]
		if row == nil {
			continue
		}
		if u := ns.GetUsage(); u.GetCapacityBytes() > 0 {
			row.DiskUsed = float64(u.UsedBytes) / float64(u.CapacityBytes)
		}
		row.Full = ns.Full
	}
	for _, p := range m.GetPartitions() {
		for _, r := range p.Replicas {
			if row := rows[r]; row != nil {
				row.Replicas++
			}
		}
		if row := rows[p.Joining]; row != nil {
			row.Joining++
		}
		if row := rows[p.Leaving]; row != nil {
			row.Leaving++
		}
	}
	for _, x := range resp.GetRecovering() {
		if row := rows[x.NodeId]; row != nil {
			row.CopyLeft += x.BytesLeft
		}
	}
	out := make([]nodeRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func newNodeListCmd() *cobra.Command {
	var (
		cf     clusterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the nodes with their state, replicas and moves in progress",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.Status(ctx, &pb.StatusRequest{}, o...)
				if err != nil {
					return err
				}
				rows := nodeRows(resp)
				if asJSON {
					return printJSON(cmd, rows)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tROLE\tADDRESS\tZONE\tSTATE\tDISK\tREPLICAS\tMOVING IN\tMOVING OUT\tTO COPY")
				for _, r := range rows {
					state := r.State
					switch {
					case r.Draining && r.Replicas == 0 && r.Joining == 0:
						state += ", decommissioned"
					case r.Draining:
						state += ", draining"
					}
					if r.Full {
						state += ", full"
					}
					disk := "-"
					if r.DiskUsed >= 0 {
						disk = fmt.Sprintf("%.0f%%", 100*r.DiskUsed)
					}
					zone := r.Zone
					if zone == "" {
						zone = "-"
					}
					toCopy := "-"
					if r.CopyLeft > 0 {
						toCopy = humanBytes(r.CopyLeft)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.ID, r.Role, r.Address, zone, state, disk, r.Replicas, r.Joining, r.Leaving, toCopy)
				}
				return tw.Flush()
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newNodeDecommissionCmd() *cobra.Command {
	var (
		cf     clusterFlags
		cancel bool
	)
	cmd := &cobra.Command{
		Use:   "decommission ID",
		Short: "Move every replica off a node, so that it can be removed",
		Long: `Decommission a meta or data node: the master moves its replicas to other nodes
a few at a time (the same moves as re-replication: a copy is made and caught up
before the old replica is dropped) and places nothing new on it. 'cairn node
list' shows the progress; the node is decommissioned when it holds no replica.
--cancel stops placing moves (those in progress finish).`,
		Example: "  cairn node decommission 5\n  cairn node list",
		Args:    exactArgs(1, "a node id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return usagef(cmd, "node id %q: want a positive number (see 'cairn node list')", args[0])
			}
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.DecommissionNode(ctx, &pb.DecommissionNodeRequest{NodeId: id, Cancel: cancel}, o...)
				if err != nil {
					return err
				}
				if cancel {
					fmt.Fprintf(cmd.OutOrStdout(), "node %d: decommission cancelled; it holds %d replicas\n", id, resp.Replicas)
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node %d (%s): draining %d replicas to other nodes; follow with 'cairn node list'\n", id, roleString(resp.Node.GetRole()), resp.Replicas)
				return nil
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&cancel, "cancel", false, "stop decommissioning the node")
	return cmd
}
