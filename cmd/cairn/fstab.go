package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

// mountHelperNames are the names mount(8) runs a helper by for an fstab
// line of type fuse.cairn (or cairn): link the cairn binary to
// /sbin/mount.fuse.cairn and
//
//	cairn#VOLUME /mnt/x fuse.cairn master=10.0.0.1:17000+10.0.0.2:17000,_netdev 0 0
//
// mounts VOLUME at boot, or with 'mount /mnt/x'.
var mountHelperNames = []string{"mount.fuse.cairn", "mount.cairn"}

// isMountHelper reports whether the binary was run as a mount helper.
func isMountHelper(argv0 string) bool {
	return slices.Contains(mountHelperNames, filepath.Base(argv0))
}

// mountReadyWait bounds how long the helper waits for the mount to appear.
const mountReadyWait = 90 * time.Second

// ignoredMountOptions are fstab options for mount(8), systemd or the
// kernel's generic mount flags, not for Cairn.
var ignoredMountOptions = []string{"rw", "defaults", "auto", "noauto", "user", "nouser", "users", "nofail", "_netdev", "default_permissions",
	"exec", "noexec", "suid", "nosuid", "dev", "nodev", "atime", "noatime", "relatime", "strictatime", "nodiratime", "async", "sync"}

// fstabArgs turns a mount helper's arguments, SOURCE MOUNTPOINT [-o
// OPTIONS] [-n] [-s] [-v] [-f], into those of 'cairn mount'. SOURCE is
// VOLUME or cairn#VOLUME. Options: master=ADDR[+ADDR...], data_dir=DIR,
// tls_dir=DIR, insecure, metrics=ADDR, log=FILE (where the mount logs;
// default /var/log/cairn/mount-<mountpoint>.log), the mount options of
// 'cairn mount' (ro, allow_other, op_timeout=S ...), and fstab's own
// (_netdev, nofail, x-systemd.* ...), which are ignored. fake is -f.
func fstabArgs(args []string) (mountArgs []string, mountpoint, logFile string, fake bool, err error) {
	var pos, opts []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o":
			if i+1 == len(args) {
				return nil, "", "", false, errors.New("-o without options")
			}
			i++
			opts = append(opts, strings.Split(args[i], ",")...)
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case a == "-f":
			fake = true
		case a == "-n", a == "-s", a == "-v":
		case strings.HasPrefix(a, "-"):
			return nil, "", "", false, fmt.Errorf("unknown flag %q", a)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, "", "", false, fmt.Errorf("want SOURCE and MOUNTPOINT, got %q", pos)
	}
	volume := strings.TrimPrefix(pos[0], "cairn#")
	if volume == "" {
		return nil, "", "", false, fmt.Errorf("source %q names no volume (cairn#VOLUME)", pos[0])
	}
	mountpoint = pos[1]
	var fuseOpts []string
	for _, o := range opts {
		k, v, hasVal := strings.Cut(strings.TrimSpace(o), "=")
		need := func(flag string) error {
			if !hasVal || v == "" {
				return fmt.Errorf("option %s needs a value (%s=...)", k, k)
			}
			mountArgs = append(mountArgs, flag, v)
			return nil
		}
		switch {
		case k == "":
		case k == "master":
			if !hasVal || v == "" {
				return nil, "", "", false, errors.New("option master needs addresses: master=HOST:PORT[+HOST:PORT...]")
			}
			mountArgs = append(mountArgs, "--master", strings.ReplaceAll(v, "+", ","))
		case k == "data_dir":
			err = need("--data-dir")
		case k == "tls_dir":
			err = need("--tls-dir")
		case k == "metrics":
			err = need("--metrics")
		case k == "log":
			if !hasVal || v == "" {
				return nil, "", "", false, errors.New("option log needs a file: log=/var/log/cairn/x.log")
			}
			logFile = v
		case k == "insecure" && !hasVal:
			mountArgs = append(mountArgs, "--insecure")
		case slices.Contains(ignoredMountOptions, k) && !hasVal, strings.HasPrefix(k, "x-"), k == "comment":
		default:
			fuseOpts = append(fuseOpts, o) // cairn mount checks them
		}
		if err != nil {
			return nil, "", "", false, err
		}
	}
	if len(fuseOpts) > 0 {
		mountArgs = append(mountArgs, "-o", strings.Join(fuseOpts, ","))
	}
	if logFile == "" {
		logFile = filepath.Join("/var/log/cairn", "mount"+strings.ReplaceAll(filepath.Clean(mountpoint), "/", "-")+".log")
	}
	return append(append([]string{"mount"}, mountArgs...), volume, mountpoint), mountpoint, logFile, fake, nil
}

// runMountHelper mounts as mount(8) asks a helper to: it starts 'cairn
// mount' in the background, detached from mount(8) (which waits for the
// helper), and returns once the mount point is mounted, or with the
// mount's own error if it exits first.
func runMountHelper(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "mount.fuse.cairn: "+format+"\n", a...)
		return exitUsage
	}
	mountArgs, mp, logFile, fake, err := fstabArgs(args)
	if err != nil {
		return fail("%v", err)
	}
	if fake {
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		return fail("%v", err)
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		return fail("log directory: %v", err)
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail("log: %v", err)
	}
	defer log.Close()
	start, _ := log.Seek(0, 2)
	cmd := exec.Command(self, mountArgs...)
	cmd.Args[0] = "cairn" // a hard link named mount.fuse.cairn must not run as the helper again
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives mount(8) and its session
	if err := cmd.Start(); err != nil {
		return fail("start %s: %v", self, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(mountReadyWait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fail("cairn mount exited (%v) before %s was mounted:\n%s", err, mp, logTail(logFile, start))
		case <-deadline:
			_ = cmd.Process.Kill()
			return fail("%s not mounted after %s; see %s", mp, mountReadyWait, logFile)
		case <-tick.C:
			if ok, _ := localcluster.IsMounted(mp); ok {
				return 0 // the mount goes on; 'umount' ends it
			}
		}
	}
}

// logTail is what the log got since offset from, at most 4 KiB of it.
func logTail(file string, from int64) string {
	b, err := os.ReadFile(file)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	b = b[from:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}
