package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// restartMountWait bounds how long a heal waits for a restarted mount.
const restartMountWait = 30 * time.Second

// Fault injects spec and returns it as recorded, with its id. The fault is
// recorded before it is applied: if applying fails part way, it stays in
// force as recorded and Heal of its id undoes what was done.
func (l *Lab) Fault(ctx context.Context, spec Spec) (Fault, error) {
	var f Fault
	err := l.update(func(s *State) error {
		if s.Phase != PhaseUp {
			return fmt.Errorf("lab fault: the lab in %s is %s, not up", s.Dir, s.Phase)
		}
		var err error
		if f, err = planFault(s, spec, s.NextFault, time.Now()); err != nil {
			return err
		}
		s.NextFault++
		s.Faults = append(s.Faults, f)
		if err := saveState(s); err != nil {
			return err
		}
		for _, a := range injectActions(s, f) {
			if err := l.do(ctx, s, a); err != nil {
				return fmt.Errorf("lab fault %d (%s) is only partly in force: %w; cairn lab heal %d undoes it", f.ID, spec, err, f.ID)
			}
		}
		return nil
	})
	return f, err
}

// Heal undoes fault id and forgets it. A fault whose heal fails part way
// stays recorded, and healing it again finishes the job.
func (l *Lab) Heal(ctx context.Context, id int) error {
	return l.update(func(s *State) error {
		i := slices.IndexFunc(s.Faults, func(f Fault) bool { return f.ID == id })
		if i < 0 {
			return fmt.Errorf("lab heal: no fault %d in force (cairn lab status lists them)", id)
		}
		return l.heal(ctx, s, i)
	})
}

// HealAll heals every fault in force, the newest first, and returns the
// ids healed.
func (l *Lab) HealAll(ctx context.Context) ([]int, error) {
	var ids []int
	err := l.update(func(s *State) error {
		var errs []error
		for i := len(s.Faults) - 1; i >= 0; i-- {
			id := s.Faults[i].ID
			if err := l.heal(ctx, s, i); err != nil {
				errs = append(errs, err)
				continue
			}
			ids = append(ids, id)
		}
		return errors.Join(errs...)
	})
	return ids, err
}

// heal undoes s.Faults[i] and removes it.
func (l *Lab) heal(ctx context.Context, s *State, i int) error {
	f := s.Faults[i]
	for _, a := range healActions(s, f) {
		if err := l.do(ctx, s, a); err != nil {
			return fmt.Errorf("lab heal %d (%s): %w", f.ID, f.Spec(), err)
		}
	}
	s.Faults = slices.Delete(s.Faults, i, i+1)
	return nil
}

// do carries out one action of a fault or a heal.
func (l *Lab) do(ctx context.Context, s *State, a action) error {
	switch {
	case a.Cmd != nil:
		if _, err := l.run(ctx, *a.Cmd); err != nil && !(a.Missing && missing(err)) {
			return err
		}
	case a.Restart:
		p, _ := s.Proc(a.Proc)
		if procState(*p) != ProcDead {
			return nil
		}
		err := l.spawn(s, p)
		if serr := saveState(s); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		if p.Role == RoleMount {
			wctx, cancel := context.WithTimeout(ctx, restartMountWait)
			defer cancel()
			return l.waitMount(wctx, s, p.Host)
		}
	case a.Signal != 0:
		p, _ := s.Proc(a.Proc)
		if err := signal(*p, a.Signal); err != nil {
			return err
		}
		if a.Signal == syscall.SIGKILL && !waitGone([]Proc{*p}, killGrace) {
			return fmt.Errorf("%s (pid %d) still runs %s after SIGKILL", p.Key(), p.Pid, killGrace)
		}
	case a.Fill != "":
		return fill(a.Fill)
	case a.Empty != "":
		if err := os.Remove(a.Empty); err != nil && !(a.Missing && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("empty the small disk: %w", err)
		}
	}
	return nil
}

// fill writes a ballast file at path until its file system (a small
// disk's tmpfs) has no room left: one fallocate of the free space, or 1
// MiB writes until ENOSPC, bounded by the space the file system reported.
func fill(path string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		return fmt.Errorf("fill the small disk: %w", err)
	}
	free := int64(st.Bavail) * st.Bsize
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("fill the small disk: %w", err)
	}
	defer f.Close()
	if free > 0 && syscall.Fallocate(int(f.Fd()), 0, 0, free) == nil {
		return nil
	}
	buf := make([]byte, 1<<20)
	for i := int64(0); i <= free>>20+1; i++ {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return fmt.Errorf("fill the small disk: %w", err)
		}
	}
	return nil
}

// Plan is what spec would do to the lab now, without doing it: the fault
// as it would be recorded and the commands, signals and files of its
// injection and of its heal, one line each. It is how `cairn lab fault
// --dry-run` shows a fault.
func (l *Lab) Plan(spec Spec) (f Fault, inject, heal []string, err error) {
	s, err := loadState(l.dir)
	if err != nil {
		return Fault{}, nil, nil, err
	}
	if f, err = planFault(s, spec, s.NextFault, time.Now()); err != nil {
		return Fault{}, nil, nil, err
	}
	for _, a := range injectActions(s, f) {
		inject = append(inject, a.String())
	}
	for _, a := range healActions(s, f) {
		heal = append(heal, a.String())
	}
	return f, inject, heal, nil
}
