package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// Options configure a master run.
type Options struct {
	Targets     []string
	Workloads   []*workload.Spec
	Repetitions int
	Sweep       *workload.Sweep
	// Local runs workers on this host: the master's own threads when a
	// workload has processes = 1, else that many child processes.
	Local bool
	// Remote lists worker daemons (HOST:PORT), one node each.
	Remote []string
	// WorkerCommand starts a local worker process ("cairn bench worker --stdio").
	WorkerCommand []string
	WorkerEnv     []string
	// SetupTimeout bounds each worker's setup; WorkerTimeout bounds the
	// wait for a worker's result after the start (0: the workload's phases
	// times its duration bound, plus a margin); CleanupTimeout bounds file
	// removal; ConnectTimeout bounds connecting to a remote worker.
	SetupTimeout, WorkerTimeout, CleanupTimeout, ConnectTimeout time.Duration
	// MetaMetrics maps a target (as in Targets) to the Cairn volume,
	// "MASTER[,MASTER...]/VOLUME", whose meta nodes' metrics its workers read
	// around every phase: for posix: targets on a Cairn mount (cairn: and
	// cairn-cached: targets read their own volume's without it).
	MetaMetrics map[string]string
	// Dial connects to remote workers (default: TCP).
	Dial     func(ctx context.Context, addr string) (net.Conn, error)
	Observer Observer
	Command  []string
	RunID    string
	Log      io.Writer
}

// Observer follows a master run, for live progress displays.
type Observer interface {
	// Note reports a step of the run (setting up, cleaning up).
	Note(msg string)
	// Begin is called when every ready worker has been started.
	Begin(run RunInfo)
	// End is called when the run's results are in.
	End(run RunInfo, failures []report.Failure)
}

// RunInfo describes one run of a workload on a target.
type RunInfo struct {
	Workload    string
	Target      string
	Repetition  int
	Repetitions int
	Index       int // this run's number among all runs of the invocation, from 1
	Total       int
	Workers     []WorkerInfo
	Bound       time.Duration // how long the master waits for results
	Phases      []string
}

// WorkerInfo describes one worker of a run.
type WorkerInfo struct {
	Name    string
	Node    string
	Threads int
	// Live is the progress of an in-process worker; nil for processes and
	// remote workers, which send nothing until their result.
	Live *workload.Progress
}

func (o *Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
}

func (o *Options) defaults() error {
	if len(o.Targets) == 0 {
		return errors.New("no target: give at least one --target")
	}
	if len(o.Workloads) == 0 {
		return errors.New("no workload to run")
	}
	if !o.Local && len(o.Remote) == 0 {
		return errors.New("no workers: run locally or give --worker addresses")
	}
	for _, t := range o.Targets {
		if err := fsys.CheckTarget(t); err != nil {
			return err
		}
	}
	for t, mm := range o.MetaMetrics {
		if !slices.Contains(o.Targets, t) {
			return fmt.Errorf("meta metrics for %s: not one of the targets", t)
		}
		if err := fsys.CheckMetaMetrics(mm); err != nil {
			return fmt.Errorf("meta metrics for %s: %w", t, err)
		}
	}
	if o.Repetitions < 1 {
		o.Repetitions = 1
	}
	if o.SetupTimeout <= 0 {
		o.SetupTimeout = 10 * time.Minute
	}
	if o.CleanupTimeout <= 0 {
		o.CleanupTimeout = 10 * time.Minute
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if o.RunID == "" {
		var b [3]byte
		rand.Read(b[:])
		o.RunID = "cairn-bench-" + time.Now().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
	}
	return nil
}

// variant is one workload of the run after expanding the sweep.
type variant struct {
	spec   *workload.Spec
	name   string
	series string
}

func expand(o *Options) ([]variant, error) {
	var out []variant
	for _, s := range o.Workloads {
		if o.Sweep == nil {
			out = append(out, variant{spec: s, name: s.Name(), series: s.Name()})
			continue
		}
		for _, v := range o.Sweep.Values {
			vs, err := s.With(o.Sweep.Key, strconv.FormatInt(v, 10))
			if err != nil {
				return nil, fmt.Errorf("sweep %s=%d: %w", o.Sweep.Key, v, err)
			}
			out = append(out, variant{spec: vs, name: fmt.Sprintf("%s@%s=%d", s.Name(), o.Sweep.Key, v), series: s.Name()})
		}
	}
	return out, nil
}

// Run runs every workload on every target, repetition by repetition with
// the targets interleaved, and returns the report. When ctx ends it stops
// and returns the report of what was measured so far with ctx's error.
func Run(ctx context.Context, o Options) (*report.Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	variants, err := expand(&o)
	if err != nil {
		return nil, err
	}
	rep := &report.Report{
		Schema: report.Schema, Tool: "cairn bench", RunID: o.RunID, Command: o.Command, StartedAt: time.Now().UTC(),
		Master: collectFacts(nil), Failures: []report.Failure{},
		Config: report.Config{Targets: o.Targets, RemoteWorkers: o.Remote, LocalWorkers: o.Local, Repetitions: o.Repetitions,
			Sweep: o.Sweep, SetupTimeoutS: o.SetupTimeout.Seconds(), WorkerTimeoutS: o.WorkerTimeout.Seconds()},
	}
	total := len(variants) * o.Repetitions * len(o.Targets)
	index := 0
	var runErr error
outer:
	for _, v := range variants {
		wr := report.WorkloadReport{Name: v.name, Kind: v.spec.Kind, Series: v.series, Spec: v.spec}
		for _, t := range o.Targets {
			wr.Targets = append(wr.Targets, report.TargetReport{Target: t})
		}
		for r := 1; r <= o.Repetitions; r++ {
			for ti, t := range o.Targets {
				if ctx.Err() != nil {
					runErr = context.Cause(ctx)
					rep.Workloads = append(rep.Workloads, finish(wr))
					break outer
				}
				index++
				info := RunInfo{Workload: v.name, Target: t, Repetition: r, Repetitions: o.Repetitions, Index: index, Total: total}
				one, conc, fails := runOnce(ctx, &o, v, t, r, info)
				wr.Targets[ti].Repetitions = append(wr.Targets[ti].Repetitions, one)
				if conc.Threads > 0 {
					wr.Concurrency = conc
				}
				rep.Failures = append(rep.Failures, fails...)
			}
		}
		rep.Workloads = append(rep.Workloads, finish(wr))
	}
	rep.FinishedAt = time.Now().UTC()
	return rep, runErr
}

func finish(wr report.WorkloadReport) report.WorkloadReport {
	for i := range wr.Targets {
		wr.Targets[i].Phases = report.Summarize(wr.Targets[i].Repetitions)
	}
	report.SetRatios(&wr)
	return wr
}

// runBound is how long the master waits for a worker's result: every phase
// at its time bound, plus a margin for the work after a bound is noticed.
func runBound(o *Options, s *workload.Spec) time.Duration {
	if o.WorkerTimeout > 0 {
		return o.WorkerTimeout
	}
	w, err := s.New()
	phases := 1
	if err == nil {
		phases = len(w.Phases())
	}
	d := s.Duration("duration")
	return time.Duration(phases)*d + time.Duration(phases)*d/10 + time.Minute
}

type member struct {
	w         worker
	first     int // run-wide index of its first process
	processes int
	ready     *Ready
	results   []ProcessResult
	err       error
	stage     string
}

// runOnce is one repetition of one workload on one target: connect and start
// the workers, set them up, start them together, collect, clean up.
func runOnce(ctx context.Context, o *Options, v variant, target string, repIdx int, info RunInfo) (report.Repetition, report.Concurrency, []report.Failure) {
	spec := v.spec
	started := time.Now()
	rep := report.Repetition{Index: repIdx, StartedAt: started.UTC()}
	var fails []report.Failure
	fail := func(worker, stage string, err error) {
		f := report.Failure{Workload: v.name, Target: target, Repetition: repIdx, Worker: worker, Stage: stage, Error: err.Error()}
		fails = append(fails, f)
		o.logf("%s on %s, repetition %d: worker %s failed at %s: %v", v.name, target, repIdx, worker, stage, err)
	}
	procs := spec.Processes()

	// Connect: the local node and every remote node.
	var members []*member
	if o.Local {
		if procs == 1 {
			members = append(members, &member{w: newInProcess("local", "local", 0, nil), processes: 1})
		} else {
			ws, err := newLocalProcesses(o.WorkerCommand, o.WorkerEnv, "local", "local", procs)
			if err != nil {
				fail("local", "connect", err)
			}
			for _, w := range ws {
				members = append(members, &member{w: w, processes: 1})
			}
		}
	}
	for _, addr := range o.Remote {
		w, err := dialWorker(ctx, o.Dial, addr, o.ConnectTimeout)
		if err != nil {
			fail(addr, "connect", err)
			continue
		}
		members = append(members, &member{w: w, processes: procs})
	}
	defer func() {
		for _, m := range members {
			if err := m.w.close(); err != nil {
				o.logf("close worker %s: %v", m.w.Name(), err)
			}
		}
	}()
	workers := 0
	for _, m := range members {
		m.first = workers
		workers += m.processes
	}
	dir := o.RunID + "/" + safeName(v.name) + "/r" + strconv.Itoa(repIdx)
	bound := runBound(o, spec)

	// Round trip 1: setup, everywhere at once.
	if o.Observer != nil {
		o.Observer.Note(fmt.Sprintf("[%d/%d] %s on %s (repetition %d/%d): setting up %d worker(s)", info.Index, info.Total, v.name, target, repIdx, info.Repetitions, len(members)))
	}
	stopNotes := setupNotes(o, members, fmt.Sprintf("[%d/%d] %s on %s", info.Index, info.Total, v.name, target))
	parallel(members, func(m *member) {
		s := &Setup{Version: ProtocolVersion, RunID: o.RunID, Name: m.w.Name(), Target: target, Spec: spec, Dir: dir,
			FirstWorker: m.first, Workers: workers, Processes: m.processes, SetupNs: int64(o.SetupTimeout), RunNs: int64(bound),
			MetaMetrics: o.MetaMetrics[target]}
		m.ready, m.err = m.w.setup(ctx, s)
		m.stage = "setup"
	})
	stopNotes()
	var ready []*member
	for _, m := range members {
		if m.err != nil {
			fail(m.w.Name(), m.stage, m.err)
			continue
		}
		ready = append(ready, m)
	}
	if len(ready) == 0 {
		rep.Error = "no worker became ready"
		rep.DurationS = time.Since(started).Seconds()
		return rep, report.Concurrency{}, fails
	}

	// Round trip 2: start together, wait for every result (or its bound).
	info.Bound = bound
	if w, err := spec.New(); err == nil {
		info.Phases = w.Phases()
	}
	for _, m := range ready {
		info.Workers = append(info.Workers, WorkerInfo{Name: m.w.Name(), Node: m.w.Node(), Threads: spec.Threads() * m.processes, Live: m.w.live()})
	}
	if o.Observer != nil {
		o.Observer.Begin(info)
	}
	parallel(ready, func(m *member) {
		m.results, m.err = m.w.run(ctx, bound)
		m.stage = "run"
		if m.err != nil && errors.Is(ctx.Err(), context.Canceled) {
			m.err = fmt.Errorf("interrupted: %w", m.err)
		}
	})

	conc := report.Concurrency{}
	nodes := map[string]bool{}
	phaseParts := map[string][]workload.PhaseResult{}
	var phaseOrder []string
	for _, m := range ready {
		if m.err != nil {
			fail(m.w.Name(), m.stage, m.err)
			rep.Workers = append(rep.Workers, report.WorkerStatus{Name: m.w.Name(), Node: m.w.Node(), Status: "failed", Error: m.err.Error(),
				Threads: spec.Threads() * m.processes})
			continue
		}
		for _, pr := range m.results {
			st := report.WorkerStatus{Name: pr.Name, Node: m.w.Node(), Host: pr.Host, Threads: pr.Threads, Status: "ok"}
			facts := m.ready.Facts
			st.Facts = &facts
			switch {
			case pr.Error != "" || pr.Result == nil:
				st.Status, st.Error = "failed", pr.Error
				if st.Error == "" {
					st.Error = "no result"
				}
				fail(pr.Name, "run", errors.New(st.Error))
			case pr.Result.Error != "":
				st.Status, st.Error = "partial", pr.Result.Error
				fail(pr.Name, "run", errors.New(pr.Result.Error))
			}
			rep.Workers = append(rep.Workers, st)
			if pr.Result == nil {
				continue
			}
			conc.Processes++
			conc.Threads += pr.Threads
			nodes[m.w.Node()] = true
			for _, p := range pr.Result.Phases {
				if _, seen := phaseParts[p.Name]; !seen {
					phaseOrder = append(phaseOrder, p.Name)
				}
				phaseParts[p.Name] = append(phaseParts[p.Name], p)
			}
		}
	}
	conc.Nodes = len(nodes)
	for _, name := range phaseOrder {
		rep.Phases = append(rep.Phases, workload.MergePhases(phaseParts[name]))
	}
	if conc.Processes == 0 {
		rep.Error = "every worker failed"
	}
	if o.Observer != nil {
		o.Observer.End(info, fails)
	}

	// Cleanup: every worker its own files, then one of them the workspace.
	if !spec.Bool("keep") {
		if o.Observer != nil {
			o.Observer.Note(fmt.Sprintf("[%d/%d] %s on %s: removing the workspace", info.Index, info.Total, v.name, target))
		}
		cctx := context.WithoutCancel(ctx) // an interrupted run still cleans up, within its bound
		var alive []*member
		for _, m := range ready {
			if m.err == nil {
				alive = append(alive, m)
			}
		}
		parallel(alive, func(m *member) {
			if err := m.w.cleanup(cctx, o.CleanupTimeout, false); err != nil {
				fail(m.w.Name(), "cleanup", err)
			}
		})
		if len(alive) > 0 {
			if err := alive[0].w.cleanup(cctx, o.CleanupTimeout, true); err != nil {
				fail(alive[0].w.Name(), "cleanup", err)
			}
		}
	}
	rep.DurationS = time.Since(started).Seconds()
	return rep, conc, fails
}

// setupNoteEvery is the period of the notes on a long setup.
const setupNoteEvery = 30 * time.Second

// setupNotes reports, every setupNoteEvery while the workers set up, the
// entries the in-process workers have prepared so far (workloads that
// build large data sets count them; worker processes and remote workers
// send nothing until they are ready). The returned function stops it.
func setupNotes(o *Options, members []*member, what string) (stop func()) {
	if o.Observer == nil {
		return func() {}
	}
	var lives []*workload.Progress
	for _, m := range members {
		if l := m.w.live(); l != nil {
			lives = append(lives, l)
		}
	}
	if len(lives) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(setupNoteEvery)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var ops int64
			for _, l := range lives {
				if s := l.Snapshot(); s.Phase == "setup" {
					ops += s.Ops
				}
			}
			if ops > 0 {
				el := time.Since(start)
				o.Observer.Note(fmt.Sprintf("%s: setting up, %d entries ready after %s (%.0f/s)", what, ops, el.Round(time.Second), float64(ops)/el.Seconds()))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func parallel(ms []*member, f func(*member)) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(m)
		}()
	}
	wg.Wait()
}

// safeName keeps a workload name usable as a directory name.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == '=', r == '@':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || out == "." || out == ".." {
		out = "w"
	}
	return out
}
