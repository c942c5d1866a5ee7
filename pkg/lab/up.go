package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/mountinfo"
	"github.com/cairnfs/cairn/pkg/pki"
)

// Up makes the lab of cfg and returns once it is ready: every master up
// with a leader elected, every meta and data node alive, the volume
// created with a leader for each of its partitions, and every client
// host's mount answering. On an error it takes down what it made (the
// logs stay in the dir). Needs root.
func Up(ctx context.Context, cfg Config) (_ *Lab, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cairn lab needs root (it makes network namespaces, a bridge, nftables rules and mounts): run it as root, e.g. with sudo")
	}
	if err := requireTools(); err != nil {
		return nil, err
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("lab: no dir")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("lab dir %s: %w", cfg.Dir, err)
	}
	p, err := newPlan(cfg, dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab dir: %w", err)
	}
	unlock, err := lockDir(dir, 0)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	if err := checkNetwork(ctx, p); err != nil {
		return nil, err
	}
	s := &State{Version: stateVersion, ID: p.ID, Dir: dir, Phase: PhaseMaking, Created: time.Now().UTC(), Binary: cfg.Binary,
		Volume: cfg.Volume, Subnet: p.Subnet.String(), Zones: cfg.Zones, Bridge: p.Bridge, SmallDiskBytes: cfg.SmallDiskBytes,
		Hosts: p.Hosts, Procs: p.Procs, NextFault: 1}
	if err := saveState(s); err != nil {
		return nil, err
	}
	l := &Lab{dir: dir, out: cfg.Out}
	defer func() {
		if err != nil {
			fmt.Fprintf(l.out, "lab up failed: %v\ntaking down what was made (logs stay in %s)\n", err, dir)
			if derr := l.down(context.WithoutCancel(ctx), s); derr != nil {
				err = fmt.Errorf("%w; and taking it down: %v (run cairn lab down --dir %s)", err, derr, dir)
			}
			_ = saveState(s)
			l.waitChildren(killGrace)
		}
	}()
	fmt.Fprintf(l.out, "lab %s: %d server hosts in %d zones, %d client hosts on %s (bridge %s)\n", s.ID, cfg.Hosts, cfg.Zones, cfg.Clients, s.Subnet, s.Bridge)
	for _, st := range p.networkSteps() {
		if err := l.make(ctx, s, st); err != nil {
			return nil, err
		}
	}
	if err := l.makeDisks(ctx, s); err != nil {
		return nil, err
	}
	if err := makeCerts(s); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.Ready)
	defer cancel()
	if err := l.startRoles(s, RoleMaster, RoleMeta, RoleData); err != nil {
		return nil, err
	}
	if err := l.waitCluster(rctx, s); err != nil {
		return nil, err
	}
	if err := l.createVolume(rctx, s, Replicas(cfg.Hosts)); err != nil {
		return nil, err
	}
	if err := l.waitLeaders(rctx, s); err != nil {
		return nil, err
	}
	if err := l.startMounts(rctx, s); err != nil {
		return nil, err
	}
	s.Phase = PhaseUp
	if err := saveState(s); err != nil {
		return nil, err
	}
	return l, nil
}

// prepareDir accepts an empty dir or one of a lab that was taken down
// (whose files it removes, but for the reports of its nemesis runs: a lab
// starts fresh), and refuses anything else.
func prepareDir(dir string) error {
	s, err := loadState(dir)
	if err == nil && s.Phase != PhaseDown {
		return fmt.Errorf("a lab is already in %s (phase %s): take it down first with cairn lab down --dir %s", dir, s.Phase, dir)
	}
	if err != nil && !errors.Is(err, ErrNoLab) {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("lab dir: %w", err)
	}
	for _, e := range ents {
		switch name := e.Name(); {
		case name == lockFile:
		case s != nil && name == "jepsen":
			// Reports of earlier nemesis runs on this dir: kept, the next
			// run's beside them.
		case s != nil && (name == StateFile || name == "hosts" || name == "tls" || name == filepath.Base(BenchMount(dir))):
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("remove the old lab's %s: %w", name, err)
			}
		default:
			return fmt.Errorf("lab dir %s holds %s and no lab that was taken down: choose an empty --dir", dir, name)
		}
	}
	return nil
}

// checkNetwork refuses a subnet the host routes (or has addresses in),
// and kernel objects that already carry the lab's names.
func checkNetwork(ctx context.Context, p *plan) error {
	routes, err := hostPrefixes(ctx)
	if err != nil {
		return err
	}
	if c := clashes(p.Subnet, routes); len(c) > 0 {
		return fmt.Errorf("lab: subnet %s overlaps %v, which this machine routes; choose another with --subnet", p.Subnet, c)
	}
	if linkExists(p.Bridge) {
		return fmt.Errorf("lab: bridge %s exists already (a lab of this dir not taken down?); remove it with ip link del %s", p.Bridge, p.Bridge)
	}
	for _, h := range p.Hosts {
		if netnsExists(h.Netns) || linkExists(h.Veth) {
			return fmt.Errorf("lab: namespace %s or link %s exists already; remove them (ip netns del %s; ip link del %s)", h.Netns, h.Veth, h.Netns, h.Veth)
		}
	}
	return nil
}

// make records st's resource, then runs its commands.
func (l *Lab) make(ctx context.Context, s *State, st step) error {
	s.made(st.Made)
	if err := saveState(s); err != nil {
		return err
	}
	for _, c := range st.Cmds {
		if _, err := run(ctx, c); err != nil {
			return fmt.Errorf("lab: make %s %s: %w", st.Made.Kind, st.Made.Name, err)
		}
	}
	return nil
}

// makeDisks mounts the small disks' tmpfs.
func (l *Lab) makeDisks(ctx context.Context, s *State) error {
	for _, h := range s.Hosts {
		if !h.SmallDisk {
			continue
		}
		path := smallDiskDir(s.Dir, h.Name)
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("lab: small disk of %s: %w", h.Name, err)
		}
		s.made(Resource{Kind: ResTmpfs, Name: path, Host: h.Name})
		if err := saveState(s); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", path, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(s.SmallDiskBytes, 10)+",mode=0755"); err != nil {
			return fmt.Errorf("lab: mount a tmpfs of %d bytes on %s: %w", s.SmallDiskBytes, path, err)
		}
	}
	return ctx.Err()
}

// makeCerts creates the lab's CA, a node certificate per server process
// named HOST-ROLE for its host's address, an admin identity per mount
// (HOST-mount) and the lab's own admin identity.
func makeCerts(s *State) error {
	ca := tlsDir(s.Dir, caIdentity)
	if err := pki.CreateCA(ca, "cairn lab "+s.ID); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	issue := func(who string, req pki.Request) error {
		if err := pki.Issue(ca, tlsDir(s.Dir, who), req); err != nil {
			return fmt.Errorf("lab: certificate %s: %w", who, err)
		}
		return nil
	}
	for _, p := range s.Procs {
		h, _ := s.Host(p.Host)
		req := pki.Request{Name: certName(p.Host, p.Role), Kind: pki.KindNode, Hosts: []string{h.Addr}}
		if p.Role == RoleMount {
			req = pki.Request{Name: certName(p.Host, p.Role), Kind: pki.KindAdmin}
		}
		if err := issue(certName(p.Host, p.Role), req); err != nil {
			return err
		}
	}
	return issue(adminIdentity, pki.Request{Name: "lab-" + s.ID + "-admin", Kind: pki.KindAdmin})
}

// startRoles starts the processes of roles, role by role.
func (l *Lab) startRoles(s *State, roles ...string) error {
	for _, role := range roles {
		for i := range s.Procs {
			if s.Procs[i].Role != role {
				continue
			}
			err := l.spawn(s, &s.Procs[i])
			if serr := saveState(s); err == nil {
				err = serr
			}
			if err != nil {
				return err
			}
		}
	}
	n := 0
	for _, p := range s.Procs {
		if slices.Contains(roles, p.Role) {
			n++
		}
	}
	fmt.Fprintf(l.out, "started %d processes (%s)\n", n, strings.Join(roles, ", "))
	return nil
}

// poll calls check every half second until it reports done, an error, or
// ctx ends; a process of the lab that died ends the wait with its log.
// what names the wait in errors; progress lines go to the lab's output.
func (l *Lab) poll(ctx context.Context, s *State, what string, check func() (string, bool, error)) error {
	last := ""
	for {
		for _, p := range s.Procs {
			if p.Pid != 0 && procState(p) == ProcDead {
				return fmt.Errorf("lab: %s exited while waiting for %s; log %s:\n%s", p.Key(), what, p.Log, tail(p.Log, 8))
			}
		}
		msg, done, err := check()
		if err != nil || done {
			return err
		}
		if msg != last {
			fmt.Fprintf(l.out, "  %s\n", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: no %s in time: %s (logs under %s)", what, msg, filepath.Join(s.Dir, "hosts"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitCluster waits for a master leader, every master and every node.
func (l *Lab) waitCluster(ctx context.Context, s *State) error {
	masters, nodes := 0, 0
	for _, p := range s.Procs {
		switch p.Role {
		case RoleMaster:
			masters++
		case RoleMeta, RoleData:
			nodes++
		}
	}
	return l.poll(ctx, s, "cluster", func() (string, bool, error) {
		cs, err := l.clusterFrom(ctx, s, s.Hosts[0])
		if err != nil {
			return "waiting for a master leader", false, nil
		}
		up, alive := cs.Count(RoleMaster, "alive"), cs.Count(RoleMeta, "alive")+cs.Count(RoleData, "alive")
		msg := fmt.Sprintf("%d/%d masters up, %d/%d nodes alive", up, masters, alive, nodes)
		return msg, cs.Leader != "" && up == masters && alive == nodes, nil
	})
}

// createVolume creates the lab's volume (from inside the first host).
func (l *Lab) createVolume(ctx context.Context, s *State, replicas int) error {
	out, err := run(ctx, command{Netns: s.Hosts[0].Netns, Argv: []string{s.Binary, "volume", "create", s.Volume,
		"--replicas", strconv.Itoa(replicas), "--master", masterAddrsOf(s), "--tls-dir", tlsDir(s.Dir, adminIdentity)}})
	if err != nil && !strings.Contains(out, "exists") {
		return fmt.Errorf("lab: create volume %s: %w", s.Volume, err)
	}
	fmt.Fprintf(l.out, "created volume %s (%d replicas)\n", s.Volume, replicas)
	return nil
}

// waitLeaders waits until every partition of the volume has a leader.
func (l *Lab) waitLeaders(ctx context.Context, s *State) error {
	return l.poll(ctx, s, "partition leaders", func() (string, bool, error) {
		cs, err := l.clusterFrom(ctx, s, s.Hosts[0])
		if err != nil {
			return "waiting for the master", false, nil
		}
		n, led := 0, 0
		for _, p := range cs.Partitions {
			if p.Volume == s.Volume {
				n++
				if p.Leader != 0 {
					led++
				}
			}
		}
		return fmt.Sprintf("%d/%d partitions of %s with a leader", led, n, s.Volume), n > 0 && led == n, nil
	})
}

// startMounts starts every client host's mount and waits until each is
// mounted and answers.
func (l *Lab) startMounts(ctx context.Context, s *State) error {
	for _, h := range s.Hosts {
		if !h.Client {
			continue
		}
		mp := mountDir(s.Dir, h.Name)
		if err := os.MkdirAll(mp, 0o755); err != nil {
			return fmt.Errorf("lab: mount point of %s: %w", h.Name, err)
		}
		s.made(Resource{Kind: ResFuse, Name: mp, Host: h.Name})
	}
	if err := l.startRoles(s, RoleMount); err != nil {
		return err
	}
	for _, h := range s.Hosts {
		if h.Client {
			if err := l.waitMount(ctx, s, h.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitMount waits until host's mount is mounted and answers statfs.
func (l *Lab) waitMount(ctx context.Context, s *State, host string) error {
	mp := mountDir(s.Dir, host)
	return l.poll(ctx, s, "mount on "+host, func() (string, bool, error) {
		if ok, _ := mounted(mp); !ok {
			return "waiting for the mount of " + host, false, nil
		}
		if err := mountAnswers(mp, 5*time.Second); err != nil {
			return fmt.Sprintf("mount of %s does not answer yet: %v", host, err), false, nil
		}
		return "", true, nil
	})
}

// mounted reports whether path is a mount point of this machine.
func mounted(path string) (bool, error) { return mountinfo.Mounted(path) }
