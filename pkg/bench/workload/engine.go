// Package workload holds the built-in workloads of cairn bench (DFS-Perf §5.2
// plus the CFS, FalconFS and VarFS evaluations), their configuration keys, and
// the engine that runs one worker process's share of a workload: set up every
// thread, wait for the start signal, run the phases with all threads in step,
// and return per-phase statistics. The engine knows nothing of masters,
// sockets or reports; the bench package drives it.
//
// Every loop of every workload is bounded twice: by a count from the
// configuration and by the phase's time bound (key "duration").
package workload

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/hostcpu"
	"github.com/cairnfs/cairn/pkg/bench/servermetrics"
	"github.com/cairnfs/cairn/pkg/bench/stats"
)

// Workload is the execution logic of one kind (DFS-Perf's PerfThread). Setup
// runs before the start signal and is not measured; Run runs one phase for one
// thread and measures its operations through t.Op. Both are called from as
// many goroutines as there are threads, each with its own Thread.
type Workload interface {
	Phases() []string
	Setup(ctx context.Context, t *Thread) error
	Run(ctx context.Context, t *Thread, phase int) error
}

// Expecter is implemented by workloads that know how many operations each
// thread performs in a phase, so progress bars can show a fraction.
type Expecter interface {
	Expect(phase int) int64
}

// Placement says where this worker process sits in a run.
type Placement struct {
	Worker  int    // index of this process among the run's worker processes
	Workers int    // number of worker processes in the run
	Dir     string // the repetition's workspace, relative to the FS root, shared by all workers
}

// Thread is one workload thread's context: its identity in the run, its
// random source, its buffers and its measurements.
type Thread struct {
	FS            fsys.FS
	Spec          *Spec
	Local         int // index among this process's threads
	Global        int // index among all threads of the run
	GlobalThreads int
	Worker        int
	Workers       int
	Rand          *rand.Rand
	// State is the workload's own per-thread state, kept across phases.
	State any

	base      string
	buf       []byte
	ops       map[string]*stats.Op
	live      *stats.Live
	deadline  time.Duration // on the Clock
	now       time.Duration // on the Clock, as of the last Done or More
	truncated bool
	fatal     error
	ctx       context.Context
	nonce     uint64 // Unique's stamp of this thread and run
	stamp     uint64 // Unique's counter
}

// Dir is this thread's private directory.
func (t *Thread) Dir() string { return t.ThreadDir(t.Global) }

// ThreadDir is the private directory of global thread g (for shuffle modes).
func (t *Thread) ThreadDir(g int) string { return t.base + "/g" + strconv.Itoa(g) }

// Path joins elements below this thread's directory.
func (t *Thread) Path(elem ...string) string {
	return path.Join(append([]string{t.Dir()}, elem...)...)
}

// Shared joins elements below the directory all threads of the run share.
func (t *Thread) Shared(elem ...string) string {
	return path.Join(append([]string{t.base, "shared"}, elem...)...)
}

// maxBuffer bounds one thread's data buffer.
const maxBuffer = 256 << 20

// Buffer returns at least n bytes of incompressible data (so that a file
// system that compresses or deduplicates does not get an easy ride), the same
// slice each time it is large enough.
func (t *Thread) Buffer(n int64) []byte {
	if n > maxBuffer {
		n = maxBuffer
	}
	if int64(len(t.buf)) < n {
		b := make([]byte, n)
		for i := 0; i+8 <= len(b); i += 8 {
			v := t.Rand.Uint64()
			for j := 0; j < 8; j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		t.buf = b
	}
	return t.buf[:n]
}

// Unique makes p, a block about to be written, differ from every block
// written before, in this run or another: each 4 KiB of it starts with a
// nonce of this thread and run and a counter. A file system that
// deduplicates (Cairn's cdc layout) would otherwise store a block written
// over and over once, and a write benchmark would measure nothing. It
// returns p.
func (t *Thread) Unique(p []byte) []byte {
	if t.nonce == 0 {
		t.nonce = uint64(time.Now().UnixNano())*0x9e3779b97f4a7c15 ^ uint64(t.Global) | 1
	}
	for off := 0; off+16 <= len(p); off += 4096 {
		t.stamp++
		binary.LittleEndian.PutUint64(p[off:], t.nonce)
		binary.LittleEndian.PutUint64(p[off+8:], t.stamp)
	}
	return p
}

// clockEpoch anchors Thread.Clock. A duration since a fixed time.Time reads
// only the monotonic clock, half the cost of time.Now (which also reads the
// wall clock) — and the clock is read twice per measured operation.
var clockEpoch = time.Now()

// Clock returns the current time on the monotonic clock of measurements: the
// start to pass to Meter.Done.
func (t *Thread) Clock() time.Duration { return time.Since(clockEpoch) }

// Meter times one kind of operation of the current phase.
type Meter struct {
	op *stats.Op
	t  *Thread
}

// Op returns the meter of operation name for the current phase.
func (t *Thread) Op(name string) *Meter {
	o := t.ops[name]
	if o == nil {
		o = &stats.Op{}
		t.ops[name] = o
	}
	return &Meter{op: o, t: t}
}

// Done records one operation that started at start (from Clock), moved bytes
// and ended with err. An error that makes every further operation pointless
// (no space, a read-only or disconnected file system) stops the thread's
// phase.
func (m *Meter) Done(start time.Duration, bytes int64, err error) {
	now := time.Since(clockEpoch)
	m.t.now = now
	m.op.Record(now-start, bytes, err)
	m.t.live.Add(1, bytes)
	if err != nil && m.t.fatal == nil && isFatal(err) {
		m.t.fatal = err
	}
}

// Items adds n to the entries touched by the meter's operations.
func (m *Meter) Items(n int64) { m.op.Items += n }

func isFatal(err error) bool {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return false
	}
	switch en {
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.ENOTCONN, syscall.EIO:
		return true
	}
	return false
}

// More reports whether iteration i of a loop of count iterations should run:
// false when the count is done, the phase's time bound has passed, the run is
// cancelled or a fatal error occurred. The clock is read every 16 iterations
// (and by every Done), so the check costs almost nothing per operation.
func (t *Thread) More(i, count int64) bool {
	if i >= count || t.fatal != nil {
		return false
	}
	if i&15 == 0 {
		if t.ctx.Err() != nil {
			return false
		}
		t.now = t.Clock()
	}
	if t.now > t.deadline {
		t.truncated = true
		return false
	}
	return true
}

// SetupProgress counts ops entries (and bytes) prepared by Setup, for the
// live progress of a long setup; it measures nothing.
func (t *Thread) SetupProgress(ops, bytes int64) { t.live.Add(ops, bytes) }

// Stop ends the thread's phase with err, which the phase result reports.
func (t *Thread) Stop(err error) {
	if t.fatal == nil {
		t.fatal = err
	}
}

// OpResult is one operation's statistics in a phase.
type OpResult struct {
	Name string `json:"name"`
	stats.Op
}

// PhaseResult is one phase as one worker process measured it. Times are
// offsets from the moment the worker received the start signal, so results
// of workers on hosts with different clocks still line up.
type PhaseResult struct {
	Name      string             `json:"name"`
	StartNs   int64              `json:"start_ns"`
	EndNs     int64              `json:"end_ns"`
	Threads   int                `json:"threads"`
	Truncated bool               `json:"truncated,omitempty"`
	Ops       []OpResult         `json:"ops"`
	Extra     map[string]float64 `json:"extra,omitempty"`
	// Notes say what the figures lack and why (a meta node whose metrics
	// could not be read); they do not make the phase fail.
	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// Result is one worker process's measurements of a workload.
type Result struct {
	SetupNs int64         `json:"setup_ns"`
	Phases  []PhaseResult `json:"phases"`
	// Error says why the workload stopped early; the phases before it are
	// kept.
	Error string `json:"error,omitempty"`
}

// Progress is what a live display reads while a worker runs in-process. All
// methods are safe for concurrent use.
type Progress struct {
	mu       sync.Mutex
	workload string
	phase    string
	index    int
	phases   int
	expected int64
	started  time.Time
	limit    time.Duration
	lives    []stats.Live
	finished bool
}

// Snapshot is a consistent view of a Progress.
type Snapshot struct {
	Workload string
	Phase    string
	Index    int // 0-based index of the phase
	Phases   int
	Ops      int64
	Bytes    int64
	Expected int64 // operations of the phase across threads, 0 when unknown
	Elapsed  time.Duration
	Limit    time.Duration // the phase's time bound
	Finished bool
}

// Snapshot reads the counters.
func (p *Progress) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{Workload: p.workload, Phase: p.phase, Index: p.index, Phases: p.phases,
		Expected: p.expected, Limit: p.limit, Finished: p.finished}
	if !p.started.IsZero() {
		s.Elapsed = time.Since(p.started)
	}
	for i := range p.lives {
		o, b := p.lives[i].Load()
		s.Ops += o
		s.Bytes += b
	}
	return s
}

func (p *Progress) begin(workload, phase string, index, phases int, expected int64, limit time.Duration, threads int) []stats.Live {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workload, p.phase, p.index, p.phases, p.expected, p.limit = workload, phase, index, phases, expected, limit
	p.started = time.Now()
	p.lives = make([]stats.Live, threads)
	p.finished = false
	return p.lives
}

func (p *Progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = true
}

// Runner runs one worker process's share of a workload.
type Runner struct {
	spec     *Spec
	w        Workload
	fs       fsys.FS
	pl       Placement
	threads  []*Thread
	progress *Progress
	setupNs  int64
	server   fsys.ServerSampler
}

// NewRunner builds the workload for this process. progress may be nil.
func NewRunner(f fsys.FS, spec *Spec, pl Placement, progress *Progress) (*Runner, error) {
	if pl.Workers < 1 || pl.Worker < 0 || pl.Worker >= pl.Workers {
		return nil, fmt.Errorf("worker %d of %d: bad placement", pl.Worker, pl.Workers)
	}
	if err := fsys.CheckPath("workspace", pl.Dir); err != nil || pl.Dir == "." {
		return nil, fmt.Errorf("workspace %q: want a relative directory below the target", pl.Dir)
	}
	w, err := spec.New()
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = &Progress{}
	}
	r := &Runner{spec: spec, w: w, fs: f, pl: pl, progress: progress}
	if s, ok := f.(fsys.ServerSampler); ok {
		r.server = s
	}
	n := spec.Threads()
	for i := 0; i < n; i++ {
		g := pl.Worker*n + i
		r.threads = append(r.threads, &Thread{
			FS: f, Spec: spec, Local: i, Global: g, GlobalThreads: pl.Workers * n,
			Worker: pl.Worker, Workers: pl.Workers,
			Rand: rand.New(rand.NewPCG(uint64(spec.Int("seed")), uint64(g))),
			base: pl.Dir, ops: map[string]*stats.Op{}, live: &stats.Live{},
		})
	}
	return r, nil
}

// SampleServersWith makes every phase read the servers' metrics through s
// before and after it (for a target that cannot read them itself, such as
// a posix: target on a Cairn mount); nil turns it off.
func (r *Runner) SampleServersWith(s fsys.ServerSampler) { r.server = s }

// Phases lists the workload's phases.
func (r *Runner) Phases() []string { return r.w.Phases() }

// Setup prepares every thread (directories, input files) in parallel. It is
// not measured; ctx bounds it.
func (r *Runner) Setup(ctx context.Context) error {
	start := time.Now()
	lives := r.progress.begin(r.spec.Name(), "setup", 0, len(r.w.Phases()), 0, 0, len(r.threads))
	for i, t := range r.threads {
		t.live = &lives[i]
	}
	if err := fsys.MkdirAll(r.fs, path.Join(r.pl.Dir, "shared"), 0o755); err != nil {
		return fmt.Errorf("create workspace %s on %s: %w", r.pl.Dir, r.fs, err)
	}
	err := r.each(ctx, func(ctx context.Context, t *Thread) error {
		t.ctx = ctx
		t.deadline = t.Clock() + 24*time.Hour // setup is bounded by ctx, not by the phase bound
		if err := r.fs.Mkdir(t.Dir(), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("thread %d: %w", t.Global, err)
		}
		if err := r.w.Setup(ctx, t); err != nil {
			return fmt.Errorf("setup of thread %d: %w", t.Global, err)
		}
		if t.fatal != nil {
			return fmt.Errorf("setup of thread %d: %w", t.Global, t.fatal)
		}
		return nil
	})
	r.setupNs = int64(time.Since(start))
	return err
}

// each runs f for every thread concurrently and returns the first error,
// cancelling the others' context when one fails.
func (r *Runner) each(ctx context.Context, f func(context.Context, *Thread) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(r.threads))
	var wg sync.WaitGroup
	for i, t := range r.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = f(ctx, t); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// Run runs every phase, all threads together, each phase after the previous
// one finished on every thread of this process. It stops early, keeping the
// phases done so far, when a thread hits a fatal error or ctx ends.
func (r *Runner) Run(ctx context.Context) *Result {
	t0 := time.Now()
	res := &Result{SetupNs: r.setupNs}
	phases := r.w.Phases()
	limit := r.spec.Duration("duration")
	defer r.progress.finish()
	for p, name := range phases {
		var expected int64
		if e, ok := r.w.(Expecter); ok {
			expected = e.Expect(p) * int64(len(r.threads))
		}
		counter, counted := r.fs.(fsys.Counter)
		var before map[string]int64
		if counted {
			before = counter.Counters()
		}
		// The servers' metrics are read outside the phase's window.
		var serverBefore servermetrics.Sample
		if r.server != nil {
			serverBefore = r.server.SampleServers(ctx)
		}
		hostBefore, hostErr := hostcpu.Read()
		lives := r.progress.begin(r.spec.Name(), name, p, len(phases), expected, limit, len(r.threads))
		ph := PhaseResult{Name: name, StartNs: int64(time.Since(t0)), Threads: len(r.threads)}
		errs := make([]error, len(r.threads))
		var wg sync.WaitGroup
		for i, t := range r.threads {
			t.ops = map[string]*stats.Op{}
			t.live = &lives[i]
			t.ctx = ctx
			t.now = t.Clock()
			t.deadline = t.now + limit
			t.truncated, t.fatal = false, nil
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = r.w.Run(ctx, t, p)
			}()
		}
		wg.Wait()
		ph.EndNs = int64(time.Since(t0))
		hostAfter, err := hostcpu.Read()
		hostErr = errors.Join(hostErr, err)
		merged := map[string]*stats.Op{}
		var firstErr error
		for i, t := range r.threads {
			for n, o := range t.ops {
				m := merged[n]
				if m == nil {
					m = &stats.Op{}
					merged[n] = m
				}
				m.Merge(o)
			}
			ph.Truncated = ph.Truncated || t.truncated
			if firstErr == nil {
				if errs[i] != nil {
					firstErr = errs[i]
				} else if t.fatal != nil {
					firstErr = t.fatal
				}
			}
		}
		for _, n := range sortedKeys(merged) {
			ph.Ops = append(ph.Ops, OpResult{Name: n, Op: *merged[n]})
		}
		if x, ok := r.w.(interface {
			Extra(phase int) map[string]float64
		}); ok {
			ph.Extra = x.Extra(p)
		}
		var opens int64
		if counted {
			after := counter.Counters()
			ph.Extra = addCounterFigures(ph.Extra, before, after, ph.Ops, r.server != nil)
			opens = after["opens"] - before["opens"]
		}
		if r.server != nil {
			// Read even when the run was interrupted: the sample has its
			// own time bounds.
			serverAfter := r.server.SampleServers(context.WithoutCancel(ctx))
			figs, notes := servermetrics.Figures(serverBefore, serverAfter, opens, opCount(ph.Ops))
			if ph.Extra == nil && len(figs) > 0 {
				ph.Extra = map[string]float64{}
			}
			for k, v := range figs {
				ph.Extra[k] = v
			}
			ph.Notes = append(ph.Notes, notes...)
		}
		if hostErr == nil {
			d := hostAfter.Sub(hostBefore)
			if ph.Extra == nil {
				ph.Extra = map[string]float64{}
			}
			ph.Extra[FigHostCPU] = d.Busy.Seconds()
			ph.Extra[FigHostSteal] = d.Steal.Seconds()
			deriveHostCPU(ph.Extra, opCount(ph.Ops))
		}
		if firstErr == nil && ctx.Err() != nil {
			firstErr = fmt.Errorf("stopped: %w", context.Cause(ctx))
		}
		if firstErr != nil {
			ph.Error = firstErr.Error()
		}
		res.Phases = append(res.Phases, ph)
		if firstErr != nil {
			res.Error = fmt.Sprintf("phase %s: %v", name, firstErr)
			if p+1 < len(phases) {
				res.Error += fmt.Sprintf(" (%d later phases skipped)", len(phases)-p-1)
			}
			break
		}
	}
	return res
}

// Cleanup removes the directories of this process's threads, unless the spec
// says to keep them. Shared data is removed by CleanupShared once every
// worker is done.
func (r *Runner) Cleanup(ctx context.Context) error {
	if r.spec.Bool("keep") {
		return nil
	}
	return r.each(ctx, func(ctx context.Context, t *Thread) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fsys.RemoveAll(r.fs, t.Dir())
	})
}

// CleanupShared removes a repetition's whole workspace, then its parent
// directories as long as they are empty (so the run leaves nothing behind on
// the target once its last repetition is cleaned up).
func CleanupShared(f fsys.FS, spec *Spec, dir string) error {
	if spec.Bool("keep") {
		return nil
	}
	if err := fsys.CheckPath("cleanup", dir); err != nil || dir == "." {
		return fmt.Errorf("cleanup: refusing to remove %q", dir)
	}
	if err := fsys.RemoveAll(f, dir); err != nil {
		return err
	}
	for p := path.Dir(dir); p != "."; p = path.Dir(p) {
		if f.Rmdir(p) != nil {
			break // not empty: another repetition or workload still uses it
		}
	}
	return nil
}

// MergePhases combines the same phase as measured by several workers: ops
// add up, the window spans the earliest start to the latest end.
func MergePhases(parts []PhaseResult) PhaseResult {
	if len(parts) == 0 {
		return PhaseResult{}
	}
	out := PhaseResult{Name: parts[0].Name, StartNs: parts[0].StartNs, EndNs: parts[0].EndNs}
	ops := map[string]*stats.Op{}
	for _, p := range parts {
		out.StartNs = min(out.StartNs, p.StartNs)
		out.EndNs = max(out.EndNs, p.EndNs)
		out.Threads += p.Threads
		out.Truncated = out.Truncated || p.Truncated
		if out.Error == "" {
			out.Error = p.Error
		}
		for _, o := range p.Ops {
			m := ops[o.Name]
			if m == nil {
				m = &stats.Op{}
				ops[o.Name] = m
			}
			m.Merge(&o.Op)
		}
		for k, v := range p.Extra {
			if out.Extra == nil {
				out.Extra = map[string]float64{}
			}
			if k == "opens" {
				out.Extra[k] += v
			} else {
				out.Extra[k] = max(out.Extra[k], v)
			}
		}
		for _, n := range p.Notes {
			if !slices.Contains(out.Notes, n) {
				out.Notes = append(out.Notes, n)
			}
		}
	}
	// The servers' counts cover every process; the opens and operations
	// add up.
	servermetrics.Derive(out.Extra, int64(out.Extra["opens"]), opCount(out.Ops))
	deriveHostCPU(out.Extra, opCount(out.Ops))
	names := sortedKeys(ops)
	sort.Strings(names)
	for _, n := range names {
		out.Ops = append(out.Ops, OpResult{Name: n, Op: *ops[n]})
	}
	return out
}

// Figures of the benchmark host's processor time over a phase
// (pkg/bench/hostcpu): every process and the kernel, so the system under
// test is in them when it runs on the same host. Across worker processes
// on one host the merged report keeps the largest reading.
const (
	FigHostCPU      = "host_cpu_seconds"   // busy time over the phase
	FigHostSteal    = "host_steal_seconds" // time the hypervisor took
	FigHostCPUPerOp = "host_cpu_ms_per_op" // busy milliseconds per measured operation
)

// deriveHostCPU (re)computes the host's busy time per operation.
func deriveHostCPU(extra map[string]float64, ops int64) {
	if v, ok := extra[FigHostCPU]; ok && ops > 0 {
		extra[FigHostCPUPerOp] = v * 1000 / float64(ops)
	}
}

// opCount is the number of operations measured in a phase.
func opCount(ops []OpResult) int64 {
	var n int64
	for _, o := range ops {
		n += o.Count
	}
	return n
}

// addCounterFigures adds the figures of a backend's traffic counters over a
// phase (fsys.Counter: the SDK backends' metadata requests, opens and data
// bytes; the posix backend's opens): meta_requests, meta_requests_per_op
// (over every measured operation), meta_requests_per_open (over the files
// the phase opened, when it opened any), data_sent_bytes and
// data_recv_bytes. Across worker processes the merged report keeps the
// largest of each. opens (the files opened, added up across processes) is
// added when the client counts its metadata requests or withOpens is set
// (the servers' metrics are read, and their counts are divided by it).
func addCounterFigures(extra map[string]float64, before, after map[string]int64, ops []OpResult, withOpens bool) map[string]float64 {
	meta, ok := after["meta_requests"]
	_, counts := after["opens"]
	if counts && (ok || withOpens) {
		if extra == nil {
			extra = map[string]float64{}
		}
		extra["opens"] = float64(after["opens"] - before["opens"])
	}
	if !ok {
		return extra
	}
	meta -= before["meta_requests"]
	if extra == nil {
		extra = map[string]float64{}
	}
	extra["meta_requests"] = float64(meta)
	if n := opCount(ops); n > 0 {
		extra["meta_requests_per_op"] = float64(meta) / float64(n)
	}
	if opens := after["opens"] - before["opens"]; opens > 0 {
		extra["meta_requests_per_open"] = float64(meta) / float64(opens)
	}
	// File bytes the client sent to and read from data nodes: with a
	// deduplicating layout, less than the phase wrote.
	for _, k := range []string{"data_sent_bytes", "data_recv_bytes"} {
		if v, ok := after[k]; ok {
			extra[k] = float64(v - before[k])
		}
	}
	return extra
}
