package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// This file is the lab's only contact with the kernel beyond files: it
// runs ip, nft and tc, starts processes inside namespaces and reads
// /proc. Everything it is asked to do is decided elsewhere, as data.

// commandTimeout bounds every ip, nft and tc the lab runs.
const commandTimeout = 30 * time.Second

// startIn starts cmd inside the network namespace named netns ("" for
// the caller's own). Only the network namespace changes: the child keeps
// the caller's mounts, so a FUSE mount it makes is visible to everyone
// (ip netns exec would give it a mount namespace of its own). A thread
// locked to a goroutine enters the namespace, forks the child (which
// inherits it) and returns to its own namespace before it is unlocked;
// if it cannot return, it stays locked and Go discards it with the
// goroutine, so no other goroutine ever runs in the lab's namespace. The
// caller's own process (its main thread, which /proc/PID/ns/net shows)
// is in the namespace at most while the child is forked.
func startIn(netns string, cmd *exec.Cmd) error {
	if netns == "" {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		f, err := os.Open(netnsPath(netns))
		if err != nil {
			errc <- fmt.Errorf("network namespace %s: %w", netns, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", netns, err)
			return
		}
		err = cmd.Start()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// run runs c to completion (at most c.Timeout, commandTimeout by default)
// and returns its output; the error names the command and carries its
// output.
func run(ctx context.Context, c command) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if c.StdoutOnly {
		cmd.Stderr = &errOut
	}
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	if err := startIn(c.Netns, cmd); err != nil {
		return "", fmt.Errorf("%s: %w", c, err)
	}
	if err := cmd.Wait(); err != nil {
		said := out.String()
		if c.StdoutOnly {
			said = errOut.String()
		}
		return out.String(), fmt.Errorf("%s: %w: %s", c, err, strings.TrimSpace(said))
	}
	return out.String(), nil
}

// missing reports whether a command's error says that what it was to
// remove does not exist.
func missing(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, m := range []string{"No such file or directory", "Cannot find device", "does not exist", "Cannot delete qdisc with handle of zero"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// requireTools checks that the programs the lab runs are installed.
func requireTools() error {
	for _, t := range []struct{ prog, pkg string }{{"ip", "iproute2"}, {"tc", "iproute2"}, {"nft", "nftables"}} {
		if _, err := exec.LookPath(t.prog); err != nil {
			return fmt.Errorf("lab: %s not found: install it (apt-get install %s)", t.prog, t.pkg)
		}
	}
	return nil
}

// procStat reads a process's state letter and start time (clock ticks
// after boot) from /proc/PID/stat.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err
}

// Process states as Status reports them.
const (
	ProcRunning = "running"
	ProcPaused  = "paused"
	ProcDead    = "dead"
)

// procState says whether p's recorded instance runs, is stopped, or is
// gone (exited, a zombie, or its pid now another process's).
func procState(p Proc) string {
	if p.Pid <= 0 {
		return ProcDead
	}
	st, start, err := procStat(p.Pid)
	if err != nil || start != p.Start || st == 'Z' || st == 'X' {
		return ProcDead
	}
	if st == 'T' || st == 't' {
		return ProcPaused
	}
	return ProcRunning
}

// signal sends sig to p's recorded instance, if it is still that one.
func signal(p Proc, sig syscall.Signal) error {
	if procState(p) == ProcDead {
		return nil
	}
	if err := syscall.Kill(p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s %s (pid %d): %w", sig, p.Key(), p.Pid, err)
	}
	return nil
}

// waitGone waits until none of procs runs, at most d; it reports whether
// they all ended.
func waitGone(procs []Proc, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		alive := false
		for _, p := range procs {
			alive = alive || procState(p) != ProcDead
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// netnsPids lists the processes inside the namespace named netns (none
// when it does not exist), as ip netns pids does: every /proc/PID whose
// network namespace is the same inode. The caller is never listed: its
// main thread is in a lab namespace while it forks a child there.
func netnsPids(netns string) []int {
	var want syscall.Stat_t
	if err := syscall.Stat(netnsPath(netns), &want); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			out = append(out, pid)
		}
	}
	return out
}

// linkExists reports whether the root namespace has an interface name.
func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// netnsExists reports whether ip netns knows name.
func netnsExists(name string) bool {
	_, err := os.Stat(netnsPath(name))
	return err == nil
}

// hostPrefixes are the IPv4 prefixes the host routes or has addresses in
// (every table, `ip -j route show table all`), without default routes.
func hostPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	out, err := run(ctx, command{Argv: []string{"ip", "-j", "-4", "route", "show", "table", "all"}})
	if err != nil {
		return nil, err
	}
	return parseRoutes([]byte(out))
}

// cleanEnv is the environment of the lab's processes: the caller's
// without its CAIRN_* settings, which are meant for the caller.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CAIRN_") {
			env = append(env, e)
		}
	}
	return env
}

// mountAnswers reports whether the file system at path answers statfs
// within d. A hung FUSE mount blocks the call, so it runs in a goroutine
// that outlives the wait only as long as the mount's own op_timeout.
func mountAnswers(path string, d time.Duration) error {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(path, &st)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("statfs %s did not answer within %s", path, d)
	}
}

// tail returns the last n lines of a file, indented, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// waitListening waits until process pid (or a child it became) listens on
// addr (IPv4 ADDR:PORT) in its network namespace, as its /proc/PID/net/tcp
// shows, or fails when the process ends or wait passes.
func waitListening(ctx context.Context, pid int, addr string, wait time.Duration) error {
	want, err := procTCPAddr(addr)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		if listening(pid, want) {
			return nil
		}
		if st, _, err := procStat(pid); err != nil || st == 'Z' || st == 'X' {
			return errors.New("it exited before it listened")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %v", addr, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listening reports whether /proc/PID/net/tcp has a socket in LISTEN (0A)
// state at local address want.
func listening(pid int, want string) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 3 && fs[1] == want && fs[3] == "0A" {
			return true
		}
	}
	return false
}
