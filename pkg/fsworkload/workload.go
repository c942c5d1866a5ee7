// Package fsworkload is the clients' side of a fault run: workers on
// several client hosts overwrite and read shared register files, append to
// files of their own, and create, rename, unlink, stat and list names in
// shared directories, and every operation goes into a history (package
// history) for the checker (package checker). A host's operations go
// through its Files: a FUSE mount in the lab (package lab), the SDK in the
// simulation (test/sim).
package fsworkload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/history"
)

// Files is one client host's way to the volume. Paths are slash-separated
// and relative to the volume's root. Errors carry the errno a POSIX
// caller would see (errors.As to syscall.Errno): the outcome of an
// operation is read from it.
type Files interface {
	// MkdirAll makes a directory and its missing parents.
	MkdirAll(p string) error
	// Mkdir makes one directory.
	Mkdir(p string) error
	// CreateExcl creates an empty file that must not exist (O_EXCL) and
	// closes it.
	CreateExcl(p string) error
	// OverwriteSynced writes b at offset 0 of the existing file p, syncs
	// (fsync) and closes it.
	OverwriteSynced(p string, b []byte) error
	// AppendSynced appends b to p (creating it), syncs and closes it.
	AppendSynced(p string, b []byte) error
	// ReadFile reads the whole file.
	ReadFile(p string) ([]byte, error)
	// Unlink removes a name that is not a directory: unlink(2) alone, never
	// rmdir(2) after it, whose errno would say the wrong thing about an
	// unlink that timed out after removing its name.
	Unlink(p string) error
	// Rename renames from to to, replacing to.
	Rename(from, to string) error
	// Exists reports whether the name is there (lstat).
	Exists(p string) (bool, error)
	// List returns the names in a directory.
	List(dir string) ([]string, error)
}

// Config shapes the clients' operations during a fault run: every client
// host gets WorkersPerHost workers, which for the whole run overwrite and
// read shared register files, append to files of their own, and create,
// rename, unlink, stat and list names in shared directories.
type Config struct {
	// Root is the run's directory, relative to the volume's root.
	Root string
	// Hosts maps a client host's name to its way to the volume.
	Hosts map[string]Files
	// WorkersPerHost defaults to 3.
	WorkersPerHost int
	// Registers (shared files overwritten in place) default to 6; Dirs
	// (shared directories) to 2 with Names (entry names) 5 each.
	Registers, Dirs, Names int
	// GiveUp is how long a worker waits for one operation before it
	// records it as unknown and goes on as a new process; default 60 s.
	// A mount answers within its op_timeout unless its process is
	// stopped.
	GiveUp time.Duration
	// Pause between a worker's operations; default 20 ms.
	Pause time.Duration
	// Seed picks every operation.
	Seed uint64
}

func (c *Config) defaults() {
	if c.WorkersPerHost <= 0 {
		c.WorkersPerHost = 3
	}
	if c.Registers <= 0 {
		c.Registers = 6
	}
	if c.Dirs <= 0 {
		c.Dirs = 2
	}
	if c.Names <= 0 {
		c.Names = 5
	}
	if c.GiveUp <= 0 {
		c.GiveUp = time.Minute
	}
	if c.Pause <= 0 {
		c.Pause = 20 * time.Millisecond
	}
}

// blockSize is a register's size: one page, so that a write is one FUSE
// request and a read sees one write or another, never a mix.
const blockSize = 4096

// Workload runs the clients' side of a fault run and records every
// operation in a history.
type Workload struct {
	cfg   Config
	rec   *history.Recorder
	start time.Time
	hosts []string // client hosts, sorted

	mu       sync.Mutex
	nextProc int
	appended map[int]string // process -> its append file (relative key)
	recErr   error          // the first operation the recorder refused
}

// record adds op to the history, keeping the first refusal (Err): an
// operation missing from the history would make the checker's verdict
// worthless.
func (w *Workload) record(op history.Op) {
	if err := w.rec.Record(op); err != nil {
		w.mu.Lock()
		if w.recErr == nil {
			w.recErr = fmt.Errorf("workload: recording %s: %w", op, err)
		}
		w.mu.Unlock()
	}
}

// Hosts lists the client hosts, sorted; the first is the one Setup used.
func (w *Workload) Hosts() []string { return slices.Clone(w.hosts) }

// Err is the first operation the history refused, if any.
func (w *Workload) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recErr
}

// New prepares a workload whose times count from start.
func New(cfg Config, rec *history.Recorder, start time.Time) (*Workload, error) {
	cfg.defaults()
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("workload: no client host")
	}
	w := &Workload{cfg: cfg, rec: rec, start: start, appended: map[int]string{}}
	for h := range cfg.Hosts {
		w.hosts = append(w.hosts, h)
	}
	sort.Strings(w.hosts)
	return w, nil
}

func (w *Workload) register(i int) string { return path.Join(w.cfg.Root, "reg", fmt.Sprintf("r%d", i)) }
func (w *Workload) dir(i int) string      { return path.Join(w.cfg.Root, "names", fmt.Sprintf("d%d", i)) }
func (w *Workload) appendFile(proc int) string {
	return path.Join(w.cfg.Root, "app", fmt.Sprintf("p%d", proc))
}

// Setup makes the run's directories and empty register files through the
// first client host, before any fault.
func (w *Workload) Setup() error {
	fs := w.cfg.Hosts[w.hosts[0]]
	for _, d := range []string{"reg", "app", "names"} {
		if err := fs.MkdirAll(path.Join(w.cfg.Root, d)); err != nil {
			return fmt.Errorf("workload setup: %w", err)
		}
	}
	for i := range w.cfg.Dirs {
		if err := fs.Mkdir(w.dir(i)); err != nil {
			return fmt.Errorf("workload setup: %w", err)
		}
	}
	for i := range w.cfg.Registers {
		if err := fs.CreateExcl(w.register(i)); err != nil {
			return fmt.Errorf("workload setup: %w", err)
		}
	}
	return nil
}

func (w *Workload) newProc() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextProc++
	return w.nextProc
}

// Run runs every worker until ctx ends or until.
func (w *Workload) Run(ctx context.Context, until time.Time) {
	var wg sync.WaitGroup
	for hi, h := range w.hosts {
		for k := range w.cfg.WorkersPerHost {
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(hi*1000+k)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.worker(ctx, h, rng, until)
			}()
		}
	}
	wg.Wait()
}

func (w *Workload) worker(ctx context.Context, host string, rng *rand.Rand, until time.Time) {
	proc := w.newProc()
	var seq uint64
	for ctx.Err() == nil && time.Now().Before(until) {
		seq++
		op := w.draw(rng, proc, seq)
		op.Host = host
		done := w.perform(host, &op)
		if !done {
			// Still running inside the mount: it may yet take effect.
			// A new process goes on, as after any unknown outcome.
			op.Outcome, op.Errno = history.Unknown, "gave up"
		}
		w.record(op)
		if op.Outcome == history.Unknown {
			proc, seq = w.newProc(), 0
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.cfg.Pause):
		}
	}
}

// draw picks the next operation of process proc.
func (w *Workload) draw(rng *rand.Rand, proc int, seq uint64) history.Op {
	op := history.Op{Process: proc}
	r := rng.IntN(100)
	switch {
	case r < 20:
		op.Kind, op.Key = history.Write, w.register(rng.IntN(w.cfg.Registers))
		op.Value = uint64(proc)<<32 | seq
	case r < 42:
		op.Kind, op.Key = history.Read, w.register(rng.IntN(w.cfg.Registers))
	case r < 55:
		op.Kind, op.Key = history.Append, w.appendFile(proc)
		op.Value = uint64(proc)<<32 | seq
	default:
		op.Key = w.dir(rng.IntN(w.cfg.Dirs))
		name := func() string { return fmt.Sprintf("n%d", rng.IntN(w.cfg.Names)) }
		op.Name = name()
		switch rng.IntN(5) {
		case 0:
			op.Kind = history.Create
		case 1:
			op.Kind = history.Unlink
		case 2:
			op.Kind, op.To = history.Rename, name()
			if op.To == op.Name {
				op.Kind = history.Stat
				op.To = ""
			}
		case 3:
			op.Kind = history.Stat
		default:
			op.Kind, op.Name = history.List, ""
		}
	}
	return op
}

// perform runs op through host's mount and fills in its result; false when
// it gave up waiting (Config.GiveUp).
func (w *Workload) perform(host string, op *history.Op) bool {
	return w.performOn(host, w.cfg.Hosts[host], op)
}

// performOn is perform through fs.
func (w *Workload) performOn(host string, fs Files, op *history.Op) bool {
	op.Start = time.Since(w.start).Nanoseconds()
	done := make(chan struct{})
	var res history.Op
	go func() {
		defer close(done)
		res = *op
		w.do(fs, &res)
	}()
	select {
	case <-done:
		*op = res
		op.End = time.Since(w.start).Nanoseconds()
		return true
	case <-time.After(w.cfg.GiveUp):
		op.End = time.Since(w.start).Nanoseconds()
		return false
	}
}

// do performs op and sets its outcome and result (not its times).
func (w *Workload) do(fs Files, op *history.Op) {
	p := op.Key
	var err error
	switch op.Kind {
	case history.Write:
		err = fs.OverwriteSynced(p, history.EncodeBlock(op.Value, blockSize))
	case history.Read:
		var b []byte
		if b, err = fs.ReadFile(p); err == nil {
			op.Value, op.Corrupt = decodeRegister(b)
		}
	case history.Append:
		w.mu.Lock()
		w.appended[op.Process] = op.Key
		w.mu.Unlock()
		err = fs.AppendSynced(p, history.EncodeRecord(op.Value))
	case history.ReadAppends:
		var b []byte
		if b, err = fs.ReadFile(p); errors.Is(err, syscall.ENOENT) {
			err = nil // never appended to, or the creation was lost
		} else if err == nil {
			var ok bool
			op.Values, ok = history.DecodeRecords(b)
			op.Corrupt = !ok
		}
	case history.Create:
		err = fs.CreateExcl(path.Join(p, op.Name))
	case history.Unlink:
		err = fs.Unlink(path.Join(p, op.Name))
	case history.Rename:
		err = fs.Rename(path.Join(p, op.Name), path.Join(p, op.To))
	case history.Stat:
		var ok bool
		if ok, err = fs.Exists(path.Join(p, op.Name)); err == nil && ok {
			op.Value = 1
		}
	case history.List:
		var names []string
		if names, err = fs.List(p); err == nil {
			op.Names = append([]string{}, names...)
			slices.Sort(op.Names)
		}
	}
	op.Outcome, op.Errno = outcomeOf(op.Kind, err)
}

// outcomeOf classifies an operation's error: an errno that says the
// operation did not happen (EEXIST for an exclusive create, ENOENT for a
// name that was not there) is a failure; any other error leaves it
// unknown, as it may have happened before the error.
func outcomeOf(kind history.Kind, err error) (history.Outcome, string) {
	if err == nil {
		return history.OK, ""
	}
	var errno syscall.Errno
	name := err.Error()
	if errors.As(err, &errno) {
		name = errnoName(errno)
	}
	switch {
	case kind == history.Create && errors.Is(err, syscall.EEXIST),
		(kind == history.Unlink || kind == history.Rename) && errors.Is(err, syscall.ENOENT):
		return history.Fail, name
	}
	return history.Unknown, name
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

// decodeRegister reads a register file's bytes: empty is 0.
func decodeRegister(b []byte) (v uint64, corrupt bool) {
	if len(b) == 0 {
		return 0, false
	}
	v, ok := history.DecodeBlock(b)
	return v, !ok
}

// Final reads, after the faults healed, every register and append file
// and lists every directory through every client host, each as an
// operation of a process of its own (Final set). It stops between two
// operations once ctx is done, and says so.
func (w *Workload) Final(ctx context.Context) error {
	for _, h := range w.hosts {
		if err := w.finalOn(ctx, h, w.cfg.Hosts[h]); err != nil {
			return err
		}
	}
	return nil
}

// FinalThrough does Final's reads through fs, a client host named host
// that took no part in the run: one whose caches hold nothing of the
// run, so that what it reads is what the servers kept.
func (w *Workload) FinalThrough(ctx context.Context, host string, fs Files) error {
	if _, ok := w.cfg.Hosts[host]; ok {
		return fmt.Errorf("final reads through %s: it is one of the run's hosts", host)
	}
	return w.finalOn(ctx, host, fs)
}

func (w *Workload) finalOn(ctx context.Context, h string, fs Files) error {
	w.mu.Lock()
	files := make([]string, 0, len(w.appended))
	for _, k := range w.appended {
		files = append(files, k)
	}
	w.mu.Unlock()
	slices.Sort(files)
	var ops []history.Op
	for i := range w.cfg.Registers {
		ops = append(ops, history.Op{Kind: history.Read, Key: w.register(i)})
	}
	for _, k := range files {
		ops = append(ops, history.Op{Kind: history.ReadAppends, Key: k})
	}
	for i := range w.cfg.Dirs {
		ops = append(ops, history.Op{Kind: history.List, Key: w.dir(i)})
	}
	for _, op := range ops {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("final reads: %w", err)
		}
		op.Process, op.Host, op.Final = w.newProc(), h, true
		if !w.performOn(h, fs, &op) {
			op.Outcome, op.Errno = history.Unknown, "gave up"
		}
		w.record(op)
	}
	return nil
}
