package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Distributed benchmarks (DFS-Perf's master and workers) on a lab's client
// hosts: a `cairn bench worker` daemon in each chosen client host, the
// `cairn bench run` master in the first of them, so that every worker's
// file system calls leave its own host and cross the lab's network to the
// servers, as on separate machines.
//
// `cairn bench` wants every node to see a target at one path. Each worker
// daemon runs in a mount namespace of its own in which its host's mount
// (DIR/hosts/cN/mnt) is bound at BenchMount(DIR), the same path on every
// host, as a volume mounted at one path on every machine would be.

// PortBenchWorker is the port a lab's bench worker daemons listen on, at
// their host's address.
const PortBenchWorker = 17400

// BenchMount is the path at which every bench worker of the lab in dir
// sees its own host's mount of the volume (posix:BenchMount(dir) is the
// target of a distributed run through the mounts).
func BenchMount(dir string) string { return filepath.Join(dir, "mnt") }

// BenchConfig is a distributed benchmark run on a lab.
type BenchConfig struct {
	// Clients are the client hosts that run a worker (nil: every client
	// host); the master runs in the first.
	Clients []string
	// Args are `cairn bench run`'s arguments (workloads, --set, --out);
	// without --target, the run's target is posix:BenchMount(dir).
	Args []string
	// Stdout and Stderr get the master's output (nil: discarded).
	Stdout, Stderr io.Writer
	// WorkerWait bounds the wait for the worker daemons to listen (10 s
	// when 0).
	WorkerWait time.Duration
}

// benchWorker is the plan of one worker daemon.
type benchWorker struct {
	host   Host
	listen string   // ADDR:PORT
	argv   []string // run in the host's namespace, in a mount namespace of its own
	log    string
}

// planBench returns the worker daemons and the master's command line of
// cfg on the lab s (pure: tested without root).
func planBench(s *State, cfg BenchConfig) ([]benchWorker, []string, error) {
	names := cfg.Clients
	if len(names) == 0 {
		for _, h := range s.Hosts {
			if h.Client {
				names = append(names, h.Name)
			}
		}
	}
	if len(names) == 0 {
		return nil, nil, errors.New("lab bench: the lab has no client host (lab up --clients N)")
	}
	mnt := BenchMount(s.Dir)
	var workers []benchWorker
	for i, n := range names {
		h, ok := s.Host(n)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("lab bench: no host %q (hosts: %s)", n, strings.Join(hostNames(s.Hosts, nil), ", "))
		case !h.Client:
			return nil, nil, fmt.Errorf("lab bench: %s is a server host; workers run on client hosts", n)
		case slices.Contains(names[:i], n):
			return nil, nil, fmt.Errorf("lab bench: host %s given twice", n)
		}
		listen := hostPort(h.Addr, PortBenchWorker)
		// The mount is bound at the common path inside the daemon's own
		// mount namespace only: nothing changes for this machine.
		script := `mount --bind "$1" "$2" && exec "$3" bench worker --listen "$4" --once --allow "$2"`
		workers = append(workers, benchWorker{
			host:   *h,
			listen: listen,
			argv:   []string{"/bin/sh", "-c", script, "sh", mountDir(s.Dir, n), mnt, s.Binary, listen},
			log:    filepath.Join(hostDir(s.Dir, n), "bench-worker.log"),
		})
	}
	master := []string{s.Binary, "bench", "run", "--local=false"}
	for _, w := range workers {
		master = append(master, "--worker", w.listen)
	}
	if !slices.ContainsFunc(cfg.Args, func(a string) bool { return a == "--target" || strings.HasPrefix(a, "--target=") }) {
		master = append(master, "--target", "posix:"+mnt)
	}
	return workers, append(master, cfg.Args...), nil
}

// Bench runs cfg's benchmark on the lab: a worker daemon on each client
// host it names, the master in the first, and returns the master's exit
// code once it ended and every daemon is gone. Its report is written where
// `cairn bench run` writes it (--out, relative to this process's working
// directory).
func (l *Lab) Bench(ctx context.Context, cfg BenchConfig) (int, error) {
	s, err := loadState(l.dir)
	if err != nil {
		return -1, err
	}
	workers, master, err := planBench(s, cfg)
	if err != nil {
		return -1, err
	}
	if err := os.MkdirAll(BenchMount(s.Dir), 0o755); err != nil {
		return -1, fmt.Errorf("lab bench: %w", err)
	}
	env, err := l.Env()
	if err != nil {
		return -1, err
	}
	var daemons []*exec.Cmd
	defer func() {
		for _, c := range daemons {
			// --once: a daemon that served the run has exited; one that
			// never got a master is stopped here.
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for _, w := range workers {
		c, err := l.startBenchWorker(w, env)
		if err != nil {
			return -1, err
		}
		daemons = append(daemons, c)
	}
	wait := cfg.WorkerWait
	if wait == 0 {
		wait = 10 * time.Second
	}
	for i, w := range workers {
		if err := waitListening(ctx, daemons[i].Process.Pid, w.listen, wait); err != nil {
			return -1, fmt.Errorf("lab bench: worker on %s: %w (its log: %s)", w.host.Name, err, w.log)
		}
	}
	out, errOut := cfg.Stdout, cfg.Stderr
	if out == nil {
		out = io.Discard
	}
	if errOut == nil {
		errOut = io.Discard
	}
	return l.Exec(ctx, workers[0].host.Name, master, nil, out, errOut)
}

// startBenchWorker starts w's daemon in its host's network namespace and
// a mount namespace of its own (Go makes its mounts private before the
// exec), its output appended to w.log.
func (l *Lab) startBenchWorker(w benchWorker, env []string) (*exec.Cmd, error) {
	f, err := os.OpenFile(w.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab bench: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s cairn lab: starting a bench worker in %s: %s\n", time.Now().UTC().Format(time.RFC3339), w.host.Netns, strings.Join(w.argv, " "))
	c := exec.Command(w.argv[0], w.argv[1:]...)
	c.Stdout, c.Stderr = f, f
	c.Env = append(cleanEnv(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if err := startIn(w.host.Netns, c); err != nil {
		return nil, fmt.Errorf("lab bench: start the worker on %s: %w", w.host.Name, err)
	}
	return c, nil
}

// procTCPAddr is addr (IPv4 ADDR:PORT) as /proc/net/tcp writes a local
// address: the address's bytes in host order (little-endian here), in hex,
// and the port in hex.
func procTCPAddr(addr string) (string, error) {
	host, port, ok := strings.Cut(addr, ":")
	p, err := strconv.Atoi(port)
	if !ok || err != nil {
		return "", fmt.Errorf("bad address %q", addr)
	}
	parts := strings.Split(host, ".")
	if len(parts) != 4 {
		return "", fmt.Errorf("bad IPv4 address %q", host)
	}
	var b strings.Builder
	for i := 3; i >= 0; i-- {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 || n > 255 {
			return "", fmt.Errorf("bad IPv4 address %q", host)
		}
		fmt.Fprintf(&b, "%02X", n)
	}
	return fmt.Sprintf("%s:%04X", b.String(), p), nil
}
