// Package progress shows a cairn bench run while it happens: on a terminal,
// one mpb bar per worker with its phase and rates; elsewhere (a pipe, a log
// file, CI), a plain line per worker every few seconds. Workers in the
// master's own process report live counters; worker processes and remote
// workers send nothing until their result (that is the point of DFS-Perf's
// two round trips), so their bars only show the time against the bound.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/bench"
	"github.com/cairnfs/cairn/pkg/bench/report"
)

// Mode selects the display.
type Mode string

// Modes: Auto picks Bars on a terminal and Lines otherwise.
const (
	Auto  Mode = "auto"
	Bars  Mode = "bars"
	Lines Mode = "lines"
	Off   Mode = "off"
)

// ParseMode reads a --progress value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Auto, Bars, Lines, Off:
		return m, nil
	}
	return "", fmt.Errorf("progress %q: want auto, bars, lines or off", s)
}

// IsTerminal reports whether w is a terminal with a known width (bars
// cannot be drawn on a terminal that reports zero columns).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return err == nil && ws.Col > 0
}

// Display is a bench.Observer that draws progress. Close stops whatever it
// still draws; it must be called once the run is over.
type Display interface {
	bench.Observer
	Close()
}

// New returns the display for mode writing to w; interval is the period of
// plain lines.
func New(w io.Writer, mode Mode, interval time.Duration) Display {
	if mode == Auto {
		mode = Lines
		if IsTerminal(w) {
			mode = Bars
		}
	}
	if interval <= 0 {
		interval = 5 * time.Second
	}
	switch mode {
	case Bars:
		return &barDisplay{w: w}
	case Lines:
		return &lineDisplay{w: w, every: interval}
	}
	return off{}
}

type off struct{}

func (off) Note(string)                         {}
func (off) Begin(bench.RunInfo)                 {}
func (off) End(bench.RunInfo, []report.Failure) {}
func (off) Close()                              {}

// status is one worker's line of progress, computed from its live counters
// or from the clock.
func status(w bench.WorkerInfo, started time.Time, bound time.Duration) (text string, frac float64) {
	el := time.Since(started)
	if w.Live == nil {
		return fmt.Sprintf("running %s of at most %s (no messages until its result, by design)",
			el.Round(time.Second), bound.Round(time.Second)), min(1, el.Seconds()/bound.Seconds())
	}
	s := w.Live.Snapshot()
	if s.Phase == "" {
		return "starting", 0
	}
	secs := s.Elapsed.Seconds()
	parts := []string{fmt.Sprintf("%s (%d/%d)", s.Phase, s.Index+1, s.Phases), report.Num(float64(s.Ops)) + " ops"}
	if secs > 0 {
		parts = append(parts, report.Num(float64(s.Ops)/secs)+" ops/s")
		if s.Bytes > 0 {
			parts = append(parts, report.Num(float64(s.Bytes)/(1<<20)/secs)+" MiB/s")
		}
	}
	switch {
	case s.Finished:
		frac = 1
	case s.Expected > 0:
		frac = min(1, float64(s.Ops)/float64(s.Expected))
	case s.Limit > 0:
		frac = min(1, s.Elapsed.Seconds()/s.Limit.Seconds())
	}
	// Phases done count in full, the current one by its fraction.
	if s.Phases > 0 {
		frac = (float64(s.Index) + frac) / float64(s.Phases)
	}
	return strings.Join(parts, ", "), frac
}

// lineDisplay prints one line per worker every interval.
type lineDisplay struct {
	w     io.Writer
	every time.Duration
	mu    sync.Mutex
	stop  chan struct{}
	done  chan struct{}
}

func (d *lineDisplay) Note(msg string) { fmt.Fprintln(d.w, msg) }

func (d *lineDisplay) Begin(info bench.RunInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.halt()
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	started := time.Now()
	stop, done := d.stop, d.done
	go func() {
		defer close(done)
		t := time.NewTicker(d.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				for _, w := range info.Workers {
					text, _ := status(w, started, info.Bound)
					fmt.Fprintf(d.w, "[%s] %s on %s rep %d/%d · %s: %s\n", time.Since(started).Round(time.Second),
						info.Workload, info.Target, info.Repetition, info.Repetitions, w.Name, text)
				}
			}
		}
	}()
}

func (d *lineDisplay) End(info bench.RunInfo, fails []report.Failure) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.halt()
	msg := fmt.Sprintf("[%d/%d] %s on %s (repetition %d/%d): done", info.Index, info.Total, info.Workload, info.Target, info.Repetition, info.Repetitions)
	if len(fails) > 0 {
		msg += fmt.Sprintf(", %d worker failure(s)", len(fails))
	}
	fmt.Fprintln(d.w, msg)
}

// halt stops the ticker goroutine and waits for it; d.mu is held.
func (d *lineDisplay) halt() {
	if d.stop != nil {
		close(d.stop)
		<-d.done
		d.stop, d.done = nil, nil
	}
}

func (d *lineDisplay) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.halt()
}

// barDisplay draws one mpb bar per worker while a run is going.
type barDisplay struct {
	w    io.Writer
	mu   sync.Mutex
	p    *mpb.Progress
	bars []*mpb.Bar
	stop chan struct{}
	done chan struct{}
}

func (d *barDisplay) Note(msg string) { fmt.Fprintln(d.w, msg) }

// barTotal is the scale of every bar: progress is a fraction.
const barTotal = 10000

func (d *barDisplay) Begin(info bench.RunInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.halt()
	started := time.Now()
	d.p = mpb.New(mpb.WithOutput(d.w), mpb.WithWidth(28), mpb.WithRefreshRate(250*time.Millisecond))
	texts := make([]string, len(info.Workers))
	var tmu sync.Mutex
	d.bars = nil
	for i, w := range info.Workers {
		name := fmt.Sprintf("%-18s", truncate(w.Name, 18))
		bar := d.p.New(barTotal, mpb.BarStyle().Lbound("[").Rbound("]").Filler("=").Tip(">").Padding(" "),
			mpb.PrependDecorators(decor.Name(name), decor.Elapsed(decor.ET_STYLE_MMSS, decor.WC{W: 6})),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
				tmu.Lock()
				defer tmu.Unlock()
				return texts[i]
			})))
		d.bars = append(d.bars, bar)
	}
	fmt.Fprintf(d.w, "[%d/%d] %s on %s, repetition %d/%d\n", info.Index, info.Total, info.Workload, info.Target, info.Repetition, info.Repetitions)
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	stop, done, bars := d.stop, d.done, d.bars
	update := func() {
		for i, w := range info.Workers {
			text, frac := status(w, started, info.Bound)
			tmu.Lock()
			texts[i] = text
			tmu.Unlock()
			bars[i].SetCurrent(int64(frac * (barTotal - 1)))
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			update()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (d *barDisplay) End(info bench.RunInfo, fails []report.Failure) {
	d.mu.Lock()
	defer d.mu.Unlock()
	failed := map[string]bool{}
	for _, f := range fails {
		failed[f.Worker] = true
	}
	if d.stop != nil {
		close(d.stop)
		<-d.done
		d.stop, d.done = nil, nil
	}
	for i, b := range d.bars {
		if i < len(info.Workers) && failed[info.Workers[i].Name] {
			b.Abort(false)
			continue
		}
		b.SetCurrent(barTotal) // reaching the total completes the bar
	}
	if d.p != nil {
		d.p.Wait()
		d.p = nil
	}
	d.bars = nil
}

// halt stops drawing; d.mu is held.
func (d *barDisplay) halt() {
	if d.stop != nil {
		close(d.stop)
		<-d.done
		d.stop, d.done = nil, nil
	}
	for _, b := range d.bars {
		b.Abort(false)
	}
	if d.p != nil {
		d.p.Wait()
		d.p = nil
	}
	d.bars = nil
}

func (d *barDisplay) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.halt()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
