package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/diskcache"
	"github.com/cairnfs/cairn/pkg/fusefs"
	"github.com/cairnfs/cairn/pkg/mountinfo"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// mountOpts are the -o options of cairn mount.
type mountOpts struct {
	entryTimeout, attrTimeout time.Duration
	// cacheTimeout is how long the kernel caches names and attributes
	// while the change feed covers the mount (0: fusefs's default; -1:
	// no feed).
	cacheTimeout time.Duration
	// opTimeout bounds every operation while the cluster does not answer
	// (0: the SDK's default): the mount answers ETIMEDOUT instead of hanging.
	opTimeout         time.Duration
	allowOther, debug bool
	readOnly          bool // -o ro: mounted read-only whatever the identity allows
	// readAheadKB is the kernel's read-ahead for the mount (its bdi's
	// read_ahead_kb); 0 leaves the kernel's default.
	readAheadKB int
	// fileCacheBytes bounds the mount's cache of small files' contents
	// (client.Options.FileCacheBytes: 0 the SDK's default, negative none).
	fileCacheBytes int64
	// subdir is the directory of the volume the mount shows as its root
	// ("": the volume's root, or a path-restricted identity's subtree).
	subdir string
	// cacheDir is the directory under which the mount keeps its disk
	// cache, in a subdirectory of its own ("": defaultCacheDir).
	cacheDir string
	// cacheBytes bounds the disk cache (0: defaultDiskCacheBytes;
	// negative: no disk cache).
	cacheBytes int64
	// cacheFreeRatio is the share of its file system the disk cache
	// leaves free (0: diskcache's default; negative: none).
	cacheFreeRatio float64
	// memoryLimit is the soft limit of the process's memory the Go
	// runtime's collector keeps to (0: defaultMountMemoryLimit, negative:
	// none).
	memoryLimit int64
}

// defaultMountMemoryLimit is the mount's soft memory limit unless -o
// memory_mb or GOMEMLIMIT says otherwise, with the default file cache.
// Without one the collector lets the heap grow to twice what is live, and
// a 1-replica mount's resident memory climbed with each phase of make
// bench-data to 582 MiB (docs/measurements.md). It is a soft limit: the
// collector works harder near it, and memory that is live beyond it is
// still granted.
const defaultMountMemoryLimit = 448 << 20

// memoryHeadroom is what an explicit -o memory_mb must leave beyond the
// file cache: below it, a full cache alone would keep the collector
// running all the time.
const memoryHeadroom = 64 << 20

// memoryLimitBytes is the soft memory limit the mount's options ask for,
// -1 for none. The default grows with a file cache larger than its default,
// which would otherwise hold the heap at the limit by itself.
func (o mountOpts) memoryLimitBytes() int64 {
	switch {
	case o.memoryLimit != 0:
		return o.memoryLimit
	case o.fileCacheBytes > client.DefaultFileCacheBytes:
		return defaultMountMemoryLimit + o.fileCacheBytes - client.DefaultFileCacheBytes
	default:
		return defaultMountMemoryLimit
	}
}

// applyMemoryLimit sets the process's soft memory limit from the mount's
// options, unless the GOMEMLIMIT environment variable set one.
func applyMemoryLimit(o mountOpts) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if n := o.memoryLimitBytes(); n > 0 {
		debug.SetMemoryLimit(n)
	}
}

// defaultReadAheadKB is the mount's read-ahead unless -o read_ahead_kb says
// otherwise. The kernel's default for FUSE (128 KiB) sends a sequential
// reader's data in 128 KiB READs; 4 MiB lets it send 1 MiB READs ahead of
// the reader (558-592 against 707-710 MiB/s for one 512 MiB file, cold).
const defaultReadAheadKB = 4096

// parseMountOpts parses "-o a=b,c" values (several -o accumulate).
func parseMountOpts(vals []string) (mountOpts, error) {
	o := mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB}
	for _, v := range vals {
		for _, kv := range strings.Split(v, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, val, hasVal := strings.Cut(kv, "=")
			secs := func() (time.Duration, error) {
				f, err := strconv.ParseFloat(val, 64)
				if !hasVal || err != nil || f < 0 || f > 3600 {
					return 0, fmt.Errorf("-o %s: want seconds between 0 and 3600, e.g. %s=1", kv, k)
				}
				if f == 0 {
					return -1, nil // fusefs: negative means no caching
				}
				return time.Duration(f * float64(time.Second)), nil
			}
			// mib reads MiB as bytes, 0 as -1 (none); zero says what 0
			// means and example is a good value, for the error.
			mib := func(zero string, example int) (int64, error) {
				n, err := strconv.Atoi(val)
				if !hasVal || err != nil || n < 0 || n > 1<<20 {
					return 0, fmt.Errorf("-o %s: want MiB between 0 and 1048576 (0: %s), e.g. %s=%d", kv, zero, k, example)
				}
				if n == 0 {
					return -1, nil
				}
				return int64(n) << 20, nil
			}
			var err error
			switch k {
			case "entry_timeout":
				o.entryTimeout, err = secs()
			case "attr_timeout":
				o.attrTimeout, err = secs()
			case "cache_timeout":
				o.cacheTimeout, err = secs()
			case "op_timeout":
				if o.opTimeout, err = secs(); err == nil && o.opTimeout < 0 {
					err = fmt.Errorf("-o %s: an operation needs more than 0 seconds", kv)
				}
			case "read_ahead_kb":
				n, perr := strconv.Atoi(val)
				if !hasVal || perr != nil || n < 0 || n > 1<<20 {
					err = fmt.Errorf("-o %s: want KiB between 0 and 1048576, e.g. read_ahead_kb=4096", kv)
				}
				o.readAheadKB = n
			case "file_cache_mb":
				o.fileCacheBytes, err = mib("no cache", 64)
			case "cache_dir":
				if !hasVal || !filepath.IsAbs(val) {
					err = fmt.Errorf("-o %s: want an absolute directory, e.g. cache_dir=/var/cache/cairn", kv)
				}
				o.cacheDir = val
			case "cache_size_mb":
				o.cacheBytes, err = mib("no disk cache", 10240)
			case "cache_free_ratio":
				f, perr := strconv.ParseFloat(val, 64)
				if !hasVal || perr != nil || f < 0 || f > 0.9 {
					err = fmt.Errorf("-o %s: want a share of the cache's file system between 0 and 0.9, e.g. cache_free_ratio=0.1", kv)
				}
				o.cacheFreeRatio = f
				if f == 0 {
					o.cacheFreeRatio = -1
				}
			case "memory_mb":
				o.memoryLimit, err = mib("no limit", 1024)
			case "allow_other":
				o.allowOther = true
			case "ro":
				o.readOnly = true
			case "subdir":
				if !hasVal || !strings.HasPrefix(val, "/") {
					err = fmt.Errorf("-o %s: want an absolute path in the volume, e.g. subdir=/projects/a", kv)
				}
				o.subdir = val
			case "debug":
				o.debug = true
			default:
				err = fmt.Errorf("unknown mount option %q (known: entry_timeout=S, attr_timeout=S, cache_timeout=S, op_timeout=S, read_ahead_kb=N, file_cache_mb=N, cache_dir=DIR, cache_size_mb=N, cache_free_ratio=F, memory_mb=N, ro, allow_other, debug, subdir=PATH)", k)
			}
			if err != nil {
				return o, err
			}
		}
	}
	if cache := max(o.fileCacheBytes, client.DefaultFileCacheBytes); o.memoryLimit > 0 && o.memoryLimit < cache+memoryHeadroom {
		return o, fmt.Errorf("-o memory_mb=%d leaves no room beyond the file cache (%d MiB): want at least %d, or a smaller file_cache_mb",
			o.memoryLimit>>20, cache>>20, (cache+memoryHeadroom)>>20)
	}
	return o, nil
}

// setReadAhead sets the kernel's read-ahead of the file system mounted on
// mp, through its backing device's read_ahead_kb in sysfs (the FUSE INIT
// reply can only lower it).
func setReadAhead(mp string, kb int) error {
	var st unix.Stat_t
	if err := unix.Stat(mp, &st); err != nil {
		return err
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(path, []byte(strconv.Itoa(kb)), 0); err != nil {
		return fmt.Errorf("set %s: %w", path, err)
	}
	return nil
}

// checkMountPoint makes sure mp can be mounted on: a stale FUSE mount left
// by a killed process ("transport endpoint is not connected") is lazily
// unmounted; a missing path, a non-directory, a live mount point or a
// non-empty directory is refused.
func checkMountPoint(cmd *cobra.Command, mp string) error {
	// stat may be answered from the kernel's attribute cache of a dead
	// mount; statfs always asks the server.
	var sfs syscall.Statfs_t
	err := syscall.Statfs(mp, &sfs)
	if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		_, err = os.Stat(mp)
	}
	if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s is a stale mount (its server is gone); unmounting it\n", mp)
		if uerr := syscall.Unmount(mp, syscall.MNT_DETACH); uerr != nil {
			return fmt.Errorf("mount point %s is a stale mount that cannot be unmounted: %w (try: fusermount3 -uz %s)", mp, uerr, mp)
		}
		_, err = os.Stat(mp)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return usagef(cmd, "mount point %s does not exist (create it with mkdir)", mp)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", mp, err)
	}
	st, _ := os.Stat(mp)
	if !st.IsDir() {
		return usagef(cmd, "mount point %s is not a directory", mp)
	}
	if busy, err := mountinfo.Mounted(mp); err != nil {
		return fmt.Errorf("read /proc/self/mountinfo: %w", err)
	} else if busy {
		return fmt.Errorf("mount point %s is busy: something is already mounted there (unmount it first: umount %s)", mp, mp)
	}
	d, err := os.Open(mp)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", mp, err)
	}
	names, _ := d.Readdirnames(1)
	d.Close()
	if len(names) > 0 {
		return fmt.Errorf("mount point %s is not empty (it holds %q, ...); mount on an empty directory", mp, names[0])
	}
	return nil
}

// defaultDiskCacheBytes bounds the mount's disk cache unless -o
// cache_size_mb says otherwise. JuiceFS keeps up to 100 GiB by default; the
// index of 10 GiB of 128 KiB blocks takes about 25 MB of the mount's
// memory.
const defaultDiskCacheBytes = 10 << 30

// defaultCacheDir is where mounts keep their disk caches unless -o
// cache_dir says otherwise.
func defaultCacheDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/cache/cairn", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "cairn"), nil
}

// openDiskCache opens the mount's disk cache in a subdirectory of the
// cache directory named for the volume and the mount point, after
// removing the caches of mounts that were killed there; nil when it is
// off. A default directory that cannot be used turns the cache off with a
// warning; one the user named fails the mount.
func openDiskCache(mo mountOpts, volume, mountPoint string, logger *slog.Logger) (*diskcache.Cache, error) {
	if mo.cacheBytes < 0 || mo.fileCacheBytes < 0 {
		return nil, nil
	}
	size := mo.cacheBytes
	if size == 0 {
		size = defaultDiskCacheBytes
	}
	base, explicit := mo.cacheDir, mo.cacheDir != ""
	if !explicit {
		var err error
		if base, err = defaultCacheDir(); err != nil {
			logger.Warn("disk cache off: no cache directory (set -o cache_dir)", "err", err)
			return nil, nil
		}
	}
	sum := sha256.Sum256([]byte(mountPoint))
	dir := filepath.Join(base, fmt.Sprintf("%s-%x", volume, sum[:6]))
	if _, err := diskcache.RemoveStale(nil, base); err != nil {
		logger.Warn("disk cache: removing the caches of killed mounts", "dir", base, "err", err)
	}
	c, err := diskcache.Open(diskcache.Options{Dir: dir, Limit: size, FreeRatio: mo.cacheFreeRatio, Logf: func(format string, args ...any) {
		logger.Warn(fmt.Sprintf(format, args...))
	}})
	switch {
	case err == nil:
		return c, nil
	case explicit:
		return nil, fmt.Errorf("-o cache_dir=%s: %w", mo.cacheDir, err)
	default:
		logger.Warn("disk cache off (set -o cache_dir, or cache_size_mb=0)", "err", err)
		return nil, nil
	}
}

// openVolume opens volume, retrying with a message while no master
// answers, until wait is over. A volume that does not exist fails at once.
func openVolume(cmd *cobra.Command, masters []string, volume string, wait time.Duration, opts *client.Options) (*client.Volume, error) {
	deadline := time.Now().Add(wait)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := client.Open(ctx, masters, volume, opts)
		cancel()
		if err == nil {
			return v, nil
		}
		if client.ErrnoOf(err) == syscall.ENOENT {
			return nil, fmt.Errorf("volume %q does not exist (create it with: cairn volume create %s)", volume, volume)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no master at %s answered within %s: %w", strings.Join(masters, ","), wait, err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "waiting for the master at %s (%v); retrying...\n", strings.Join(masters, ","), plainError(err))
		time.Sleep(min(time.Duration(attempt+1)*time.Second, 5*time.Second))
	}
}

func newMountCmd() *cobra.Command {
	var (
		cf       clusterFlags
		opts     []string
		metrics  string
		profiles bool
		wait     time.Duration
		traceTo  string
	)
	cmd := &cobra.Command{
		Use:   "mount VOLUME MOUNTPOINT",
		Short: "Mount a volume with FUSE",
		Long: `Mount VOLUME on the empty directory MOUNTPOINT and serve it until Ctrl-C or
SIGTERM, which unmount it. The cluster is found with --master, or through the
--data-dir of a 'cairn up' cluster. Permissions are checked by the kernel
(default_permissions); files follow close-to-open consistency.

Options (-o, comma-separated, may repeat):
  entry_timeout=S   seconds the kernel caches names (default 1; 0 disables)
  attr_timeout=S    seconds the kernel caches attributes (default 1; 0 disables)
  cache_timeout=S   seconds the kernel caches names and attributes while the
                    mount's change feed tells it of every other client's
                    change (default 60; 0 turns the feed off). A change by
                    another client still reaches the kernel within the
                    smaller of entry_timeout and attr_timeout; with either
                    at 0 the feed is off
  op_timeout=S      while the cluster does not answer, an operation fails with
                    ETIMEDOUT after S seconds (default 30); it works again as
                    soon as the cluster is back
  read_ahead_kb=N   KiB the kernel reads ahead of a sequential reader (default
                    4096; 0 keeps the kernel's 128; needs root)
  file_cache_mb=N   MiB of memory for the contents of files read through the
                    mount, kept for when the kernel has dropped their pages
                    (or never kept them: O_DIRECT): small files (up to
                    1 MiB) whole, larger ones that fit in it in 128 KiB
                    blocks read at random (default 32; 0 turns it off)
  cache_dir=DIR     directory under which the mount keeps a disk cache of the
                    blocks and small files file_cache_mb keeps in memory, for
                    when they leave memory, in a subdirectory of its own
                    removed at unmount (default /var/cache/cairn for root,
                    else ~/.cache/cairn)
  cache_size_mb=N   MiB of disk for that cache (default 10240; 0 turns it off)
  cache_free_ratio=F share of the cache's file system it leaves free
                    (default 0.1; 0: none)
  memory_mb=N       soft limit of the mount's memory, which Go's garbage
                    collector works harder to keep to (default 448, plus
                    what file_cache_mb adds beyond 32; at least the file
                    cache plus 64; 0: no limit; the GOMEMLIMIT environment
                    variable wins)
  ro                mount read-only
  subdir=PATH       show directory PATH of the volume as the mount's root; df
                    shows its quota when it has one
  allow_other       let other users than the mounting one use the mount
  debug             log every FUSE request

--trace FILE records every operation applications perform on the mount (open,
close, read, write, fsync, truncate, stat, readdir, mkdir, rmdir, unlink,
rename, link, symlink, readlink, chmod: path relative to the mount's root,
offset, size, timing, result, calling pid) in the cairn bench trace format;
unmounting flushes and closes it. Then 'cairn bench trace-stats FILE' prints
its statistics and 'cairn bench replay FILE --target ...' replays it on any
file system (docs/bench.md, "Traces").`,
		Example: `  cairn mount --data-dir ./cairn-data default /mnt/cairn
  cairn mount --master 127.0.0.1:7000 -o attr_timeout=5,allow_other --metrics :9100 default /mnt/cairn
  cairn mount --data-dir ./cairn-data --trace /tmp/build.trace default /mnt/cairn`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef(cmd, "want VOLUME and MOUNTPOINT, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			volume := args[0]
			mo, err := parseMountOpts(opts)
			if err != nil {
				return usageError{err, cmd}
			}
			if profiles && metrics == "" {
				return usagef(cmd, "--pprof serves the profiles on the --metrics address: give --metrics too")
			}
			applyMemoryLimit(mo)
			mp, err := filepath.Abs(args[1])
			if err != nil {
				return err
			}
			if err := checkMountPoint(cmd, mp); err != nil {
				return err
			}
			masters, conf, err := cf.endpoint(cmd)
			if err != nil {
				return err
			}
			caps, err := cf.caps(cmd)
			if err != nil {
				return err
			}
			if caps.Volume != "" && caps.Volume != volume {
				return usagef(cmd, "the identity in %s may use volume %q only, not %q", cf.id.Dir(), caps.Volume, volume)
			}
			fuseOpts := []string{"default_permissions"}
			if caps.ReadOnly || mo.readOnly {
				// The servers refuse every change of a read-only client;
				// mounted read-only, the kernel refuses them first, at
				// open(2) rather than at close.
				fuseOpts = append(fuseOpts, "ro")
			}
			// The trace file is created before anything waits, so that a bad
			// path fails at once; on an early error it is closed as it is.
			var rec *optrace.Recorder
			if traceTo != "" {
				if rec, err = openTrace(traceTo, mp, volume); err != nil {
					return err
				}
				defer rec.Close() // a no-op after closeTrace
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			disk, err := openDiskCache(mo, volume, mp, logger)
			if err != nil {
				return err
			}
			if disk != nil {
				defer disk.Close() // after the volume's Close below
			}
			v, err := openVolume(cmd, masters, volume, wait, &client.Options{OpTimeout: mo.opTimeout, FileCacheBytes: mo.fileCacheBytes, TLS: conf,
				DiskCache: disk, Logger: logger})
			if err != nil {
				return err
			}
			defer v.Close()

			var m *fusefs.Metrics
			if metrics != "" {
				// The servers' endpoint: /metrics, /healthz (the mount is
				// healthy while it serves) and, with --pprof, the profiles.
				tm, err := daemon.StartTelemetry(nil, metrics, profiles, func() error { return nil })
				if err != nil {
					return err
				}
				defer tm.Close()
				if m, err = fusefs.NewMetrics(tm.Registry, v); err != nil {
					return err
				}
			}
			// closeTrace flushes and closes the trace once the mount is gone.
			closeTrace := func(err error) error {
				if rec == nil {
					return err
				}
				n := rec.Count()
				if cerr := rec.Close(); cerr != nil {
					return errors.Join(err, fmt.Errorf("trace %s: %w", traceTo, cerr))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "trace: %d operations written to %s\n", n, traceTo)
				return err
			}
			// A path-restricted identity sees its subtree as the mount's root
			// (-o subdir resolves below it).
			root := caps.RootIno
			if mo.subdir != "" {
				ctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
				a, err := v.StatPath(ctx, mo.subdir, client.Cred{})
				cancel()
				switch {
				case err != nil:
					return closeTrace(fmt.Errorf("-o subdir=%s: %w", mo.subdir, err))
				case !a.IsDir():
					return closeTrace(fmt.Errorf("-o subdir=%s: not a directory", mo.subdir))
				}
				root = a.Ino
			}
			fsys := fusefs.New(v, fusefs.Options{EntryTimeout: mo.entryTimeout, AttrTimeout: mo.attrTimeout, CacheTimeout: mo.cacheTimeout, Metrics: m, Trace: rec, Root: root, ShowIDs: showIDs(caps), CallerGroups: caps.MapsIDs()})
			opts := fusefs.ServerOptions(volume)
			opts.AllowOther, opts.Options, opts.Debug = mo.allowOther, fuseOpts, mo.debug
			srv, err := fusefs.NewServer(fsys, mp, opts)
			if err != nil {
				return closeTrace(fmt.Errorf("mount %s on %s: %w", volume, mp, err))
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			served := make(chan struct{})
			go func() {
				srv.Serve()
				close(served)
			}()
			if err := srv.WaitMount(); err != nil {
				_ = srv.Unmount()
				return closeTrace(fmt.Errorf("mount %s on %s: %w", volume, mp, err))
			}
			if mo.readAheadKB > 0 {
				if err := setReadAhead(mp, mo.readAheadKB); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: read-ahead stays the kernel's default: %v\n", err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mounted volume %s on %s; Ctrl-C unmounts\n", volume, mp)
			select {
			case <-ctx.Done():
			case <-served: // unmounted from outside (umount, fusermount -u)
				fmt.Fprintf(cmd.OutOrStdout(), "%s was unmounted\n", mp)
				return closeTrace(nil)
			}
			return closeTrace(unmount(cmd, srv, mp, served))
		},
	}
	cf.add(cmd)
	cmd.Flags().StringArrayVarP(&opts, "options", "o", nil, "mount options, comma-separated (see above)")
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9100)")
	addPprofFlag(cmd, &profiles)
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to retry while no master answers")
	cmd.Flags().StringVar(&traceTo, "trace", "", "record every operation on the mount to this trace file (see cairn bench trace-stats and replay)")
	return cmd
}

// openTrace creates the trace file of cairn mount --trace (truncating an
// old one) and writes its header.
func openTrace(file, mp, volume string) (*optrace.Recorder, error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	host, _ := os.Hostname()
	rec, err := optrace.NewRecorder(f, optrace.Header{Root: mp, Source: "cairn mount", Host: host,
		Command: strings.Join(os.Args, " "), Extra: map[string]string{"volume": volume}})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--trace %s: %w", file, err)
	}
	return rec, nil
}

// unmount unmounts mp, retrying while it is busy (open files), and
// detaching it lazily after 10 s so that the process never hangs.
func unmount(cmd *cobra.Command, srv *fuse.Server, mp string, served <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := srv.Unmount()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s still busy (%v); detaching it lazily\n", mp, err)
			if derr := syscall.Unmount(mp, syscall.MNT_DETACH); derr != nil {
				return fmt.Errorf("unmount %s: %w (lazy: %v)", mp, err, derr)
			}
			break
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "unmount %s: %v; retrying\n", mp, err)
		time.Sleep(500 * time.Millisecond)
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
	}
	fmt.Fprintf(cmd.OutOrStdout(), "unmounted %s\n", mp)
	return nil
}

// showIDs is how a mount shows owners for an identity with id maps: in
// the client's own ids, so that the kernel's permission checks and ls
// agree with what the servers decide (nil: as stored).
func showIDs(caps capability.Caps) func(uid, gid uint32) (uint32, uint32) {
	if len(caps.UIDMap) == 0 && len(caps.GIDMap) == 0 {
		return nil
	}
	return func(uid, gid uint32) (uint32, uint32) { return caps.ClientUID(uid), caps.ClientGID(gid) }
}
