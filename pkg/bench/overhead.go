package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// The framework's overhead, measured as DFS-Perf §6.4 does: the same
// sequential write and read workloads run by a minimal direct loop (plain
// system calls, nothing else) and by the framework (master, in-process
// worker, workload engine, per-operation timing and histograms, live
// counters), alternately in the same invocation, on the same directory.

// OverheadOptions configure Overhead.
type OverheadOptions struct {
	Target    string // posix:DIR
	Threads   int
	Files     int // per thread
	FileSize  int64
	BlockSize int64
	Rounds    int // each round runs both, in alternating order
	Log       io.Writer
}

// OverheadResult compares one workload's throughput both ways.
type OverheadResult struct {
	Workload        string    `json:"workload"`
	DirectMiBs      []float64 `json:"direct_mib_s"`
	FrameworkMiBs   []float64 `json:"framework_mib_s"`
	DirectMedian    float64   `json:"direct_median_mib_s"`
	FrameworkMedian float64   `json:"framework_median_mib_s"`
	// DifferencePct is how much less throughput the framework measured than
	// the direct loop, in percent (negative: more): one minus the median of
	// the per-round ratios framework/direct. Each round runs the two back to
	// back, so a ratio compares them under the same background load, which
	// on a shared machine varies far more between rounds than within one.
	DifferencePct float64 `json:"difference_pct"`
}

// Overhead measures the framework's overhead on sequential write and read.
func Overhead(ctx context.Context, o OverheadOptions) ([]OverheadResult, error) {
	dir, ok := cutPrefix(o.Target, "posix:")
	if !ok {
		return nil, fmt.Errorf("overhead: target %q: the direct loop needs a posix:DIR target", o.Target)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("overhead: %w", err)
	}
	probe, err := fsys.Open(ctx, "posix:"+dir, fsys.Options{})
	if err != nil {
		return nil, err
	}
	probe.Close()
	if o.Threads < 1 || o.Files < 1 || o.FileSize < 1 || o.BlockSize < 1 || o.Rounds < 1 {
		return nil, errors.New("overhead: threads, files, file size, block size and rounds must be positive")
	}
	set := map[string]string{
		"threads": strconv.Itoa(o.Threads), "files": strconv.Itoa(o.Files),
		"file_size": strconv.FormatInt(o.FileSize, 10), "block_size": strconv.FormatInt(o.BlockSize, 10),
	}
	var out []OverheadResult
	for _, kind := range []string{"seq-write", "seq-read"} {
		spec, err := workload.Resolve(kind, set)
		if err != nil {
			return nil, err
		}
		res := OverheadResult{Workload: kind}
		for round := 0; round < o.Rounds; round++ {
			runs := []func() (float64, error){
				func() (float64, error) { return directLoop(ctx, dir, kind, o) },
				func() (float64, error) { return frameworkRun(ctx, dir, spec) },
			}
			if round%2 == 1 { // alternate the order, so neither always runs on a warmer machine
				runs[0], runs[1] = runs[1], runs[0]
			}
			var vals [2]float64
			for i, r := range runs {
				v, err := r()
				if err != nil {
					return nil, err
				}
				vals[i] = v
			}
			if round%2 == 1 {
				vals[0], vals[1] = vals[1], vals[0]
			}
			res.DirectMiBs = append(res.DirectMiBs, vals[0])
			res.FrameworkMiBs = append(res.FrameworkMiBs, vals[1])
			if o.Log != nil {
				fmt.Fprintf(o.Log, "%s round %d/%d: direct %.0f MiB/s, framework %.0f MiB/s\n", kind, round+1, o.Rounds, vals[0], vals[1])
			}
		}
		res.DirectMedian, res.FrameworkMedian = median(res.DirectMiBs), median(res.FrameworkMiBs)
		ratios := make([]float64, len(res.DirectMiBs))
		for i := range ratios {
			ratios[i] = res.FrameworkMiBs[i] / res.DirectMiBs[i]
		}
		res.DifferencePct = (1 - median(ratios)) * 100
		out = append(out, res)
	}
	return out, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// frameworkRun runs the workload through the whole framework and returns
// the throughput it reports.
func frameworkRun(ctx context.Context, dir string, spec *workload.Spec) (float64, error) {
	rep, err := Run(ctx, Options{Targets: []string{"posix:" + dir}, Workloads: []*workload.Spec{spec}, Local: true, Repetitions: 1})
	if err != nil {
		return 0, err
	}
	if len(rep.Failures) > 0 {
		return 0, fmt.Errorf("framework run failed: %s", rep.Failures[0].Error)
	}
	t := rep.Workloads[0].Targets[0]
	op := "write"
	if spec.Kind == "seq-read" {
		op = "read"
	}
	f, ok := t.Find(op, op, report.FigThroughput)
	if !ok {
		return 0, fmt.Errorf("framework run reported no %s throughput", op)
	}
	return float64(f.Median), nil
}

// directLoop is the "exact" tool of DFS-Perf §6.4: each thread writes (or
// reads) its files with plain system calls, timed as a whole.
func directLoop(ctx context.Context, dir, kind string, o OverheadOptions) (float64, error) {
	work, err := os.MkdirTemp(dir, ".cairn-bench-direct-")
	if err != nil {
		return 0, fmt.Errorf("direct loop: %w", err)
	}
	defer os.RemoveAll(work)
	name := func(t, i int) string { return filepath.Join(work, fmt.Sprintf("t%d.f%d", t, i)) }
	block := make([]byte, o.BlockSize)
	for i := range block {
		block[i] = byte(i*7 + 13)
	}
	writeAll := func(t int) error {
		for i := 0; i < o.Files; i++ {
			fd, err := unix.Open(name(t, i), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return err
			}
			for off := int64(0); off < o.FileSize; off += o.BlockSize {
				if _, err := unix.Write(fd, block[:min(o.BlockSize, o.FileSize-off)]); err != nil {
					unix.Close(fd)
					return err
				}
			}
			if err := unix.Close(fd); err != nil {
				return err
			}
		}
		return nil
	}
	readAll := func(t int) error {
		buf := make([]byte, o.BlockSize)
		for i := 0; i < o.Files; i++ {
			fd, err := unix.Open(name(t, i), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			for read := int64(0); read < o.FileSize; {
				n, err := unix.Read(fd, buf)
				if err != nil || n == 0 {
					unix.Close(fd)
					if err == nil {
						err = io.ErrUnexpectedEOF
					}
					return err
				}
				read += int64(n)
			}
			unix.Close(fd)
		}
		return nil
	}
	each := func(f func(int) error) error {
		errs := make([]error, o.Threads)
		var wg sync.WaitGroup
		for t := 0; t < o.Threads; t++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs[t] = f(t) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	body := writeAll
	if kind == "seq-read" {
		if err := each(writeAll); err != nil { // the input, not timed
			return 0, fmt.Errorf("direct loop: %w", err)
		}
		body = readAll
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	start := time.Now()
	if err := each(body); err != nil {
		return 0, fmt.Errorf("direct loop: %w", err)
	}
	el := time.Since(start)
	total := float64(o.Threads) * float64(o.Files) * float64(o.FileSize)
	return total / (1 << 20) / el.Seconds(), nil
}
