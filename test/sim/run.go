package sim

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/fsworkload"
	"github.com/cairnfs/cairn/pkg/history"
)

// RunConfig is one seeded run: a cluster, clients on hosts of their own
// running the fault run's workload, and a schedule of faults, all drawn
// from Seed.
type RunConfig struct {
	Seed uint64
	// Duration is the simulated time of the workload and the faults
	// (default 60 s).
	Duration time.Duration
	// Settle is the simulated time the cluster gets, after every fault is
	// healed and every crashed server restarted, before the final reads
	// (default 60 s).
	Settle time.Duration
	// Clients is the number of client hosts (default 3), each with
	// fsworkload's workers.
	Clients int
	// MaxFaults bounds the faults in force at once (default 2; negative:
	// no faults).
	MaxFaults int
	// Kinds are the kinds of faults drawn (nil: every kind).
	Kinds []FaultKind
	// Pause is each worker's pause between two operations (default
	// 20 ms): longer pauses make a run cheaper, with as many faults.
	Pause time.Duration
	// Dir holds the servers' real directories.
	Dir string
	// Log receives the servers' logs (nil: discarded); History the
	// history as JSON lines (package history; nil: kept in Result only).
	Log, History io.Writer
}

func (c *RunConfig) defaults() {
	if c.Duration <= 0 {
		c.Duration = time.Minute
	}
	if c.Settle <= 0 {
		c.Settle = time.Minute
	}
	if c.Clients <= 0 {
		c.Clients = 3
	}
	if c.MaxFaults == 0 {
		c.MaxFaults = 2
	}
}

// Result is what a run did. Its history is checked outside the bubble
// (package checker): the search is CPU work, on which the bubble's clock
// does not move, so a bound on it must be real time.
type Result struct {
	Seed      uint64
	Simulated time.Duration // simulated time from the cluster's start to the last final read
	Faults    []Fault
	Ops       []history.Op
}

// Run runs one seeded run. Call it inside a synctest bubble: outside, the
// simulated minutes are real ones.
func Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	cfg.defaults()
	began := time.Now()
	c, err := New(ctx, DefaultTopology, Options{Dir: cfg.Dir, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	const volume = "sim"
	if err := c.CreateVolume(ctx, volume, 0); err != nil {
		return nil, err
	}
	hosts := map[string]fsworkload.Files{}
	var clientIPs []string
	for range cfg.Clients {
		h, ip := c.clientHost()
		v, err := client.Open(ctx, c.MasterAddrs(), volume, &client.Options{Network: h})
		if err != nil {
			return nil, fmt.Errorf("open volume %q on %s: %w", volume, ip, err)
		}
		defer v.Close()
		hosts[ip] = sdkFiles{v: v}
		clientIPs = append(clientIPs, ip)
	}
	hw := cfg.History
	if hw == nil {
		hw = io.Discard // the run keeps its operations in memory too (Ops)
	}
	rec := history.NewRecorder(hw)
	start := time.Now()
	w, err := fsworkload.New(fsworkload.Config{Root: "run", Hosts: hosts, WorkersPerHost: 2, Registers: 4, Dirs: 2, Names: 4, Pause: cfg.Pause, Seed: cfg.Seed}, rec, start)
	if err != nil {
		return nil, err
	}
	if err := w.Setup(); err != nil {
		return nil, err
	}
	res := &Result{Seed: cfg.Seed}
	n := newNemesis(c, clientIPs, cfg.Seed)
	if cfg.MaxFaults > 0 {
		res.Faults = n.plan(cfg.Duration, cfg.MaxFaults, cfg.Kinds)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.run(ctx, start, res.Faults)
	}()
	w.Run(ctx, start.Add(cfg.Duration))
	<-done
	if err := n.healAll(ctx); err != nil {
		return nil, err
	}
	select {
	case <-time.After(cfg.Settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := w.Final(ctx); err != nil {
		return nil, err
	}
	// And through a client that took no part: what the servers kept,
	// whatever the run's clients cache.
	h, ip := c.clientHost()
	fresh, err := client.Open(ctx, c.MasterAddrs(), volume, &client.Options{Network: h})
	if err != nil {
		return nil, fmt.Errorf("open volume %q on %s: %w", volume, ip, err)
	}
	defer fresh.Close()
	if err := w.FinalThrough(ctx, ip, sdkFiles{v: fresh}); err != nil {
		return nil, err
	}
	if err := w.Err(); err != nil {
		return nil, err
	}
	if err := rec.Flush(); err != nil {
		return nil, err
	}
	res.Ops = rec.Ops()
	res.Simulated = time.Since(began)
	return res, nil
}
