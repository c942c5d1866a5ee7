package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/checker"
	"github.com/cairnfs/cairn/pkg/fsck"
	"github.com/cairnfs/cairn/pkg/fsworkload"
	"github.com/cairnfs/cairn/pkg/history"
)

// JepsenConfig is a nemesis run (Lab.Jepsen): a random schedule of faults
// while the clients' workload runs, then a heal, a settle and the final
// reads, and the checker's verdict.
type JepsenConfig struct {
	// Duration of the faults and the workload.
	Duration time.Duration
	// Seed picks the schedule and the operations.
	Seed uint64
	// Nemesis and Workload shape the two sides; their Duration, Seed,
	// Root and Hosts are filled in.
	Nemesis  NemesisConfig
	Workload fsworkload.Config
	// Settle bounds the wait, after the heal, for every node alive and
	// every partition fully replicated; default 3 min.
	Settle time.Duration
	// Out is the directory of the run's files: history.jsonl,
	// nemesis.jsonl, report.md, timeline.svg, and the hosts' logs in
	// logs/HOST/.
	Out string
	// Progress receives a line every 10 s and at each fault; nil: none.
	Progress io.Writer
	// NameStaleness is how far behind another mount's changes a mount's
	// view of names may be (checker.Options); default MountNameBound.
	NameStaleness time.Duration
}

// MountNameBound is how long a mount may show a name or attributes
// another mount changed: its kernel's short entry and attribute timeouts
// (1 s; the change feed keeps long-cached ones within 0.5 s), plus one
// request's time (docs/design.md, "Kernel caches kept coherent by a
// change feed"). File contents get no such slack: an open after another
// mount's close reads what it wrote.
const MountNameBound = 1100 * time.Millisecond

// JepsenResult is what a run found.
type JepsenResult struct {
	Seed     uint64
	Duration time.Duration
	Report   checker.Report
	Events   []NemesisEvent
	Stalls   []Stall
	// Recovered: every node alive and every partition healthy within
	// Settle after the heal, after RecoveredIn; else Unrecovered says what
	// was not.
	Recovered   bool
	RecoveredIn time.Duration
	Unrecovered string
	// Fsck is the volume check's summary; FsckClean its verdict.
	// Reclaimed orphan inodes (left by operations cut short) were found
	// by the first check and were gone, reclaimed by the masters' sweeper,
	// ReclaimedIn later.
	Fsck        string
	FsckClean   bool
	Reclaimed   int
	ReclaimedIn time.Duration
	Out         string
}

// Failed reports whether the run found anything wrong.
func (r *JepsenResult) Failed() bool {
	return len(r.Report.Anomalies) > 0 || !r.Recovered || !r.FsckClean
}

// Jepsen runs a nemesis run on the lab, which must be up with at least one
// client host, and writes its files to cfg.Out.
func (l *Lab) Jepsen(ctx context.Context, cfg JepsenConfig) (*JepsenResult, error) {
	if cfg.Duration <= 0 {
		return nil, errors.New("jepsen: a duration is needed")
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * time.Minute
	}
	if cfg.NameStaleness <= 0 {
		cfg.NameStaleness = MountNameBound
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	st, err := l.Status()
	if err != nil {
		return nil, err
	}
	s, err := l.State()
	if err != nil {
		return nil, err
	}
	if len(s.Faults) > 0 {
		return nil, fmt.Errorf("jepsen: %d faults in force; heal them first (cairn lab heal --all)", len(s.Faults))
	}
	mounts := map[string]string{}
	for _, h := range st.Hosts {
		if h.Mount != "" {
			mounts[h.Name] = h.Mount
		}
	}
	if len(mounts) == 0 {
		return nil, errors.New("jepsen: the lab has no client host with a mount (cairn lab up --clients N)")
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	hf, err := os.Create(filepath.Join(cfg.Out, "history.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	defer hf.Close()
	nf, err := os.Create(filepath.Join(cfg.Out, "nemesis.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	defer nf.Close()

	nc := cfg.Nemesis
	nc.Duration, nc.Seed = cfg.Duration, cfg.Seed
	plan, err := PlanNemesis(s, nc)
	if err != nil {
		return nil, err
	}
	// Forks from here on go through a launcher, started while this
	// process holds no file of a mount (launcher.go).
	ln, err := startLauncher(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	l.launch = ln
	defer func() {
		l.launch = nil
		if err := ln.close(); err != nil {
			fmt.Fprintf(progress, "jepsen: %v\n", err)
		}
	}()
	rec := history.NewRecorder(hf)
	wc := cfg.Workload
	wc.Root = fmt.Sprintf("jepsen/%s-seed%d", time.Now().UTC().Format("20060102T150405"), cfg.Seed)
	wc.Hosts, wc.Seed = map[string]fsworkload.Files{}, cfg.Seed
	for h, m := range mounts {
		wc.Hosts[h] = fsworkload.Dir(m)
	}
	start := time.Now()
	w, err := fsworkload.New(wc, rec, start)
	if err != nil {
		return nil, err
	}
	if err := w.Setup(); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "jepsen: seed %d, %v of faults (%d planned) on %d server hosts, %d client hosts; files in %s\n",
		cfg.Seed, cfg.Duration, len(plan), len(servers(s)), len(mounts), cfg.Out)

	res := &JepsenResult{Seed: cfg.Seed, Duration: cfg.Duration, Out: cfg.Out}
	var (
		mu      sync.Mutex
		inForce = map[int]string{}
	)
	record := func(e NemesisEvent) {
		mu.Lock()
		defer mu.Unlock()
		res.Events = append(res.Events, e)
		b, _ := json.Marshal(e)
		_, _ = nf.Write(append(b, '\n'))
		verb := "inject"
		if e.Heal {
			verb = "heal"
			delete(inForce, e.Fault)
		} else if e.Err == "" {
			inForce[e.Fault] = e.Spec
		}
		if e.Err != "" {
			fmt.Fprintf(progress, "  %6.1fs %s %s: %s\n", e.At.Seconds(), verb, e.Spec, e.Err)
		} else {
			fmt.Fprintf(progress, "  %6.1fs %s %s (fault %d)\n", e.At.Seconds(), verb, e.Spec, e.Fault)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var nemErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		nemErr = l.RunNemesis(runCtx, plan, start, record)
	}()
	go func() {
		defer wg.Done()
		w.Run(runCtx, start.Add(cfg.Duration))
	}()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				c := countOutcomes(rec.Ops())
				mu.Lock()
				faults := slices.Sorted(maps.Values(inForce))
				mu.Unlock()
				fmt.Fprintf(progress, "  %6.1fs %d operations (%d ok, %d failed, %d unknown); faults in force: %s\n",
					time.Since(start).Seconds(), c.total, c.ok, c.fail, c.unknown, orNone(faults))
			}
		}
	}()
	wg.Wait()
	close(stop)
	if nemErr != nil {
		return nil, nemErr
	}
	if _, err := l.HealAll(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("jepsen: heal: %w", err)
	}
	healed := time.Now()
	fmt.Fprintf(progress, "jepsen: healed; waiting up to %v for every node alive and every partition healthy\n", cfg.Settle)
	res.Unrecovered = l.settle(ctx, cfg.Settle)
	res.Recovered, res.RecoveredIn = res.Unrecovered == "", time.Since(healed)
	if res.Recovered {
		fmt.Fprintf(progress, "jepsen: recovered %.1fs after the heal\n", res.RecoveredIn.Seconds())
	} else {
		fmt.Fprintf(progress, "jepsen: NOT recovered %.1fs after the heal: %s\n", res.RecoveredIn.Seconds(), res.Unrecovered)
	}
	fmt.Fprintf(progress, "jepsen: final reads through %d mounts\n", len(mounts))
	if err := w.Final(ctx); err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	if err := w.Err(); err != nil {
		return nil, err
	}
	if err := rec.Flush(); err != nil {
		return nil, fmt.Errorf("jepsen: history: %w", err)
	}
	l.checkVolume(ctx, s, w.Hosts()[0], FsckReclaim, res, progress)
	ops := rec.Ops()
	res.Report = checker.Check(ops, checker.Options{NameStaleness: cfg.NameStaleness})
	res.Stalls = Stalls(ops, res.Events)
	if err := writeReport(res, ops); err != nil {
		return nil, err
	}
	if err := keepLogs(l.dir, cfg.Out); err != nil {
		fmt.Fprintf(progress, "jepsen: keeping the hosts' logs: %v\n", err)
	}
	return res, nil
}

// keepLogs copies every host's process logs (hosts/HOST/*.log under the
// lab's dir) to out/logs/HOST/: a finding is explained from the meta and
// data nodes' lines around it, and the lab's own copies are overwritten
// by its next run. They are small (about 1.3 MB for a 10-minute run of 9
// hosts).
func keepLogs(labDir, out string) error {
	logs, err := filepath.Glob(filepath.Join(labDir, "hosts", "*", "*.log"))
	if err != nil {
		return err
	}
	var errs []error
	for _, src := range logs {
		host := filepath.Base(filepath.Dir(src))
		dst := filepath.Join(out, "logs", host, filepath.Base(src))
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(dst), 0o755)
		}
		if err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
		}
	}
	return errors.Join(errs...)
}

type outcomeCount struct{ total, ok, fail, unknown int }

func countOutcomes(ops []history.Op) outcomeCount {
	var c outcomeCount
	for _, op := range ops {
		c.total++
		switch op.Outcome {
		case history.OK:
			c.ok++
		case history.Fail:
			c.fail++
		default:
			c.unknown++
		}
	}
	return c
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

// settle waits up to d for every node alive and every partition healthy;
// "" when they are, else what is not.
func (l *Lab) settle(ctx context.Context, d time.Duration) string {
	deadline := time.Now().Add(d)
	last := "no answer from the masters"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cs, err := l.Cluster(cctx)
		cancel()
		if err != nil {
			last = err.Error()
		} else {
			var bad []string
			for _, n := range cs.Nodes {
				if n.Role != RoleMaster && n.State != "alive" {
					bad = append(bad, fmt.Sprintf("%s node %s %s", n.Role, n.Address, n.State))
				}
			}
			for _, p := range cs.Partitions {
				if p.Health != "healthy" {
					bad = append(bad, fmt.Sprintf("%s partition %d %s", p.Kind, p.ID, p.Health))
				}
			}
			if len(bad) == 0 {
				return ""
			}
			last = strings.Join(bad, ", ")
		}
		time.Sleep(time.Second)
	}
	return last
}

// FsckReclaim bounds the wait, after the final reads, for the masters'
// sweeper to reclaim the orphan inodes that operations cut short left
// behind (a create whose name step never ran). Lab masters sweep every
// LabSweepInterval with LabSweepGrace, so an orphan is gone within about
// LabSweepGrace + 2 × LabSweepInterval of its last change.
const FsckReclaim = 2 * time.Minute

// reclaimable are the fsck findings the masters' sweeper repairs by
// itself; any other finding is a bug.
var reclaimable = []fsck.Kind{fsck.Orphan, fsck.Unlinked}

// fsckJSON is the part of `cairn fsck --json` the run reads.
type fsckJSON struct {
	Inodes   int               `json:"inodes"`
	Dentries int               `json:"dentries"`
	Counts   map[fsck.Kind]int `json:"counts"`
	Findings []fsck.Finding    `json:"findings"`
	Clean    bool              `json:"clean"`
}

// checkVolume runs `cairn fsck` from host until the volume is clean. While
// every finding is an orphan the sweeper reclaims by itself, it looks
// again every 5 s for up to wait: those must go without anyone's help.
// Any other finding ends the check at once. It fills res.Fsck,
// res.FsckClean, res.Reclaimed and res.ReclaimedIn.
func (l *Lab) checkVolume(ctx context.Context, s *State, host string, wait time.Duration, res *JepsenResult, progress io.Writer) {
	start := time.Now()
	first := true
	for {
		rep, err := l.fsck(ctx, s, host)
		if err != nil {
			res.Fsck, res.FsckClean = err.Error(), false
			return
		}
		res.Fsck = fsckSummary(rep)
		if rep.Clean {
			res.FsckClean = true
			res.ReclaimedIn = time.Since(start)
			return
		}
		pending := 0
		for _, k := range reclaimable {
			pending += rep.Counts[k]
		}
		if first {
			res.Reclaimed = pending
			first = false
		}
		if pending < len(rep.Findings) || time.Since(start) >= wait || ctx.Err() != nil {
			return
		}
		fmt.Fprintf(progress, "jepsen: fsck finds %d orphan inodes; waiting for the sweeper (%.0fs of %v)\n",
			pending, time.Since(start).Seconds(), wait)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// fsck runs `cairn fsck --json` on the volume from host.
func (l *Lab) fsck(ctx context.Context, s *State, host string) (*fsckJSON, error) {
	h, ok := s.Host(host)
	if !ok {
		return nil, fmt.Errorf("fsck: no host %s", host)
	}
	argv := []string{s.Binary, "fsck", s.Volume, "--json", "--timeout", "1m",
		"--master", masterAddrsOf(s), "--tls-dir", tlsDir(s.Dir, adminIdentity)}
	// fsck exits non-zero when it finds something; its answer is the JSON.
	out, err := l.run(ctx, command{Netns: h.Netns, Argv: argv, Timeout: 90 * time.Second, StdoutOnly: true})
	var rep fsckJSON
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("cairn fsck --json: %w", jerr)
	}
	return &rep, nil
}

// fsckSummary is a check's result as the report shows it.
func fsckSummary(rep *fsckJSON) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d inodes, %d names", rep.Inodes, rep.Dentries)
	for _, k := range fsck.Kinds {
		if n := rep.Counts[k]; n > 0 {
			fmt.Fprintf(&b, "; %s: %d", k, n)
		}
	}
	for i, f := range rep.Findings {
		if i == 20 {
			fmt.Fprintf(&b, "\n... %d more", len(rep.Findings)-i)
			break
		}
		fmt.Fprintf(&b, "\n%s (partition %d, inode %d): %s", f.Kind, f.Partition, f.Ino, f.Explanation)
	}
	return b.String()
}
