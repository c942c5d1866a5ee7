// Package localcluster runs a whole Cairn cluster on one machine as child
// processes of `cairn up`: masters, meta nodes and data nodes on loopback ports,
// all state under one data dir, stopped together.
//
// The first run picks free ports and writes them to <data-dir>/cluster.json; later
// runs reuse them, because Raft peers and registered nodes are known by address.
// Admin commands find the cluster through the same file.
package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cairnfs/cairn/pkg/loopback"
)

// LayoutFile is the name of the layout file in a cluster's data dir.
const LayoutFile = "cluster.json"

// ErrNoCluster is returned by LoadLayout for a dir without a cluster.
var ErrNoCluster = errors.New("no cairn up cluster")

// Proc is one process of the cluster.
type Proc struct {
	Name        string `json:"name"` // e.g. "meta-2"; also its dir under the data dir
	Role        string `json:"role"` // master, meta or data
	ID          uint64 `json:"id"`   // Raft id of a master; requested node id otherwise
	Addr        string `json:"addr"`
	MetricsAddr string `json:"metrics_addr"`
	DataAddr    string `json:"data_addr,omitempty"` // data nodes: the data-path protocol
}

// Layout is the processes of a local cluster and their fixed ports.
type Layout struct {
	Version int    `json:"version"`
	Procs   []Proc `json:"procs"`
}

// NewLayout allocates loopback ports for masters, metas and datas processes.
func NewLayout(masters, metas, datas int) (*Layout, error) {
	if masters < 1 || masters%2 == 0 {
		return nil, fmt.Errorf("--masters must be odd and at least 1 (a Raft majority), not %d", masters)
	}
	if metas < 1 || datas < 1 {
		return nil, fmt.Errorf("need at least one meta and one data node")
	}
	l := &Layout{Version: 1}
	// Masters are Raft ids 1..n; meta and data nodes share one id space, so meta
	// nodes get 1..metas and data nodes follow.
	nodeID := uint64(0)
	// All ports in one call: FreePorts releases its ports when it returns,
	// so separate calls per process could hand two processes the same one.
	all, err := loopback.FreePorts(3 * (masters + metas + datas))
	if err != nil {
		return nil, err
	}
	add := func(role string, n int) error {
		for i := 1; i <= n; i++ {
			ports := all[:3]
			all = all[3:]
			id := uint64(i)
			if role != "master" {
				nodeID++
				id = nodeID
			}
			l.Procs = append(l.Procs, Proc{
				Name: role + "-" + strconv.Itoa(i), Role: role, ID: id,
				Addr: ports[0], MetricsAddr: ports[1],
			})
			if role == "data" {
				l.Procs[len(l.Procs)-1].DataAddr = ports[2]
			}
		}
		return nil
	}
	for _, r := range []struct {
		role string
		n    int
	}{{"master", masters}, {"meta", metas}, {"data", datas}} {
		if err := add(r.role, r.n); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// LoadLayout reads dir's layout; ErrNoCluster if dir has none.
func LoadLayout(dir string) (*Layout, error) {
	b, err := os.ReadFile(filepath.Join(dir, LayoutFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoCluster, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster layout: %w", err)
	}
	var l Layout
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%s in %s is corrupt: %w", LayoutFile, dir, err)
	}
	if l.Version != 1 || len(l.Masters()) == 0 {
		return nil, fmt.Errorf("%s in %s: unsupported version %d or no masters", LayoutFile, dir, l.Version)
	}
	return &l, nil
}

// Save writes the layout into dir.
func (l *Layout) Save(dir string) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, LayoutFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write cluster layout: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, LayoutFile))
}

// Masters returns the master processes.
func (l *Layout) Masters() []Proc { return l.byRole("master") }

// Count returns how many processes have role.
func (l *Layout) Count(role string) int { return len(l.byRole(role)) }

func (l *Layout) byRole(role string) []Proc {
	var out []Proc
	for _, p := range l.Procs {
		if p.Role == role {
			out = append(out, p)
		}
	}
	return out
}

// MasterAddrs lists the masters' gRPC addresses.
func (l *Layout) MasterAddrs() []string {
	var out []string
	for _, p := range l.Masters() {
		out = append(out, p.Addr)
	}
	return out
}

// PeersFlag is the --peers value every master of the layout is started with.
func (l *Layout) PeersFlag() string {
	s := ""
	for i, p := range l.Masters() {
		if i > 0 {
			s += ","
		}
		s += strconv.FormatUint(p.ID, 10) + "=" + p.Addr
	}
	return s
}

// fillDataAddrs gives a data-path port to data nodes of a layout written before
// data nodes had one, and saves the layout if it changed.
func (l *Layout) fillDataAddrs(dir string) error {
	changed := false
	for i := range l.Procs {
		if l.Procs[i].Role != "data" || l.Procs[i].DataAddr != "" {
			continue
		}
		ports, err := loopback.FreePorts(1)
		if err != nil {
			return err
		}
		l.Procs[i].DataAddr, changed = ports[0], true
	}
	if !changed {
		return nil
	}
	return l.Save(dir)
}
