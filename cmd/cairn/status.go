package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/fsck"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// statusReport is the stable JSON shape of `cairn status --json`.
type statusReport struct {
	ClusterID  string            `json:"cluster_id"`
	Epoch      uint64            `json:"epoch"`
	Leader     string            `json:"leader"`
	Nodes      []statusNode      `json:"nodes"`
	Volumes    []statusVolume    `json:"volumes"`
	Partitions []statusPartition `json:"partitions"`
	// Recovery is nil when no data replica is catching up.
	Recovery *statusRecovery `json:"recovery,omitempty"`
	// Zones are the failure domains of the meta and data nodes; ZoneRule
	// says what happens while some are down ("" when none is).
	Zones    []statusZone `json:"zones,omitempty"`
	ZoneRule string       `json:"zone_rule,omitempty"`
}

type statusNode struct {
	ID              uint64  `json:"id"`
	Role            string  `json:"role"`
	Address         string  `json:"address"`
	State           string  `json:"state"`
	Leader          bool    `json:"leader"`
	Pid             int32   `json:"pid,omitempty"`
	Zone            string  `json:"zone,omitempty"`
	MetricsAddress  string  `json:"metrics_address,omitempty"`
	CapacityBytes   uint64  `json:"capacity_bytes,omitempty"`
	UsedBytes       uint64  `json:"used_bytes,omitempty"`
	MemUtil         float64 `json:"mem_util,omitempty"`
	Partitions      int     `json:"partitions"`
	LastHeartbeatMs int64   `json:"last_heartbeat_ms_ago,omitempty"`
}

type statusVolume struct {
	ID             uint64 `json:"id"`
	Name           string `json:"name"`
	MetaPartitions int    `json:"meta_partitions"`
	DataPartitions int    `json:"data_partitions"`
	Replicas       int32  `json:"replicas"`
	CapacityBytes  uint64 `json:"capacity_bytes"`
	// UsedBytes sums what the volume's data partitions report storing.
	UsedBytes uint64 `json:"used_bytes"`
	Health    string `json:"health"`
	// Layout is the layout of new files ("extent", "cdc").
	Layout string `json:"layout"`
	// Chunks summarizes the chunk index (nil for a volume without one, or
	// when its shards did not answer).
	Chunks *statusChunks `json:"chunks,omitempty"`
}

// statusChunks is a volume's chunk index, summed over its shards.
type statusChunks struct {
	Entries uint64 `json:"entries"`
	// StoredBytes counts each chunk once; ReferencedBytes counts it once
	// per reference (what the files would take without dedup).
	StoredBytes     uint64  `json:"stored_bytes"`
	ReferencedBytes uint64  `json:"referenced_bytes"`
	DedupRatio      float64 `json:"dedup_ratio"`
	ZeroRef         uint64  `json:"zero_ref"`
	Dead            uint64  `json:"dead"`
	PendingDrops    uint64  `json:"pending_drops"`
}

type statusPartition struct {
	ID            uint64   `json:"id"`
	Volume        string   `json:"volume"`
	Kind          string   `json:"kind"`
	Replicas      []uint64 `json:"replicas"`
	ReplicasAlive int      `json:"replicas_alive"`
	// Down and Stale (data partitions): replicas out of the write chain, and
	// replicas catching up that may not head it (pkg/replicaset).
	Down   []uint64 `json:"down,omitempty"`
	Stale  []uint64 `json:"stale,omitempty"`
	Health string   `json:"health"`
	// Leader is the replica that reported itself leader (0: none reported).
	Leader uint64 `json:"leader"`
	// Items are records (meta) or extents (data); UsedBytes the data stored;
	// both as the leader (or else any replica) last reported.
	Items     uint64 `json:"items"`
	UsedBytes uint64 `json:"used_bytes"`
	// CopyLeft: bytes its data replicas catching up still lack.
	CopyLeft uint64 `json:"copy_left_bytes,omitempty"`
}

// statusRecovery is the data replicas catching up (stale or joining by a
// move): what they still lack, the rate the leader saw them copy at over
// the last 10 s, and the time left at that rate (0: not known yet).
type statusRecovery struct {
	Replicas       int     `json:"replicas"`
	BytesLeft      uint64  `json:"bytes_left"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	ETASeconds     float64 `json:"eta_seconds,omitempty"`
}

func newStatusCmd() *cobra.Command {
	var (
		cf         clusterFlags
		asJSON     bool
		partitions bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster at a glance",
		Long: `Show the masters and which one leads, every node with its liveness and
utilization, the volumes, and the health of their partitions. --json prints the
same for scripts: a "nodes" list whose entries have role (master, meta, data),
address, state (alive, down, out), leader and pid (for processes on this host),
plus "volumes" and "partitions".`,
		Example: `  cairn status
  cairn status --data-dir /tmp/c1 --json
  cairn status --master 10.0.0.1:17000`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.context()
			defer cancel()
			st, err := c.Status(ctx)
			if err != nil {
				return plainError(err)
			}
			r := buildReport(st, time.Now())
			conf, err := cf.tlsConfig(cmd)
			if err != nil {
				return err
			}
			addChunkStats(ctx, st.Map, &r, conf)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printReport(cmd, r, partitions)
			return nil
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().BoolVar(&partitions, "partitions", false, "list every partition")
	return cmd
}

func stateString(s pb.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}

func roleString(r pb.Role) string { return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_")) }

func buildReport(st *pb.StatusResponse, now time.Time) statusReport {
	host, _ := os.Hostname()
	m := st.Map
	r := statusReport{ClusterID: m.ClusterId, Epoch: m.Epoch}
	for _, ms := range st.Masters {
		n := statusNode{ID: ms.Id, Role: "master", Address: ms.Addr, State: "down", Leader: ms.Leader, MetricsAddress: ms.MetricsAddr}
		if ms.Pid != 0 {
			n.State = "alive"
			if ms.Hostname == host {
				n.Pid = ms.Pid
			}
		}
		if ms.Leader {
			r.Leader = ms.Addr
		}
		r.Nodes = append(r.Nodes, n)
	}
	alive := map[uint64]bool{}
	reports := map[uint64]*pb.PartitionReport{}
	leaders := map[uint64]uint64{}
	for _, ns := range st.Nodes {
		if ns.Node.State != pb.NodeState_NODE_STATE_ALIVE {
			continue // its last reports may be long out of date
		}
		for _, pr := range ns.Partitions {
			if pr.Leader {
				leaders[pr.Id] = ns.Node.Id
			}
			if pr.Leader || reports[pr.Id] == nil {
				reports[pr.Id] = pr
			}
		}
	}
	for _, ns := range st.Nodes {
		nd := ns.Node
		n := statusNode{
			ID: nd.Id, Role: roleString(nd.Role), Address: nd.Addr, State: stateString(nd.State), Zone: nd.Zone,
			MetricsAddress: ns.MetricsAddr, Partitions: len(ns.Partitions),
		}
		if ns.Hostname == host {
			n.Pid = ns.Pid
		}
		if u := ns.Usage; u != nil {
			n.CapacityBytes, n.UsedBytes, n.MemUtil = u.CapacityBytes, u.UsedBytes, u.MemUtil
		}
		if ns.LastHeartbeatUnixMs > 0 {
			n.LastHeartbeatMs = now.UnixMilli() - ns.LastHeartbeatUnixMs
		}
		alive[nd.Id] = nd.State == pb.NodeState_NODE_STATE_ALIVE
		r.Nodes = append(r.Nodes, n)
	}
	r.Zones = zonesOf(r.Nodes)
	r.ZoneRule = zoneRule(r.Zones, time.Duration(st.OutAfterSeconds)*time.Second)
	left := map[uint64]uint64{} // partition -> bytes its catching-up replicas lack
	if len(st.Recovering) > 0 {
		rec := &statusRecovery{BytesPerSecond: st.RecoveryBytesPerSecond}
		for _, x := range st.Recovering {
			left[x.PartitionId] += x.BytesLeft
			rec.Replicas++
			rec.BytesLeft += x.BytesLeft
		}
		if rec.BytesPerSecond > 0 {
			rec.ETASeconds = float64(rec.BytesLeft) / rec.BytesPerSecond
		}
		r.Recovery = rec
	}
	volHealth := map[uint64]string{}
	volUsed := map[uint64]uint64{}
	for _, p := range m.Partitions {
		sp := statusPartition{ID: p.Id, Kind: strings.ToLower(strings.TrimPrefix(p.Kind.String(), "PARTITION_KIND_")), Replicas: p.Replicas}
		if v := m.Volumes[p.VolumeId]; v != nil {
			sp.Volume = v.Name
		}
		for _, id := range p.Replicas {
			if alive[id] {
				sp.ReplicasAlive++
			}
		}
		sp.Health = clustermap.Health(m, p)
		if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA {
			sp.Down, sp.Stale = p.Down, p.Stale
		}
		sp.CopyLeft = left[p.Id]
		sp.Leader = leaders[p.Id]
		if r := reports[p.Id]; r != nil {
			sp.Items, sp.UsedBytes = r.Items, r.UsedBytes
			if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA {
				volUsed[p.VolumeId] += r.UsedBytes
			}
		}
		volHealth[p.VolumeId] = clustermap.Worse(volHealth[p.VolumeId], sp.Health)
		r.Partitions = append(r.Partitions, sp)
	}
	sort.Slice(r.Partitions, func(i, j int) bool { return r.Partitions[i].ID < r.Partitions[j].ID })
	for _, v := range m.Volumes {
		r.Volumes = append(r.Volumes, statusVolume{
			ID: v.Id, Name: v.Name, MetaPartitions: len(v.MetaPartitions), DataPartitions: len(v.DataPartitions),
			Replicas: v.Replicas, CapacityBytes: v.CapacityBytes, UsedBytes: volUsed[v.Id], Health: clustermap.Worse(clustermap.Healthy, volHealth[v.Id]),
			Layout: clustermap.LayoutName(metapb.FileLayout(v.DefaultLayout)),
		})
	}
	sort.Slice(r.Volumes, func(i, j int) bool { return r.Volumes[i].Name < r.Volumes[j].Name })
	return r
}

func printReport(cmd *cobra.Command, r statusReport, partitions bool) {
	out := cmd.OutOrStdout()
	leader := r.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(out, "cluster %s  epoch %d  master leader %s\n\n", r.ClusterID, r.Epoch, leader)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tADDRESS\tSTATE\tPID\tZONE\tDISK USED\tMEM\tPARTITIONS")
	for _, n := range r.Nodes {
		role := n.Role
		if n.Leader {
			role += "*"
		}
		pid, disk, mem, parts := "-", "-", "-", "-"
		if n.Pid != 0 {
			pid = fmt.Sprint(n.Pid)
		}
		if n.CapacityBytes > 0 {
			disk = fmt.Sprintf("%s/%s", humanBytes(n.UsedBytes), humanBytes(n.CapacityBytes))
			mem = fmt.Sprintf("%.0f%%", n.MemUtil*100)
		}
		if n.Role != "master" {
			parts = fmt.Sprint(n.Partitions)
		}
		zone := n.Zone
		if zone == "" {
			zone = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, role, n.Address, n.State, pid, zone, disk, mem, parts)
	}
	tw.Flush()
	fmt.Fprintln(out, "(* master leader)")
	fmt.Fprintln(out)
	if len(r.Volumes) == 0 {
		fmt.Fprintln(out, "no volumes")
	} else {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUME\tID\tMETA PARTITIONS\tDATA PARTITIONS\tREPLICAS\tUSED\tLAYOUT\tCHUNKS\tDEDUP\tHEALTH")
		for _, v := range r.Volumes {
			chunks, dedup := "-", "-"
			if c := v.Chunks; c != nil && c.Entries > 0 {
				chunks = fmt.Sprintf("%d (%s)", c.Entries, humanBytes(c.StoredBytes))
				dedup = fmt.Sprintf("%.2fx", c.DedupRatio)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.ID, v.MetaPartitions, v.DataPartitions, v.Replicas,
				humanBytes(v.UsedBytes), v.Layout, chunks, dedup, v.Health)
		}
		tw.Flush()
	}
	counts := map[string]int{}
	for _, p := range r.Partitions {
		counts[p.Health]++
	}
	fmt.Fprintf(out, "\npartitions: %d healthy, %d recovering, %d degraded, %d read-only, %d unavailable\n",
		counts["healthy"], counts["recovering"], counts["degraded"], counts["read-only"], counts["unavailable"])
	if len(r.Zones) > 0 {
		var zs []string
		for _, z := range r.Zones {
			zs = append(zs, fmt.Sprintf("%s %d/%d alive", z.Name, z.Alive, z.Nodes))
		}
		fmt.Fprintf(out, "zones: %s\n", strings.Join(zs, ", "))
	}
	if r.ZoneRule != "" {
		fmt.Fprintf(out, "%s\n", r.ZoneRule)
	}
	if rec := r.Recovery; rec != nil {
		fmt.Fprintf(out, "recovery: %d data replicas catching up, %s left", rec.Replicas, humanBytes(rec.BytesLeft))
		if rec.BytesPerSecond > 0 {
			fmt.Fprintf(out, " at %s/s, about %s to go", humanBytes(uint64(rec.BytesPerSecond)), (time.Duration(rec.ETASeconds) * time.Second).String())
		}
		fmt.Fprintln(out)
	}
	if partitions {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tVOLUME\tKIND\tREPLICAS\tDOWN\tSTALE\tLEADER\tITEMS\tUSED\tTO COPY\tHEALTH")
		for _, p := range r.Partitions {
			leader, toCopy := "-", "-"
			if p.Leader != 0 {
				leader = fmt.Sprint(p.Leader)
			}
			if p.CopyLeft > 0 {
				toCopy = humanBytes(p.CopyLeft)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.ID, p.Volume, p.Kind, p.Replicas, idList(p.Down), idList(p.Stale),
				leader, p.Items, humanBytes(p.UsedBytes), toCopy, p.Health)
		}
		tw.Flush()
	}
}

// chunkStatsWait bounds the whole chunk statistics step of status, so a
// dead meta node delays the command by at most this, whatever the number
// of volumes.
const chunkStatsWait = 3 * time.Second

// addChunkStats asks every chunk index shard of each volume for its
// statistics; a volume whose shards do not all answer in time gets none.
func addChunkStats(ctx context.Context, m *pb.ClusterMap, r *statusReport, conf *tls.Config) {
	ctx, cancel := context.WithTimeout(ctx, chunkStatsWait)
	defer cancel()
	remote := fsck.NewRemote(m, 2*time.Second, conf, nil)
	defer remote.Close()
	byName := map[string]*pb.Volume{}
	for _, v := range m.GetVolumes() {
		byName[v.GetName()] = v
	}
	for i := range r.Volumes {
		v := byName[r.Volumes[i].Name]
		if len(v.GetChunkIndexPartitions()) == 0 {
			continue
		}
		// One request per meta partition: the shards' stats carry the
		// index figures, every partition's its pending drops.
		stats := map[uint64]*metapb.PartitionStatsResponse{}
		for _, part := range v.GetMetaPartitions() {
			if st, err := remote.PartitionStats(ctx, part); err == nil {
				stats[part] = st
			}
		}
		c := &statusChunks{}
		for _, part := range v.GetChunkIndexPartitions() {
			st, ok := stats[part]
			if !ok {
				c = nil
				break
			}
			c.Entries += st.GetChunks()
			c.StoredBytes += st.GetChunkBytes()
			c.ReferencedBytes += st.GetChunkRefBytes()
			c.ZeroRef += st.GetZeroRefChunks()
			c.Dead += st.GetDeadChunks()
		}
		if c == nil {
			continue
		}
		for _, st := range stats {
			c.PendingDrops += st.GetPendingChunkDrops()
		}
		if c.StoredBytes > 0 {
			c.DedupRatio = float64(c.ReferencedBytes) / float64(c.StoredBytes)
		}
		r.Volumes[i].Chunks = c
	}
}

// idList prints node ids, or "-" for none.
func idList(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	return fmt.Sprint(ids)
}
