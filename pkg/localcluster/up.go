package localcluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/loopback"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/mountinfo"
	"github.com/cairnfs/cairn/pkg/pki"
)

// Options configures Up.
type Options struct {
	DataDir string
	// Masters, Metas and Datas size a new cluster; 0 takes the layout's (or the
	// default 1/3/3). A value that differs from an existing layout is an error.
	Masters, Metas, Datas int
	// Binary is the cairn executable to start the children from.
	Binary string
	// Volume is created if missing once the cluster is up ("" for none).
	Volume string
	// VolumeLayout is the default file layout of Volume when Start creates
	// it ("" or "extent": extents; "cdc": content-defined chunks).
	VolumeLayout string
	// Ready is how long to wait for all processes to be up.
	Ready time.Duration
	Out   io.Writer
	// LogLevel is passed to the children.
	LogLevel string
	// DownAfter, if set, is passed to the masters (--down-after).
	DownAfter time.Duration
	// OutAfter, if set, is passed to the masters (--out-after): how long a
	// down node waits before its replicas move to other nodes.
	OutAfter time.Duration
	// MasterFlags are appended verbatim to every master's command line
	// (e.g. "--mp-max-inodes", "2000"), after the flags Start sets, so
	// tuning the master needs no change here.
	MasterFlags []string
	// MetaFlags are appended verbatim to every meta node's command line
	// (e.g. "--merge=false").
	MetaFlags []string
	// Insecure runs every process with --insecure: plain text, no
	// certificate (for measuring what TLS costs); no identity is created.
	Insecure bool
	// Mount, if set, is a directory where Volume is mounted by a `cairn
	// mount` child once the cluster is up (created if missing). Without
	// /dev/fuse, or if the mount does not come up, Start warns on Out and
	// goes on without it.
	Mount string
	// S3, if set, starts an S3 gateway (`cairn s3`) for Volume on a free
	// loopback port, with credentials kept in <data-dir>/s3.env.
	S3 bool
	// Profiles passes --pprof to the masters, nodes and the mount: each
	// serves Go's profiles on its metrics address. Those are loopback
	// addresses, but loopback is open to every user of the host, so it is
	// off unless asked for.
	Profiles bool
}

// Cluster is a running local cluster.
type Cluster struct {
	opts   Options
	dir    string
	layout *Layout
	lock   *daemon.DirLock
	client *masterclient.Client
	// adminTLS is the admin identity's client configuration (nil with
	// Insecure), for what Start does through the SDK.
	adminTLS *tls.Config

	mu       sync.Mutex
	children map[string]*child
	stopping bool
	mountDir string // where the mount child mounts the volume
	mounted  bool   // it did
	// s3Endpoint is the S3 gateway's URL, "" without one (s3.go).
	s3Endpoint string
	exited     chan string
}

type child struct {
	proc Proc
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start brings the cluster up: locks the data dir, starts every process, waits
// until a master leads and every node is alive, and creates the volume. On
// error every child started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Ready <= 0 {
		opts.Ready = 60 * time.Second
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, dir: dir, children: map[string]*child{}, exited: make(chan string, 64)}
	if err := checkDataDir(dir); err != nil {
		return nil, err
	}
	if c.lock, err = daemon.LockDir(dir); err != nil {
		if errors.Is(err, daemon.ErrDirInUse) {
			return nil, fmt.Errorf("another cairn up is running on %s (%v)", dir, err)
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.layout, err = c.loadOrCreateLayout(); err != nil {
		return nil, err
	}
	if err := c.checkPorts(); err != nil {
		return nil, err
	}
	var conf *tls.Config
	if !opts.Insecure {
		if err := c.ensureCerts(); err != nil {
			return nil, err
		}
		admin, err := pki.Load(TLSDir(dir, AdminIdentity))
		if err != nil {
			return nil, err
		}
		conf = admin.ClientConfig()
		c.adminTLS = conf
	}
	if c.client, err = masterclient.New(c.layout.MasterAddrs(), conf, nil); err != nil {
		return nil, err
	}
	for _, p := range c.layout.Procs {
		if err := c.startChild(p); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(c.opts.Out, "started %d masters, %d meta nodes, %d data nodes; waiting for them to be ready...\n",
		c.layout.Count("master"), c.layout.Count("meta"), c.layout.Count("data"))
	rctx, cancel := context.WithTimeout(ctx, opts.Ready)
	defer cancel()
	if err := c.waitReady(rctx); err != nil {
		return nil, err
	}
	if opts.Volume != "" {
		if err := c.ensureVolume(rctx, opts.Volume); err != nil {
			return nil, err
		}
		if opts.Mount != "" {
			c.startMount(rctx)
		}
		if opts.S3 {
			c.startS3(rctx)
		}
	}
	return c, nil
}

// mountProc is the name (and dir) of the mount child.
const mountProc = "mount"

// startMount starts the `cairn mount` child and waits until the kernel
// lists the mount; on any failure it warns, stops the child and goes on.
func (c *Cluster) startMount(ctx context.Context) {
	mp, err := filepath.Abs(c.opts.Mount)
	if err == nil {
		err = os.MkdirAll(mp, 0o755)
	}
	if err != nil {
		fmt.Fprintf(c.opts.Out, "warning: not mounting volume %s: %v\n", c.opts.Volume, err)
		return
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fmt.Fprintf(c.opts.Out, "warning: not mounting volume %s on %s: /dev/fuse is not available (%v)\n", c.opts.Volume, mp, err)
		return
	}
	ports, err := loopback.FreePorts(1)
	if err != nil {
		fmt.Fprintf(c.opts.Out, "warning: not mounting volume %s: %v\n", c.opts.Volume, err)
		return
	}
	p := Proc{Name: mountProc, Role: mountProc, MetricsAddr: ports[0]}
	c.mountDir = mp
	if err := c.startChild(p); err != nil {
		fmt.Fprintf(c.opts.Out, "warning: not mounting volume %s on %s: %v\n", c.opts.Volume, mp, err)
		c.mountDir = ""
		return
	}
	ch := c.childrenOf(mountProc)[0]
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, _ := IsMounted(mp); ok {
			c.mounted = true
			return
		}
		select {
		case <-ch.done:
			fmt.Fprintf(c.opts.Out, "warning: mounting volume %s on %s failed; the cluster runs without it:\n%s\n", c.opts.Volume, mp, tail(c.LogPath(p), 5))
			c.mountDir = ""
			return
		case <-ctx.Done():
			stopChild(ch, 10*time.Second)
			fmt.Fprintf(c.opts.Out, "warning: volume %s was not mounted on %s in time; the cluster runs without it:\n%s\n", c.opts.Volume, mp, tail(c.LogPath(p), 5))
			c.mountDir = ""
			return
		case <-tick.C:
		}
	}
}

// MountDir returns where the volume is mounted ("" if it is not).
func (c *Cluster) MountDir() string {
	if !c.mounted {
		return ""
	}
	return c.mountDir
}

// IsMounted reports whether path is a mount point.
func IsMounted(path string) (bool, error) { return mountinfo.Mounted(path) }

// checkDataDir refuses a dir that exists, holds files, and is not a cluster's.
func checkDataDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, LayoutFile)); err == nil {
		return nil
	}
	for _, e := range entries {
		if e.Name() != "LOCK" {
			return fmt.Errorf("data dir %s is not empty and holds no Cairn cluster (no %s); choose another --data-dir", dir, LayoutFile)
		}
	}
	return nil
}

func (c *Cluster) loadOrCreateLayout() (*Layout, error) {
	l, err := LoadLayout(c.dir)
	if err == nil {
		for _, want := range []struct {
			role string
			n    int
		}{{"master", c.opts.Masters}, {"meta", c.opts.Metas}, {"data", c.opts.Datas}} {
			if want.n != 0 && want.n != l.Count(want.role) {
				return nil, fmt.Errorf("the cluster in %s has %d %s processes, not %d; use another --data-dir for a different shape", c.dir, l.Count(want.role), want.role, want.n)
			}
		}
		return l, l.fillDataAddrs(c.dir)
	}
	if !errors.Is(err, ErrNoCluster) {
		return nil, err
	}
	l, err = NewLayout(orDefault(c.opts.Masters, 1), orDefault(c.opts.Metas, 3), orDefault(c.opts.Datas, 3))
	if err != nil {
		return nil, err
	}
	return l, l.Save(c.dir)
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// checkPorts fails early, naming the process, when a port of the layout is taken.
func (c *Cluster) checkPorts() error {
	for _, p := range c.layout.Procs {
		for _, a := range []string{p.Addr, p.MetricsAddr, p.DataAddr} {
			if a == "" {
				continue
			}
			ln, err := net.Listen("tcp", a)
			if err != nil {
				return fmt.Errorf("port %s of %s is in use by another program; stop it or use another --data-dir", a, p.Name)
			}
			ln.Close()
		}
	}
	return nil
}

func (c *Cluster) args(p Proc) []string {
	dir := filepath.Join(c.dir, p.Name)
	nodeTLS, adminTLS := []string{"--tls-dir", TLSDir(c.dir, NodeIdentity)}, []string{"--tls-dir", TLSDir(c.dir, AdminIdentity)}
	s3TLS := []string{"--tls-dir", TLSDir(c.dir, S3Identity)}
	if c.opts.Insecure {
		nodeTLS, adminTLS, s3TLS = []string{"--insecure"}, []string{"--insecure"}, []string{"--insecure"}
	}
	common := append([]string{"--data-dir", dir, "--metrics-addr", p.MetricsAddr, "--log-level", c.opts.LogLevel}, nodeTLS...)
	var pprof []string
	if c.opts.Profiles {
		pprof = []string{"--pprof"}
		common = append(common, pprof...)
	}
	switch p.Role {
	case s3Proc:
		return append([]string{"s3", "--master", strings.Join(c.layout.MasterAddrs(), ","), "--volume", c.opts.Volume,
			"--listen", p.Addr, "--mount-dir", filepath.Join(dir, "mnt")}, s3TLS...)
	case mountProc:
		args := append([]string{"mount", "--master", strings.Join(c.layout.MasterAddrs(), ","), "--metrics", p.MetricsAddr}, adminTLS...)
		args = append(args, pprof...)
		// The mount's disk cache lives with the cluster's other state.
		args = append(args, "-o", "cache_dir="+filepath.Join(dir, "cache"))
		if os.Geteuid() == 0 {
			// Mounted by root with default_permissions: every user may use
			// it as the permission bits allow, as with a disk file system.
			args = append(args, "-o", "allow_other")
		}
		return append(args, c.opts.Volume, c.mountDir)
	case "master":
		args := append([]string{"master", "--id", fmt.Sprint(p.ID), "--peers", c.layout.PeersFlag()}, common...)
		if c.opts.DownAfter > 0 {
			args = append(args, "--down-after", c.opts.DownAfter.String())
		}
		if c.opts.OutAfter > 0 {
			args = append(args, "--out-after", c.opts.OutAfter.String())
		}
		return append(args, c.opts.MasterFlags...)
	default:
		args := append([]string{p.Role, "--listen", p.Addr, "--node-id", fmt.Sprint(p.ID), "--master", strings.Join(c.layout.MasterAddrs(), ",")}, common...)
		if p.DataAddr != "" {
			args = append(args, "--data-listen", p.DataAddr)
		}
		if p.Role == "meta" {
			args = append(args, c.opts.MetaFlags...)
		}
		return args
	}
}

// LogPath is where a process's output goes.
func (c *Cluster) LogPath(p Proc) string { return filepath.Join(c.dir, p.Name, "cairn.log") }

// startChild starts p's process; env is added to its environment.
func (c *Cluster) startChild(p Proc, env ...string) error {
	if err := os.MkdirAll(filepath.Join(c.dir, p.Name), 0o755); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	logf, err := os.OpenFile(c.LogPath(p), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", p.Name, err)
	}
	cmd := exec.Command(c.opts.Binary, c.args(p)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: Ctrl-C in the terminal reaches only cairn up, which stops
	// the children in order. Pdeathsig: children die with a killed cairn up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Children read no CAIRN_* settings meant for cairn up itself, except
	// the ones that are about every process (profiling).
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CAIRN_") || strings.HasPrefix(e, "CAIRN_PROFILE_CONTENTION=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	ch := &child{proc: p, cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	c.children[p.Name] = ch
	c.mu.Unlock()
	go func() {
		ch.err = cmd.Wait()
		logf.Close()
		close(ch.done)
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if !stopping {
			select {
			case c.exited <- p.Name:
			default:
			}
		}
	}()
	return nil
}

// Exited delivers the name of a child that ended while the cluster was running.
func (c *Cluster) Exited() <-chan string { return c.exited }

// ExitReason describes how a child ended, with the tail of its log.
func (c *Cluster) ExitReason(name string) string {
	c.mu.Lock()
	ch := c.children[name]
	c.mu.Unlock()
	if ch == nil {
		return "unknown process"
	}
	<-ch.done
	reason := "exited"
	if ch.err != nil {
		reason = ch.err.Error()
	}
	return fmt.Sprintf("%s (%s); log %s:\n%s", reason, name, c.LogPath(ch.proc), tail(c.LogPath(ch.proc), 5))
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, "  "+sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) waitReady(ctx context.Context) error {
	want := c.layout.Count("meta") + c.layout.Count("data")
	last := ""
	for {
		select {
		case name := <-c.exited:
			return fmt.Errorf("%s stopped while the cluster was starting: %s", name, c.ExitReason(name))
		default:
		}
		msg, ready := c.readiness(ctx, want)
		if ready {
			return nil
		}
		if msg != last {
			fmt.Fprintf(c.opts.Out, "  %s\n", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready after %s: %s (logs under %s)", c.opts.Ready, msg, c.dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) readiness(ctx context.Context, want int) (string, bool) {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.client.Status(sctx)
	if err != nil {
		return "waiting for a master leader", false
	}
	alive := 0
	for _, n := range st.Nodes {
		if n.Node.State == pb.NodeState_NODE_STATE_ALIVE && n.LastHeartbeatUnixMs > 0 {
			alive++
		}
	}
	mastersUp := 0
	for _, m := range st.Masters {
		if m.Pid != 0 {
			mastersUp++
		}
	}
	if alive < want || mastersUp < len(c.layout.Masters()) {
		return fmt.Sprintf("%d/%d masters up, %d/%d nodes alive", mastersUp, len(c.layout.Masters()), alive, want), false
	}
	return "all nodes alive", true
}

func (c *Cluster) ensureVolume(ctx context.Context, name string) error {
	req := &pb.CreateVolumeRequest{Name: name}
	if c.opts.VolumeLayout != "" {
		l, err := clustermap.ParseLayout(c.opts.VolumeLayout)
		if err != nil {
			return fmt.Errorf("volume %q: %w", name, err)
		}
		req.DefaultLayout = uint32(l)
	}
	err := c.client.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.CreateVolume(ctx, req, o...)
		return err
	})
	if status.Code(err) == codes.AlreadyExists {
		c.stickRoot(ctx, name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("create volume %q: %w", name, err)
	}
	fmt.Fprintf(c.opts.Out, "created volume %q\n", name)
	return nil
}

// stickRoot gives the root of volume name, if it still has the mode 0777
// every root had before Cairn made them sticky, the mode new roots get
// (1777): cairn up mounts the volume for every user of the host
// (allow_other), and without the sticky bit any of them may remove or
// rename the others' files in the root. A root of any other mode was
// chosen by someone and is left as it is. A failure is a warning: the
// cluster runs either way.
func (c *Cluster) stickRoot(ctx context.Context, name string) {
	warn := func(err error) {
		fmt.Fprintf(c.opts.Out, "warning: volume %q: the mode of its root is left as it is: %v\n", name, err)
	}
	v, err := client.Open(ctx, c.layout.MasterAddrs(), name, &client.Options{TLS: c.adminTLS, RefreshInterval: -1})
	if err != nil {
		warn(err)
		return
	}
	defer v.Close()
	a, err := v.GetAttr(ctx, client.RootIno)
	if errors.Is(err, syscall.ENOENT) {
		return // not made yet: it will be, sticky
	}
	if err != nil {
		warn(err)
		return
	}
	if a.Mode&0o7777 != 0o777 {
		return
	}
	if _, err := v.Setattr(ctx, client.RootIno, client.SetattrIn{Valid: client.SetMode, Mode: 0o1777}); err != nil {
		warn(err)
		return
	}
	fmt.Fprintf(c.opts.Out, "volume %q: its root's mode is now 1777 (sticky: users remove only their own files from it), was 0777\n", name)
}

// Layout returns the cluster's processes.
func (c *Cluster) Layout() *Layout { return c.layout }

// Dir is the absolute data dir.
func (c *Cluster) Dir() string { return c.dir }

// Pid returns a child's process id, or 0.
func (c *Cluster) Pid(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch := c.children[name]; ch != nil && ch.cmd.Process != nil {
		return ch.cmd.Process.Pid
	}
	return 0
}

// Stop stops the nodes, then the masters (so nodes are not marked down while
// the masters still run), each with SIGTERM and SIGKILL after a grace period,
// and releases the data dir. Idempotent.
func (c *Cluster) Stop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	// The mount and the gateway first, while the cluster can still take
	// their last flushes.
	for _, ch := range c.childrenOf(mountProc, s3Proc) {
		stopChild(ch, 15*time.Second)
	}
	if c.mountDir != "" {
		if ok, _ := IsMounted(c.mountDir); ok {
			// A mount child that was killed leaves its mount behind.
			_ = syscall.Unmount(c.mountDir, syscall.MNT_DETACH)
		}
	}
	for _, roles := range [][]string{{"data", "meta"}, {"master"}} {
		var wg sync.WaitGroup
		for _, ch := range c.childrenOf(roles...) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stopChild(ch, 10*time.Second)
			}()
		}
		wg.Wait()
	}
	if c.client != nil {
		c.client.Close()
	}
	c.lock.Unlock()
}

func (c *Cluster) childrenOf(roles ...string) []*child {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*child
	for _, ch := range c.children {
		for _, r := range roles {
			if ch.proc.Role == r {
				out = append(out, ch)
			}
		}
	}
	return out
}

func stopChild(ch *child, grace time.Duration) {
	select {
	case <-ch.done:
		return
	default:
	}
	_ = ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ch.done:
	case <-time.After(grace):
		_ = ch.cmd.Process.Kill()
		<-ch.done
	}
}
