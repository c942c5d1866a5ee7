// Package daemon holds what every long-running Cairn process needs around its role:
// an exclusive lock on its data dir, an identity file that says which role and
// cluster the dir belongs to, structured logging, and an HTTP endpoint with
// Prometheus metrics and a health check.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairnfs/cairn/pkg/network"
)

// ErrDirInUse is returned by LockDir when another process holds the lock.
var ErrDirInUse = errors.New("data dir is in use")

// DirLock is an exclusive flock on a data dir, released by Unlock or by the
// process's death (the kernel drops flocks of a killed process, so kill -9 never
// leaves a dir locked).
type DirLock struct {
	f *os.File
}

// LockDir creates dir if needed, checks it is writable, and takes its lock. A dir
// held by a live process fails with ErrDirInUse naming that process.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by pid %s", ErrDirInUse, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DirLock{f: f}, nil
}

// Unlock releases the lock.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Identity is what a data dir records about the process that owns it, so that a
// dir is never reused by another role or joined to another cluster by mistake.
type Identity struct {
	Role      string `json:"role"`
	NodeID    uint64 `json:"node_id,omitempty"`
	UUID      string `json:"uuid"`
	ClusterID string `json:"cluster_id,omitempty"`
}

const identityFile = "identity.json"

// LoadIdentity reads dir's identity; ok is false when the dir has none yet.
func LoadIdentity(dir string) (id Identity, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, os.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("read identity: %w", err)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, false, fmt.Errorf("data dir %s has a corrupt %s: %w", dir, identityFile, err)
	}
	return id, true, nil
}

// SaveIdentity writes dir's identity atomically (write, fsync, rename, fsync dir).
func SaveIdentity(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, identityFile), append(b, '\n'))
}

// WriteFileAtomic replaces path with data so that a crash leaves either the old or
// the new content, never a mix.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync dir of %s: %w", path, err)
	}
	defer d.Close()
	return d.Sync()
}

// CheckRole refuses a dir that belongs to another role.
func (id Identity) CheckRole(dir, role string) error {
	if id.Role != role {
		return fmt.Errorf("data dir %s belongs to a %s, not a %s; use another --data-dir", dir, id.Role, role)
	}
	return nil
}

// NewLogger returns a structured logger writing text lines to w at level.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// Telemetry serves /metrics (Prometheus) and /healthz on one HTTP listener,
// and Go's profiles under /debug/pprof/ when asked to (--pprof).
type Telemetry struct {
	Registry *prometheus.Registry
	mux      *http.ServeMux
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
}

// StartTelemetry listens on addr of n (nil: the host's TCP stack; ":0"
// picks a port) and serves until Close.
// health is called on every /healthz request; a nil error answers 200.
// With profiles it also serves Go's profiles of the process
// (HandleProfiles); without, /debug/pprof/ answers 404. The endpoint has no
// authentication: profiles (a goroutine dump, the command line, a CPU
// profile that costs CPU while it runs) are for a trusted network only.
func StartTelemetry(n network.Network, addr string, profiles bool, health func() error) (*Telemetry, error) {
	ln, err := network.Or(n).Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener on %s: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := health(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if profiles {
		HandleProfiles(mux)
	} else {
		// Explicitly, so that no handler of "/" (a master's console, which
		// a follower proxies to the leader) answers for the profiles.
		mux.Handle("/debug/pprof/", http.NotFoundHandler())
	}
	t := &Telemetry{
		Registry: reg,
		mux:      mux,
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:       ln,
		done:     make(chan struct{}),
	}
	go func() {
		defer close(t.done)
		_ = t.srv.Serve(ln)
	}()
	return t, nil
}

// Handle serves pattern with h on the endpoint besides /metrics,
// /healthz and the profiles if any (a master's console at "/").
func (t *Telemetry) Handle(pattern string, h http.Handler) { t.mux.Handle(pattern, h) }

// Addr is the address the endpoint listens on.
func (t *Telemetry) Addr() string { return t.ln.Addr().String() }

// Close stops serving and waits for the server goroutine.
func (t *Telemetry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := t.srv.Shutdown(ctx)
	<-t.done
	return err
}

// NewUUID returns a random (version 4) UUID, used to identify clusters and nodes.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// HandleProfiles serves Go's profiles of the running process under
// /debug/pprof/ on mux (go tool pprof http://ADDR/debug/pprof/profile),
// without authentication: processes call it only when started with
// --pprof.
// Block and mutex profiles record only when CAIRN_PROFILE_CONTENTION is
// set (to any value), since recording them costs time on every wait.
func HandleProfiles(mux *http.ServeMux) {
	if os.Getenv("CAIRN_PROFILE_CONTENTION") != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		runtime.SetMutexProfileFraction(100)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
