package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// statusZone is one failure domain in `cairn status`: its meta and data
// nodes and how many are alive.
type statusZone struct {
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
	Alive int    `json:"alive"`
	// Down: no node of the zone is alive.
	Down bool `json:"down"`
}

// zonesOf groups the meta and data nodes of nodes by zone (masters have
// none); nil when no node has a zone.
func zonesOf(nodes []statusNode) []statusZone {
	byName := map[string]*statusZone{}
	for _, n := range nodes {
		if n.Zone == "" || n.Role == "master" {
			continue
		}
		z := byName[n.Zone]
		if z == nil {
			z = &statusZone{Name: n.Zone}
			byName[n.Zone] = z
		}
		z.Nodes++
		if n.State == "alive" {
			z.Alive++
		}
	}
	var out []statusZone
	for _, z := range byName {
		z.Down = z.Alive == 0
		out = append(out, *z)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// zoneRule says what the cluster does while zones are down, with the
// master's out-after; "" when none is.
//
// The rule (docs/design.md, "Partitions and zones"): a partition that lost
// the replicas in a down zone goes on with those left, writable while it
// keeps its write quorum (2 of 3); the nodes of the zone go out after
// out-after down, and recovery then rebuilds their replicas on nodes of the
// zones left, preferring a zone the partition does not use, else sharing
// one; when the zone comes back, the balancer moves replicas until no two
// of a partition share a zone again.
func zoneRule(zones []statusZone, outAfter time.Duration) string {
	var down []string
	for _, z := range zones {
		if z.Down {
			down = append(down, z.Name)
		}
	}
	if len(down) == 0 {
		return ""
	}
	left := len(zones) - len(down)
	when := "after its nodes were down for the master's out-after"
	if outAfter > 0 {
		when = fmt.Sprintf("once its nodes have been down for %v (the master's --out-after)", outAfter)
	}
	return fmt.Sprintf("zone %s down: its partitions go on with the replicas left in %d zones (writable while 2 of 3 are up); %s their replicas are rebuilt in the zones left, two sharing a zone when no other is free; when it is back, replicas are spread over the zones again",
		strings.Join(down, ", "), left, when)
}
