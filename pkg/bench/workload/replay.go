package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/stats"
	"github.com/cairnfs/cairn/pkg/bench/trace"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// Trace replay (DFS-Perf §5.3). Every thread replays the whole trace in its
// own directory, as if one more copy of the traced application ran there.
// Before the start signal it creates what the trace expects to find
// (trace.Prestate). During the phase, each recorded thread (tid) is a stream
// replayed in order, streams run concurrently, and an operation starts only
// after every operation that had finished before it started in the recording
// has finished in the replay — the recording's happens-before order, kept
// across streams, at maximal or at the recorded pace.

func init() {
	register(&Kind{
		Name:     "replay",
		Confined: true,
		Doc: "replay a recorded trace (cairn mount --trace, cairn bench record) on the target; each thread replays the whole trace in its own directory. " +
			"An operation whose outcome (success or failure) differs from the recording counts as an error of that operation.",
		Keys: []Key{
			{Name: "trace", Type: tString, Required: true, Doc: "the trace file; remote workers read it at the same path on their host"},
			{Name: "pace", Type: tEnum, Default: "max", Choices: []string{"max", "recorded"}, Doc: "max: as fast as the recorded order allows; recorded: each operation no earlier than its recorded start"},
			{Name: "speed", Type: tFloat, Default: "1", Doc: "with pace=recorded, how many times faster than recorded"},
			{Name: "max_records", Type: tInt, Default: "10000000", Min: 1, Max: 100_000_000, Doc: "refuse traces with more records (memory: about 200 bytes per record)"},
			{Name: "streams", Type: tInt, Default: "256", Min: 1, Max: 4096, Doc: "concurrent streams per thread; recorded tids beyond this share streams, still in order"},
		},
		New: newReplay,
	})
}

type replayWL struct {
	file       string
	recorded   bool
	speed      float64
	maxRecords int
	maxStreams int

	once sync.Once
	data *replayData
	err  error
}

// replayData is the trace and everything derived from it, computed once per
// process and shared read-only by its threads.
type replayData struct {
	events   []optrace.Event
	pre      []trace.Entry
	need     []int   // events (in end order) that must be done before event i starts
	endRank  []int   // position of event i in end order
	streams  [][]int // event indices of each stream, in start order
	recorded time.Duration
	maxIO    int64
}

func newReplay(s *Spec) (Workload, error) {
	if s.Str("trace") == "" {
		return nil, errors.New("trace: the path of a trace file is required")
	}
	return &replayWL{file: s.Str("trace"), recorded: s.Str("pace") == "recorded", speed: s.Float("speed"),
		maxRecords: int(s.Int("max_records")), maxStreams: int(s.Int("streams"))}, nil
}

func (w *replayWL) Phases() []string { return []string{"replay"} }

func (w *replayWL) Expect(int) int64 {
	if w.data == nil {
		return 0
	}
	return int64(len(w.data.events))
}

func (w *replayWL) Extra(int) map[string]float64 {
	if w.data == nil {
		return nil
	}
	return map[string]float64{"recorded_s": w.data.recorded.Seconds(), "records": float64(len(w.data.events))}
}

func (w *replayWL) load() (*replayData, error) {
	w.once.Do(func() {
		f, err := os.Open(w.file)
		if err != nil {
			w.err = fmt.Errorf("open trace: %w", err)
			return
		}
		defer f.Close()
		tr, err := optrace.Read(f, w.maxRecords)
		if err != nil {
			w.err = fmt.Errorf("trace %s: %w", w.file, err)
			return
		}
		w.data = prepareReplay(tr.Events, w.maxStreams)
	})
	return w.data, w.err
}

// prepareReplay computes the replay schedule of events sorted by start.
func prepareReplay(ev []optrace.Event, maxStreams int) *replayData {
	d := &replayData{events: ev, pre: trace.Prestate(ev)}
	n := len(ev)
	byEnd := make([]int, n)
	for i := range byEnd {
		byEnd[i] = i
	}
	sort.SliceStable(byEnd, func(a, b int) bool { return ev[byEnd[a]].End() < ev[byEnd[b]].End() })
	ends := make([]time.Duration, n)
	d.endRank = make([]int, n)
	for r, i := range byEnd {
		d.endRank[i] = r
		ends[r] = ev[i].End()
	}
	// Strictly earlier ends only: an operation that ended exactly when this
	// one started may come after it in its own stream.
	d.need = make([]int, n)
	streamOf := map[int64]int{}
	var first, last time.Duration
	for i := range ev {
		e := &ev[i]
		d.need[i] = sort.Search(n, func(k int) bool { return ends[k] >= e.Start })
		s, ok := streamOf[e.TID]
		if !ok {
			s = len(streamOf) % maxStreams
			streamOf[e.TID] = s
			if s == len(d.streams) {
				d.streams = append(d.streams, nil)
			}
		}
		d.streams[s] = append(d.streams[s], i)
		if i == 0 || e.Start < first {
			first = e.Start
		}
		last = max(last, e.End())
		if e.Op.IsData() {
			d.maxIO = max(d.maxIO, e.Size)
		}
	}
	if n > 0 {
		d.recorded = last - first
	}
	return d
}

// replayPath maps a trace path into the thread's directory.
func replayPath(t *Thread, p string) string {
	p = path.Clean("/" + p)
	if p == "/" {
		return t.Dir()
	}
	return t.Dir() + p
}

func (w *replayWL) Setup(ctx context.Context, t *Thread) error {
	d, err := w.load()
	if err != nil {
		return err
	}
	buf := t.Buffer(1 << 20)
	for _, e := range d.pre {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p := replayPath(t, e.Path)
		if e.Dir {
			if err := mkdirAll(t, p); err != nil {
				return fmt.Errorf("create %s the trace expects: %w", e.Path, err)
			}
			continue
		}
		if err := writeSized(t, p, e.Size, buf); err != nil {
			return fmt.Errorf("create %s the trace expects: %w", e.Path, err)
		}
	}
	return nil
}

// maxReplayIO bounds the buffer of one replayed read or write; larger
// requests are split.
const maxReplayIO = 16 << 20

type replayHandle struct {
	f          fsys.File
	appendMode bool
}

type replayRun struct {
	t  *Thread
	d  *replayData
	w  *replayWL
	t0 time.Time
	mu sync.Mutex
	cv *sync.Cond
	hs map[uint64]*replayHandle
	// done[r] says whether the event of end rank r has finished; prefix is
	// the length of the finished prefix of the end order.
	done      []bool
	prefix    int
	stop      bool
	stopCh    chan struct{} // closed with stop, for streams sleeping until a recorded time
	stopOnce  sync.Once
	truncated atomic.Bool
}

func (w *replayWL) Run(ctx context.Context, t *Thread, _ int) error {
	d, err := w.load()
	if err != nil {
		return err
	}
	r := &replayRun{t: t, d: d, w: w, t0: time.Now(), hs: map[uint64]*replayHandle{}, done: make([]bool, len(d.events)),
		stopCh: make(chan struct{})}
	r.cv = sync.NewCond(&r.mu)
	halt := func() {
		r.mu.Lock()
		r.stop = true
		r.cv.Broadcast()
		r.mu.Unlock()
		r.stopOnce.Do(func() { close(r.stopCh) })
	}
	// A watcher stops the streams at the phase's time bound or when ctx
	// ends; it is stopped and waited for when the streams are done.
	streamsDone := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		tm := time.NewTimer(t.deadline - t.Clock())
		defer tm.Stop()
		select {
		case <-ctx.Done():
			halt()
		case <-tm.C:
			r.truncated.Store(true)
			halt()
		case <-streamsDone:
		}
	}()

	results := make([]map[string]*stats.Op, len(d.streams))
	var wg sync.WaitGroup
	for s := range d.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[s] = r.stream(ctx, s)
		}()
	}
	wg.Wait()
	close(streamsDone)
	watcher.Wait()
	for _, h := range r.hs {
		h.f.Close() // left open by the trace (or by an early stop)
	}
	for _, ops := range results {
		for name, o := range ops {
			t.Op(name).op.Merge(o)
		}
	}
	if r.truncated.Load() {
		t.truncated = true
	}
	return nil
}

// stream replays one stream's events in order and returns its statistics.
func (r *replayRun) stream(ctx context.Context, s int) map[string]*stats.Op {
	ops := map[string]*stats.Op{}
	rng := rand.New(rand.NewPCG(uint64(r.t.Global), uint64(s)))
	var buf []byte
	for _, i := range r.d.streams[s] {
		e := &r.d.events[i]
		r.mu.Lock()
		for r.prefix < r.d.need[i] && !r.stop {
			r.cv.Wait()
		}
		stopped := r.stop
		r.mu.Unlock()
		if stopped {
			break
		}
		if r.w.recorded {
			at := r.t0.Add(time.Duration(float64(e.Start) / r.w.speed))
			if wait := time.Until(at); wait > 0 {
				tm := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					tm.Stop()
					return ops
				case <-r.stopCh:
					tm.Stop()
					return ops
				case <-tm.C:
				}
			}
		}
		if e.Op.IsData() && int64(len(buf)) < min(e.Size, maxReplayIO) {
			buf = make([]byte, min(e.Size, maxReplayIO))
			for k := range buf {
				buf[k] = byte(rng.Uint32())
			}
		}
		start := time.Now()
		n, err := r.exec(e, buf)
		o := ops[string(e.Op)]
		if o == nil {
			o = &stats.Op{}
			ops[string(e.Op)] = o
		}
		o.Record(time.Since(start), n, mismatch(e, err))
		r.t.live.Add(1, n)

		r.mu.Lock()
		r.done[r.d.endRank[i]] = true
		for r.prefix < len(r.done) && r.done[r.prefix] {
			r.prefix++
		}
		r.cv.Broadcast()
		r.mu.Unlock()
	}
	return ops
}

// mismatch turns a replayed outcome into the operation's error: nil when it
// matches the recording (both succeeded, or both failed).
func mismatch(e *optrace.Event, err error) error {
	switch {
	case e.OK() && err != nil:
		return fmt.Errorf("%s %s succeeded when recorded, failed on replay: %w", e.Op, e.Path, err)
	case !e.OK() && err == nil:
		return fmt.Errorf("%s %s failed when recorded (%s), succeeded on replay", e.Op, e.Path, syscall.Errno(-e.Result))
	}
	return nil
}

var errNoHandle = errors.New("no open handle (its open failed on replay)")

const replayOpenFlags = syscall.O_ACCMODE | syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC | syscall.O_APPEND |
	syscall.O_DIRECTORY | syscall.O_SYNC | syscall.O_DSYNC

func (r *replayRun) handle(h uint64) *replayHandle {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hs[h]
}

// exec performs one recorded operation and returns the bytes it moved.
func (r *replayRun) exec(e *optrace.Event, buf []byte) (int64, error) {
	f := r.t.FS
	p := replayPath(r.t, e.Path)
	switch e.Op {
	case optrace.OpOpen:
		flags := int(e.Flags) & replayOpenFlags
		mode := os.FileMode(e.Mode & 0o777)
		if mode == 0 {
			mode = 0o644
		}
		fh, err := f.OpenFile(p, flags, mode)
		if err != nil {
			return 0, err
		}
		if e.Handle == 0 {
			return 0, fh.Close()
		}
		r.mu.Lock()
		if old := r.hs[e.Handle]; old != nil {
			old.f.Close()
		}
		r.hs[e.Handle] = &replayHandle{f: fh, appendMode: flags&syscall.O_APPEND != 0}
		r.mu.Unlock()
		return 0, nil
	case optrace.OpClose:
		r.mu.Lock()
		h := r.hs[e.Handle]
		delete(r.hs, e.Handle)
		r.mu.Unlock()
		if h == nil {
			return 0, errNoHandle
		}
		return 0, h.f.Close()
	case optrace.OpRead, optrace.OpWrite:
		h := r.handle(e.Handle)
		if h == nil {
			return 0, errNoHandle
		}
		var total int64
		for total < e.Size {
			chunk := buf[:min(e.Size-total, int64(len(buf)))]
			var n int
			var err error
			switch {
			case e.Op == optrace.OpRead:
				n, err = h.f.ReadAt(chunk, e.Offset+total)
				if err == io.EOF {
					return total + int64(n), nil
				}
			case h.appendMode:
				n, err = h.f.Write(chunk)
			default:
				n, err = h.f.WriteAt(chunk, e.Offset+total)
			}
			total += int64(n)
			if err != nil {
				return total, err
			}
		}
		return total, nil
	case optrace.OpFsync:
		h := r.handle(e.Handle)
		if h == nil {
			return 0, errNoHandle
		}
		return 0, h.f.Sync()
	case optrace.OpTruncate:
		if e.Handle != 0 {
			if h := r.handle(e.Handle); h != nil {
				return 0, h.f.Truncate(e.Size)
			}
		}
		return 0, f.Truncate(p, e.Size)
	case optrace.OpStat:
		var err error
		if e.Flags&optrace.StatNoFollow != 0 {
			_, err = f.Lstat(p)
		} else {
			_, err = f.Stat(p)
		}
		return 0, err
	case optrace.OpReaddir:
		_, err := f.ReadDir(p)
		return 0, err
	case optrace.OpMkdir:
		mode := os.FileMode(e.Mode & 0o777)
		if mode == 0 {
			mode = 0o755
		}
		return 0, f.Mkdir(p, mode)
	case optrace.OpRmdir:
		return 0, f.Rmdir(p)
	case optrace.OpUnlink:
		return 0, f.Unlink(p)
	case optrace.OpRename:
		return 0, f.Rename(p, replayPath(r.t, e.Path2))
	case optrace.OpLink:
		return 0, f.Link(p, replayPath(r.t, e.Path2))
	case optrace.OpSymlink:
		return 0, f.Symlink(e.Path2, p)
	case optrace.OpReadlink:
		_, err := f.Readlink(p)
		return 0, err
	case optrace.OpChmod:
		return 0, f.Chmod(p, os.FileMode(e.Mode&0o777))
	}
	return 0, fmt.Errorf("replay: unknown op %q", e.Op)
}
