package console

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Health counts a cluster's partitions by state.
type Health struct {
	// Healthy: every replica up and in sync, no move in progress.
	Healthy int `json:"healthy"`
	// Degraded: a replica is down (writes go on while the write quorum
	// holds; re-replication starts once the node is out).
	Degraded int `json:"degraded"`
	// Recovering: a replica catches up (stale) or a move copies one.
	Recovering int `json:"recovering"`
}

// healthOf classifies every partition of m.
func healthOf(m *pb.ClusterMap) Health {
	var h Health
	for _, p := range m.GetPartitions() {
		switch {
		case len(p.GetDown()) > 0:
			h.Degraded++
		case len(p.GetStale()) > 0 || p.GetJoining() != 0 || p.GetLeaving() != 0:
			h.Recovering++
		default:
			h.Healthy++
		}
	}
	return h
}

// Event is one thing that happened to the cluster, as the console saw it
// between two looks at the map.
type Event struct {
	UnixMs int64  `json:"unix_ms"`
	Kind   string `json:"kind"` // node, leader, volume, partition
	Text   string `json:"text"`
}

// diff lists what changed from prev to cur (either may lack parts; a nil
// prev yields nothing: the first look has no "before").
func diff(prev, cur *pb.StatusResponse, nowMs int64) []Event {
	if prev == nil || cur == nil {
		return nil
	}
	var out []Event
	add := func(kind, format string, a ...any) {
		out = append(out, Event{UnixMs: nowMs, Kind: kind, Text: fmt.Sprintf(format, a...)})
	}
	if prev.GetLeaderId() != cur.GetLeaderId() {
		add("leader", "master %d leads (was master %d)", cur.GetLeaderId(), prev.GetLeaderId())
	}
	pm, cm := prev.GetMap(), cur.GetMap()
	for _, id := range slices.Sorted(maps.Keys(cm.GetNodes())) {
		n := cm.GetNodes()[id]
		old, ok := pm.GetNodes()[id]
		switch {
		case !ok:
			add("node", "%s node %d registered at %s", roleName(n.GetRole()), id, n.GetAddr())
		case old.GetState() != n.GetState():
			add("node", "%s node %d is %s (was %s)", roleName(n.GetRole()), id, stateName(n.GetState()), stateName(old.GetState()))
		case old.GetDraining() != n.GetDraining() && n.GetDraining():
			add("node", "%s node %d is being decommissioned", roleName(n.GetRole()), id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(pm.GetNodes())) {
		if _, ok := cm.GetNodes()[id]; !ok {
			add("node", "node %d left the map", id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(cm.GetVolumes())) {
		if _, ok := pm.GetVolumes()[id]; !ok {
			add("volume", "volume %s created", cm.GetVolumes()[id].GetName())
		}
	}
	for _, id := range slices.Sorted(maps.Keys(pm.GetVolumes())) {
		if _, ok := cm.GetVolumes()[id]; !ok {
			add("volume", "volume %s deleted", pm.GetVolumes()[id].GetName())
		}
	}
	for _, id := range slices.Sorted(maps.Keys(cm.GetPartitions())) {
		p := cm.GetPartitions()[id]
		old, ok := pm.GetPartitions()[id]
		if !ok {
			continue
		}
		switch {
		case p.GetJoining() != 0 && old.GetJoining() == 0:
			add("partition", "partition %d: replica moves from node %d to node %d", id, p.GetLeaving(), p.GetJoining())
		case p.GetJoining() == 0 && old.GetJoining() != 0:
			if slices.Contains(p.GetReplicas(), old.GetJoining()) {
				add("partition", "partition %d: node %d replaced node %d", id, old.GetJoining(), old.GetLeaving())
			} else {
				add("partition", "partition %d: the move to node %d was abandoned", id, old.GetJoining())
			}
		}
		if len(old.GetStale()) > 0 && len(p.GetStale()) == 0 && len(p.GetDown()) == 0 {
			add("partition", "partition %d: every replica in sync", id)
		}
	}
	return out
}

func roleName(r pb.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

func stateName(s pb.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}
