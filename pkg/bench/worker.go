package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// worker is one participant the master drives through a session: setup (the
// first round trip), run (the second: start, then the result), cleanup, close.
type worker interface {
	Name() string
	Node() string
	setup(ctx context.Context, s *Setup) (*Ready, error)
	run(ctx context.Context, timeout time.Duration) ([]ProcessResult, error)
	cleanup(ctx context.Context, timeout time.Duration, all bool) error
	close() error
	// live returns the progress of an in-process worker, nil otherwise.
	live() *workload.Progress
}

// inProcess runs the workload's threads inside this process: the master's
// own "threads" mode, and the body of every worker process.
type inProcess struct {
	name, node string
	index      int // run-wide worker index
	progress   *workload.Progress
	fs         fsys.FS
	runner     *workload.Runner
	spec       *workload.Spec
	dir        string
	facts      report.HostFacts
	allow      []string
	metrics    io.Closer // the reader of the meta nodes' metrics, when the target needs one of its own
}

func newInProcess(name, node string, index int, allow []string) *inProcess {
	return &inProcess{name: name, node: node, index: index, progress: &workload.Progress{}, allow: allow}
}

func (w *inProcess) Name() string             { return w.name }
func (w *inProcess) Node() string             { return w.node }
func (w *inProcess) live() *workload.Progress { return w.progress }

func (w *inProcess) setup(ctx context.Context, s *Setup) (*Ready, error) {
	start := time.Now()
	if err := checkAllowed(s.Target, w.allow); err != nil {
		return nil, err
	}
	f, err := fsys.Open(ctx, s.Target, fsys.Options{Confined: s.Spec.Confined()})
	if err != nil {
		return nil, err
	}
	w.fs, w.spec, w.dir = f, s.Spec, s.Dir
	w.facts = collectFacts(f)
	r, err := workload.NewRunner(f, s.Spec, workload.Placement{Worker: w.index, Workers: s.Workers, Dir: s.Dir}, w.progress)
	if err != nil {
		return nil, err
	}
	if _, own := f.(fsys.ServerSampler); s.MetaMetrics != "" && !own {
		mm, err := fsys.OpenMetaMetrics(ctx, s.MetaMetrics)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", s.Target, err)
		}
		w.metrics = mm
		r.SampleServersWith(mm)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Duration(s.SetupNs))
	defer cancel()
	if err := r.Setup(sctx); err != nil {
		if errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("setup did not finish within %s: %w", time.Duration(s.SetupNs), err)
		}
		return nil, err
	}
	w.runner = r
	settleHost()
	return &Ready{Facts: w.facts, SetupNs: int64(time.Since(start))}, nil
}

// settleHost writes every dirty page of this host back before a run starts.
// Targets are interleaved on one machine, and a file system that leaves its
// writes in the page cache past fsync (a peer with a local-directory bucket
// does) would otherwise have the kernel write them back during the next
// target's phases, which would pay for them in its figures. The sync is part
// of the setup's time, never of a phase's.
func settleHost() { syscall.Sync() }

func (w *inProcess) run(ctx context.Context, timeout time.Duration) ([]ProcessResult, error) {
	if w.runner == nil {
		return nil, errors.New("run before setup")
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := w.runner.Run(rctx)
	return []ProcessResult{{Name: w.name, Host: w.facts.Hostname, Threads: w.spec.Threads(), Result: res}}, nil
}

func (w *inProcess) cleanup(ctx context.Context, timeout time.Duration, all bool) error {
	if w.fs == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if w.runner != nil {
		if err := w.runner.Cleanup(cctx); err != nil {
			return fmt.Errorf("remove files of %s: %w", w.name, err)
		}
	}
	if all {
		if err := workload.CleanupShared(w.fs, w.spec, w.dir); err != nil {
			return fmt.Errorf("remove workspace %s: %w", w.dir, err)
		}
	}
	return nil
}

func (w *inProcess) close() error {
	var merr error
	if w.metrics != nil {
		if err := w.metrics.Close(); err != nil {
			merr = fmt.Errorf("close the meta metrics reader: %w", err)
		}
	}
	if w.fs == nil {
		return merr
	}
	return errors.Join(w.fs.Close(), merr)
}

// checkAllowed enforces a worker daemon's --allow list: posix targets must lie
// below one of the allowed directories. An empty list allows everything.
func checkAllowed(target string, allow []string) error {
	if len(allow) == 0 {
		return nil
	}
	if err := fsys.CheckTarget(target); err != nil {
		return err
	}
	p, ok := cutPrefix(target, "posix:")
	if !ok {
		return fmt.Errorf("target %s is not allowed on this worker (only posix targets below %v)", target, allow)
	}
	for _, a := range allow {
		if within(p, a) {
			return nil
		}
	}
	return fmt.Errorf("target %s is not below any directory this worker allows (%v)", target, allow)
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// remote is a worker at the other end of a protocol connection: a child
// process on this host or a worker daemon on another.
type remote struct {
	name, node string
	c          *conn
	cmd        *exec.Cmd     // for a child process, owned: killed and waited for by close
	stderr     *tailBuffer   // the child's last words, for error messages
	waited     chan struct{} // closed when cmd has been waited for
	waitErr    error
}

func (w *remote) Name() string             { return w.name }
func (w *remote) Node() string             { return w.node }
func (w *remote) live() *workload.Progress { return nil }

// explain adds what is known about a failure: a child's exit status and the
// end of its error output.
func (w *remote) explain(err error) error {
	if w.cmd == nil {
		return err
	}
	select {
	case <-w.waited:
		msg := fmt.Sprintf("%v (worker process exited: %v", err, w.waitErr)
		if tail := w.stderr.String(); tail != "" {
			msg += "; its last output: " + tail
		}
		return errors.New(msg + ")")
	case <-time.After(200 * time.Millisecond):
		return err
	}
}

func (w *remote) setup(ctx context.Context, s *Setup) (*Ready, error) {
	if err := w.c.send(&message{Type: msgSetup, Setup: s}); err != nil {
		return nil, w.explain(err)
	}
	// The worker bounds its own setup by s.SetupNs; allow it a little more to answer.
	m, err := w.c.expect(ctx, time.Duration(s.SetupNs)+10*time.Second, msgReady)
	if err != nil {
		return nil, w.explain(err)
	}
	if m.Ready == nil {
		return nil, errors.New("protocol: ready without facts")
	}
	return m.Ready, nil
}

func (w *remote) run(ctx context.Context, timeout time.Duration) ([]ProcessResult, error) {
	if err := w.c.send(&message{Type: msgStart}); err != nil {
		return nil, w.explain(err)
	}
	m, err := w.c.expect(ctx, timeout, msgResult)
	if err != nil {
		return nil, w.explain(err)
	}
	return m.Results, nil
}

func (w *remote) cleanup(ctx context.Context, timeout time.Duration, all bool) error {
	if err := w.c.send(&message{Type: msgCleanup, All: all}); err != nil {
		return w.explain(err)
	}
	_, err := w.c.expect(ctx, timeout, msgCleaned)
	return w.explain(err)
}

func (w *remote) close() error {
	_ = w.c.send(&message{Type: msgClose}) // best effort: the peer may be gone
	err := w.c.Close()
	if w.cmd != nil {
		select {
		case <-w.waited:
		case <-time.After(5 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.waited
		}
	}
	return err
}

// dialWorker connects to a worker daemon.
func dialWorker(ctx context.Context, dial func(context.Context, string) (net.Conn, error), addr string, timeout time.Duration) (*remote, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := dial(dctx, addr)
	if err != nil {
		return nil, fmt.Errorf("connect to worker %s: %w", addr, err)
	}
	return &remote{name: addr, node: addr, c: newConn(nc, nc, nc)}, nil
}

// spawnWorker starts a worker process speaking the protocol on its standard
// input and output. The child dies with this process (PR_SET_PDEATHSIG) and
// also exits when its input closes.
func spawnWorker(command, env []string, name string) (*remote, error) {
	if len(command) == 0 {
		return nil, errors.New("no worker command to start processes with")
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	tail := &tailBuffer{max: 2048}
	cmd.Stderr = tail
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s (%s): %w", name, command[0], err)
	}
	w := &remote{name: name, node: "local", cmd: cmd, stderr: tail, waited: make(chan struct{})}
	w.c = newConn(stdout, stdin, closers{stdin, stdout})
	go func() {
		w.waitErr = cmd.Wait()
		close(w.waited)
	}()
	return w, nil
}

type closers []interface{ Close() error }

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		if err := c.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// group presents several workers as one: a worker daemon with processes > 1
// drives its child processes through it. A member that fails is reported as a
// failed process; the others' results are kept.
type group struct {
	name, node string
	members    []worker
	failed     map[string]string // member name -> why it dropped out
}

func (g *group) Name() string             { return g.name }
func (g *group) Node() string             { return g.node }
func (g *group) live() *workload.Progress { return nil }

func (g *group) each(f func(i int, w worker) error) []error {
	errs := make([]error, len(g.members))
	var wg sync.WaitGroup
	for i, w := range g.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, w)
		}()
	}
	wg.Wait()
	return errs
}

func (g *group) setup(ctx context.Context, s *Setup) (*Ready, error) {
	readies := make([]*Ready, len(g.members))
	errs := g.each(func(i int, w worker) error {
		cs := *s
		cs.Name, cs.FirstWorker, cs.Processes = w.Name(), s.FirstWorker+i, 1
		r, err := w.setup(ctx, &cs)
		readies[i] = r
		return err
	})
	var ok []worker
	var first *Ready
	for i, err := range errs {
		if err != nil {
			g.failed[g.members[i].Name()] = "setup: " + err.Error()
			g.members[i].close()
			continue
		}
		ok = append(ok, g.members[i])
		if first == nil {
			first = readies[i]
		}
	}
	g.members = ok
	if first == nil {
		return nil, fmt.Errorf("no process of %s became ready: %v", g.name, errors.Join(errs...))
	}
	return first, nil
}

func (g *group) run(ctx context.Context, timeout time.Duration) ([]ProcessResult, error) {
	results := make([][]ProcessResult, len(g.members))
	errs := g.each(func(i int, w worker) error {
		var err error
		results[i], err = w.run(ctx, timeout)
		return err
	})
	var out []ProcessResult
	for i, err := range errs {
		if err != nil {
			out = append(out, ProcessResult{Name: g.members[i].Name(), Error: "run: " + err.Error()})
			continue
		}
		out = append(out, results[i]...)
	}
	for _, name := range sortedNames(g.failed) {
		out = append(out, ProcessResult{Name: name, Error: g.failed[name]})
	}
	return out, nil
}

func (g *group) cleanup(ctx context.Context, timeout time.Duration, all bool) error {
	errs := g.each(func(i int, w worker) error { return w.cleanup(ctx, timeout, false) })
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if all && len(g.members) > 0 {
		return g.members[0].cleanup(ctx, timeout, true)
	}
	return nil
}

func (g *group) close() error {
	return errors.Join(g.each(func(_ int, w worker) error { return w.close() })...)
}

// newLocalProcesses spawns n worker processes named prefix/p0...
func newLocalProcesses(command, env []string, prefix, node string, n int) ([]worker, error) {
	var out []worker
	for i := 0; i < n; i++ {
		w, err := spawnWorker(command, env, prefix+"/p"+strconv.Itoa(i))
		if err != nil {
			for _, o := range out {
				o.close()
			}
			return nil, err
		}
		w.node = node
		out = append(out, w)
	}
	return out, nil
}
