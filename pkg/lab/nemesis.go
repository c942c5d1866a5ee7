package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// NemesisConfig shapes a random schedule of faults (PlanNemesis).
type NemesisConfig struct {
	// Seed picks every fault, target and time: one seed, one schedule.
	Seed uint64
	// Duration: faults begin before it; each is healed by it.
	Duration time.Duration
	// Kinds are the faults to draw from; default every kind the lab can
	// inject (disk-full only with a small disk), each as often.
	Kinds []FaultKind
	// MaxConcurrent faults in force at once; default 1. Faults in force
	// together never share a host, and a fault over many hosts (a zone,
	// a split) runs alone.
	MaxConcurrent int
	// FaultMin and FaultMax bound how long a fault lasts; default 5 to
	// 20 s.
	FaultMin, FaultMax time.Duration
	// GapMin and GapMax bound the quiet time before the next fault;
	// default 2 to 8 s.
	GapMin, GapMax time.Duration
	// Rates are the link rates of slow faults; default 1mbit and 10mbit.
	Rates []string
}

func (c *NemesisConfig) defaults(s *State) error {
	if c.Duration <= 0 {
		return errors.New("nemesis: a duration is needed")
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 1
	}
	if c.FaultMin <= 0 {
		c.FaultMin = 5 * time.Second
	}
	if c.FaultMax < c.FaultMin {
		c.FaultMax = max(20*time.Second, c.FaultMin)
	}
	if c.GapMin <= 0 {
		c.GapMin = 2 * time.Second
	}
	if c.GapMax < c.GapMin {
		c.GapMax = max(8*time.Second, c.GapMin)
	}
	if len(c.Rates) == 0 {
		c.Rates = []string{"1mbit", "10mbit"}
	}
	if len(c.Kinds) == 0 {
		for _, k := range FaultKinds {
			if k.Kind != KindDiskFull || len(smallDiskHosts(s)) > 0 {
				c.Kinds = append(c.Kinds, k.Kind)
			}
		}
	}
	for _, k := range c.Kinds {
		if !knownKind(k) {
			return fmt.Errorf("nemesis: unknown fault kind %q (want one of %s)", k, kindNames())
		}
		if k == KindDiskFull && len(smallDiskHosts(s)) == 0 {
			return errors.New("nemesis: disk-full needs a host with a small disk (cairn lab up --small-disk HOST)")
		}
		if k == KindBridgeSplit && len(servers(s)) < 3 {
			return errors.New("nemesis: bridge-split needs 3 server hosts")
		}
	}
	return nil
}

func knownKind(k FaultKind) bool {
	for _, fk := range FaultKinds {
		if fk.Kind == k {
			return true
		}
	}
	return false
}

// Planned is one fault of a schedule: injected At, healed at Heal, both
// counted from the schedule's start.
type Planned struct {
	At, Heal time.Duration
	Spec     Spec
	// Hosts are the hosts it touches (none other is touched by a fault
	// in force at the same time).
	Hosts []string
}

// PlanNemesis draws a schedule of faults for the lab of s: kinds taken in
// turns from a shuffled deck, so that every kind comes up, targets and
// times at random within cfg's bounds. It is pure: the same state and
// config give the same schedule.
func PlanNemesis(s *State, cfg NemesisConfig) ([]Planned, error) {
	if err := cfg.defaults(s); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	var (
		out  []Planned
		deck []FaultKind
	)
	t := between(cfg.GapMin, cfg.GapMax)
	for t < cfg.Duration {
		if len(deck) == 0 {
			deck = slices.Clone(cfg.Kinds)
			rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		var active []Planned
		for _, p := range out {
			if p.At <= t && t < p.Heal {
				active = append(active, p)
			}
		}
		busy := map[string]bool{}
		wide := false
		for _, p := range active {
			for _, h := range p.Hosts {
				busy[h] = true
			}
			wide = wide || isWide(p.Spec.Kind)
		}
		kind := deck[0]
		p, ok := Planned{}, false
		if len(active) < cfg.MaxConcurrent && !wide && (len(active) == 0 || !isWide(kind)) {
			p, ok = drawFault(s, rng, kind, busy, cfg.Rates)
		}
		if !ok {
			// Wait for the first fault in force to heal.
			next := cfg.Duration
			for _, a := range active {
				next = min(next, a.Heal)
			}
			t = max(next, t+time.Second) + between(cfg.GapMin, cfg.GapMax)
			continue
		}
		deck = deck[1:]
		p.At = t
		p.Heal = min(t+between(cfg.FaultMin, cfg.FaultMax), cfg.Duration)
		out = append(out, p)
		if cfg.MaxConcurrent > 1 && !isWide(kind) {
			t += between(cfg.GapMin, cfg.GapMax)
		} else {
			t = p.Heal + between(cfg.GapMin, cfg.GapMax)
		}
	}
	return out, nil
}

// isWide: a fault over several hosts at once, which runs alone.
func isWide(k FaultKind) bool {
	return k == KindZoneDown || k == KindSplit || k == KindBridgeSplit
}

// drawFault picks the targets of a fault of kind among the hosts not busy;
// false when there is none.
func drawFault(s *State, rng *rand.Rand, kind FaultKind, busy map[string]bool, rates []string) (Planned, bool) {
	free := func(names []string) []string {
		return slices.DeleteFunc(slices.Clone(names), func(h string) bool { return busy[h] })
	}
	pick := func(names []string) string { return names[rng.IntN(len(names))] }
	srv := free(servers(s))
	all := free(hostNames(s.Hosts, nil))
	switch kind {
	case KindKill, KindPause:
		if len(srv) == 0 {
			return Planned{}, false
		}
		h := pick(srv)
		host, _ := s.Host(h)
		role := pick(host.Roles)
		return Planned{Spec: Spec{Kind: kind, Args: []string{h + "/" + role}}, Hosts: []string{h}}, true
	case KindHostDown, KindIsolate:
		if len(srv) == 0 {
			return Planned{}, false
		}
		h := pick(srv)
		return Planned{Spec: Spec{Kind: kind, Args: []string{h}}, Hosts: []string{h}}, true
	case KindZoneDown:
		z := "z" + strconv.Itoa(1+rng.IntN(max(1, s.Zones)))
		var hosts []string
		for _, h := range s.Hosts {
			if !h.Client && h.Zone == z {
				hosts = append(hosts, h.Name)
			}
		}
		return Planned{Spec: Spec{Kind: kind, Args: []string{z}}, Hosts: hosts}, len(hosts) > 0
	case KindSplit:
		all := servers(s)
		minority := max(1, (len(all)-1)/2)
		side := slices.Clone(all)
		rng.Shuffle(len(side), func(i, j int) { side[i], side[j] = side[j], side[i] })
		side = side[:1+rng.IntN(minority)]
		slices.Sort(side)
		return Planned{Spec: Spec{Kind: kind, Args: []string{strings.Join(side, ",")}}, Hosts: hostNames(s.Hosts, nil)}, true
	case KindOneway:
		if len(all) < 2 || len(srv) == 0 {
			return Planned{}, false
		}
		from := pick(all)
		to := pick(slices.DeleteFunc(slices.Clone(all), func(h string) bool { return h == from }))
		if !slices.Contains(srv, from) && !slices.Contains(srv, to) {
			to = pick(slices.DeleteFunc(slices.Clone(srv), func(h string) bool { return h == from }))
		}
		return Planned{Spec: Spec{Kind: kind, Args: []string{from, to}}, Hosts: []string{from, to}}, true
	case KindBridgeSplit:
		return Planned{Spec: Spec{Kind: kind, Args: []string{pick(servers(s))}}, Hosts: hostNames(s.Hosts, nil)}, true
	case KindSlow:
		if len(all) == 0 {
			return Planned{}, false
		}
		h := pick(all)
		return Planned{Spec: Spec{Kind: kind, Args: []string{h, pick(rates)}}, Hosts: []string{h}}, true
	case KindDiskFull:
		disks := free(smallDiskHosts(s))
		if len(disks) == 0 {
			return Planned{}, false
		}
		h := pick(disks)
		return Planned{Spec: Spec{Kind: kind, Args: []string{h}}, Hosts: []string{h}}, true
	}
	return Planned{}, false
}

func servers(s *State) []string { return hostNames(s.Hosts, func(h Host) bool { return !h.Client }) }

func smallDiskHosts(s *State) []string {
	return hostNames(s.Hosts, func(h Host) bool { return h.SmallDisk })
}

// NemesisEvent is a fault injected or healed by RunNemesis, or one it
// could not inject.
type NemesisEvent struct {
	// At is when it happened, counted from the run's start.
	At    time.Duration `json:"at"`
	Fault int           `json:"fault,omitempty"` // the lab's fault id
	Spec  string        `json:"spec"`
	Heal  bool          `json:"heal,omitempty"`
	Err   string        `json:"err,omitempty"`
}

// RunNemesis injects and heals the faults of plan at their times from
// start, reporting each event to record, until the plan is done or ctx
// ends; it heals what it injected before it returns, also when ctx ended.
func (l *Lab) RunNemesis(ctx context.Context, plan []Planned, start time.Time, record func(NemesisEvent)) error {
	type timed struct {
		at   time.Duration
		heal bool
		i    int
	}
	var events []timed
	for i, p := range plan {
		events = append(events, timed{p.At, false, i}, timed{p.Heal, true, i})
	}
	slices.SortStableFunc(events, func(a, b timed) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.heal != b.heal { // heal before the next injection at the same time
			if a.heal {
				return -1
			}
			return 1
		}
		return 0
	})
	ids := map[int]int{} // plan index -> lab fault id
	healCtx := context.WithoutCancel(ctx)
	defer func() {
		for i, id := range ids {
			err := l.Heal(healCtx, id)
			record(nemesisEvent(start, id, plan[i].Spec, true, err))
		}
	}()
	for _, e := range events {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(e.at))):
		}
		spec := plan[e.i].Spec
		if !e.heal {
			f, err := l.Fault(ctx, spec)
			if err == nil {
				ids[e.i] = f.ID
			}
			record(nemesisEvent(start, f.ID, spec, false, err))
			continue
		}
		id, ok := ids[e.i]
		if !ok {
			continue
		}
		delete(ids, e.i)
		err := l.Heal(healCtx, id)
		record(nemesisEvent(start, id, spec, true, err))
		if err != nil {
			return fmt.Errorf("heal fault %d (%s): %w", id, spec, err)
		}
	}
	return nil
}

func nemesisEvent(start time.Time, id int, spec Spec, heal bool, err error) NemesisEvent {
	e := NemesisEvent{At: time.Since(start), Fault: id, Spec: spec.String(), Heal: heal}
	if err != nil {
		e.Err = err.Error()
	}
	return e
}
