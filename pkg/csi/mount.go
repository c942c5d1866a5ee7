package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/mountinfo"
)

// Mounter mounts Cairn volumes at target paths on this node.
type Mounter interface {
	// Mount mounts id (a subdir volume: its directory) at the existing
	// directory target and returns once it is mounted.
	Mount(ctx context.Context, id VolumeID, target string, readOnly bool) error
	// Unmount unmounts target and returns once it is no longer mounted.
	Unmount(ctx context.Context, target string) error
}

// ProcessMounter mounts by starting `cairn mount` for each target, as
// a user would: the mount is its own process in its own session, which
// outlives the driver's process, and unmounting the target ends it.
type ProcessMounter struct {
	// Binary is the cairn executable; Args are the flags that reach the
	// cluster, put before the volume (--master, --tls-dir or --data-dir).
	Binary string
	Args   []string
	// LogDir receives one log file per mount (default: the temp dir).
	LogDir string

	mu    sync.Mutex
	procs map[string]*exec.Cmd // by target, the mounts this driver started
}

// mountTimeout bounds how long a mount may take to appear.
const mountTimeout = 60 * time.Second

// Mount implements Mounter.
func (m *ProcessMounter) Mount(ctx context.Context, id VolumeID, target string, readOnly bool) error {
	opts := []string{"allow_other"}
	if id.Kind == KindSubdir {
		opts = append(opts, "subdir="+id.Path)
	}
	if readOnly {
		opts = append(opts, "ro")
	}
	args := append(append([]string{"mount"}, m.Args...), "-o", strings.Join(opts, ","), id.Volume, target)
	dir := m.LogDir
	if dir == "" {
		dir = os.TempDir()
	}
	logPath := filepath.Join(dir, "cairn-csi-mount"+strings.ReplaceAll(target, "/", "-")+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("mount log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(m.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the driver's process group does not
	// take the applications' mounts down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.Binary, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(mountTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, err := mountinfo.Mounted(target); err != nil || ok {
			if err != nil {
				_ = cmd.Process.Kill()
				return err
			}
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("cairn mount exited (%v); its log: %s", err, tail(logPath))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return ctx.Err()
		case <-deadline.C:
			_ = cmd.Process.Kill()
			return fmt.Errorf("not mounted after %s; the mount's log: %s", mountTimeout, tail(logPath))
		case <-tick.C:
		}
	}
	m.mu.Lock()
	if m.procs == nil {
		m.procs = map[string]*exec.Cmd{}
	}
	m.procs[target] = cmd
	m.mu.Unlock()
	go func() {
		<-exited
		m.mu.Lock()
		if m.procs[target] == cmd {
			delete(m.procs, target)
		}
		m.mu.Unlock()
	}()
	return nil
}

// Unmount implements Mounter: it unmounts target (lazily if it is busy),
// which ends its mount process.
func (m *ProcessMounter) Unmount(ctx context.Context, target string) error {
	err := syscall.Unmount(target, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(target, syscall.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: not mounted
		return err
	}
	m.mu.Lock()
	cmd := m.procs[target]
	m.mu.Unlock()
	if cmd == nil {
		return nil
	}
	// The mount process ends once the kernel lets go of the mount.
	for i := 0; i < 100; i++ {
		m.mu.Lock()
		_, running := m.procs[target]
		m.mu.Unlock()
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return cmd.Process.Signal(syscall.SIGTERM)
}

// tail returns the last lines of a log file, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return path
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	return fmt.Sprintf("%s: %s", path, s)
}
