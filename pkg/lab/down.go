package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Grace periods of Down: how long a process has after SIGTERM before
// SIGKILL, and how long after SIGKILL before Down gives up on it.
const (
	stopGrace = 10 * time.Second
	killGrace = 5 * time.Second
)

// Down stops every process of the lab in dir, unmounts its mounts and
// deletes its namespaces, links and bridge (and with them the faults'
// tables and qdiscs), working from the state file alone. It is
// idempotent: a lab already down, or a dir without a lab, is left as it
// is. The dir keeps the logs and data; the next Up in it starts afresh.
func Down(ctx context.Context, dir string, out io.Writer) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("lab dir %s: %w", dir, err)
	}
	if out == nil {
		out = io.Discard
	}
	l := &Lab{dir: abs, out: out}
	return l.Down(ctx)
}

// Down takes the lab down (see the package function Down).
func (l *Lab) Down(ctx context.Context) error {
	if _, err := loadState(l.dir); errors.Is(err, ErrNoLab) {
		fmt.Fprintf(l.out, "no lab in %s\n", l.dir)
		return nil
	}
	err := l.update(func(s *State) error {
		if s.Phase == PhaseDown {
			fmt.Fprintf(l.out, "the lab in %s is down already\n", l.dir)
			return nil
		}
		return l.down(ctx, s)
	})
	l.waitChildren(killGrace)
	return err
}

// waitChildren waits, at most d, for the waiters of the processes this
// Lab started.
func (l *Lab) waitChildren(d time.Duration) {
	done := make(chan struct{})
	go func() {
		l.children.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// down removes everything s records, best effort: each step runs even
// when one before it failed, and s is marked down only when all did.
func (l *Lab) down(ctx context.Context, s *State) error {
	var errs []error
	// Mounts first, while the cluster can take their last writes; then
	// the nodes, then the masters (so that nodes are not marked down by
	// masters still running), as cairn up stops a cluster.
	for _, roles := range [][]string{{RoleMount}, {RoleMeta, RoleData}, {RoleMaster}} {
		errs = append(errs, stopProcs(s, roles))
	}
	// Whatever else runs in the namespaces: a process started between
	// being started and being recorded, or by lab exec.
	for _, h := range s.Hosts {
		pids := netnsPids(h.Netns)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) > 0 {
			fmt.Fprintf(l.out, "killed %d more processes in %s\n", len(pids), h.Netns)
		}
	}
	for i := range s.Procs {
		s.Procs[i].Pid, s.Procs[i].Start = 0, 0
	}
	made := slices.Clone(s.Made)
	slices.Reverse(made)
	for _, r := range made {
		errs = append(errs, removeResource(ctx, r))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	s.Faults, s.Made, s.Phase = nil, nil, PhaseDown
	fmt.Fprintf(l.out, "lab %s is down: no process, mount, namespace or link of it is left (logs in %s)\n", s.ID, filepath.Join(s.Dir, "hosts"))
	return nil
}

// stopProcs stops the processes of roles: SIGTERM (and SIGCONT, for a
// paused one), then SIGKILL after stopGrace.
func stopProcs(s *State, roles []string) error {
	var procs []Proc
	for _, p := range s.Procs {
		if slices.Contains(roles, p.Role) && procState(p) != ProcDead {
			procs = append(procs, p)
		}
	}
	for _, p := range procs {
		_ = signal(p, syscall.SIGTERM)
		_ = signal(p, syscall.SIGCONT)
	}
	if waitGone(procs, stopGrace) {
		return nil
	}
	for _, p := range procs {
		_ = signal(p, syscall.SIGKILL)
	}
	if !waitGone(procs, killGrace) {
		return fmt.Errorf("processes of %v still run %s after SIGKILL", roles, killGrace)
	}
	return nil
}

// removeResource removes r if it is still there.
func removeResource(ctx context.Context, r Resource) error {
	switch r.Kind {
	case ResFuse, ResTmpfs:
		if ok, _ := mounted(r.Name); !ok {
			return nil
		}
		// Lazily: a FUSE mount whose server was killed cannot be
		// unmounted otherwise, and nothing of the lab uses it any more.
		if err := syscall.Unmount(r.Name, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", r.Name, err)
		}
	case ResVeth, ResBridge:
		if !linkExists(r.Name) {
			return nil
		}
		if _, err := run(ctx, command{Argv: []string{"ip", "link", "del", r.Name}}); err != nil && !missing(err) {
			return err
		}
	case ResNetns:
		if !netnsExists(r.Name) {
			return nil
		}
		if _, err := run(ctx, command{Argv: []string{"ip", "netns", "del", r.Name}}); err != nil && !missing(err) {
			return err
		}
	default:
		return fmt.Errorf("unknown resource kind %q (%s)", r.Kind, r.Name)
	}
	return nil
}
