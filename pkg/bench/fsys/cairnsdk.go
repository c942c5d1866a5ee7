package fsys

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/servermetrics"
	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/pki"
)

// What the two backends over the native client SDK (pkg/client) share:
// the target syntax, opening a volume with its checks, the session's
// counters and server metrics, the open-file wrapper and the conversion of
// attributes and errors. cairn.go is the inode-walking backend with a
// client-side directory cache (cairn-cached:), cairnpath.go the stateless
// one over the SDK's path API (cairn:).
//
// Both accept O_DIRECT and ignore it (sdkIgnoredFlags): the SDK has no
// kernel page cache to bypass, and its own write-back buffer still holds
// writes until a flush point (Sync, Close), O_DIRECT or not. A workload with
// direct=true therefore measures the same thing as without on these targets.

// sdkIgnoredFlags are open flags the SDK backends drop before the SDK sees
// them: O_DIRECT (above) and O_CLOEXEC (there is no descriptor).
const sdkIgnoredFlags = syscall.O_DIRECT | syscall.O_CLOEXEC

// cairnTarget is a parsed "MASTER[,MASTER...]/VOLUME[?KEY=VALUE&...]".
type cairnTarget struct {
	masters []string
	volume  string
	params  url.Values
}

// parseCairnTarget parses the part after "scheme:"; params lists the
// query keys the scheme accepts.
func parseCairnTarget(scheme, rest string, params ...string) (cairnTarget, error) {
	usage := scheme + ": want MASTER[,MASTER...]/VOLUME, e.g. " + scheme + ":127.0.0.1:17000/default"
	params = append(params, "tls") // every scheme: the identity's directory
	rest, query, hasQuery := strings.Cut(rest, "?")
	masters, volume, ok := strings.Cut(rest, "/")
	if !ok || masters == "" || volume == "" || strings.Contains(volume, "/") {
		return cairnTarget{}, errors.New(usage)
	}
	t := cairnTarget{volume: volume, params: url.Values{}}
	for _, m := range strings.Split(masters, ",") {
		if _, _, err := net.SplitHostPort(m); err != nil {
			return cairnTarget{}, fmt.Errorf("%s: master %q: %v", scheme, m, err)
		}
		t.masters = append(t.masters, m)
	}
	if hasQuery {
		q, err := url.ParseQuery(query)
		if err != nil {
			return cairnTarget{}, fmt.Errorf("%s: options %q: %v", scheme, query, err)
		}
		for k := range q {
			known := false
			for _, p := range params {
				known = known || p == k
			}
			if !known {
				return cairnTarget{}, fmt.Errorf("%s: unknown option %q (known: %s)", scheme, k, strings.Join(params, ", "))
			}
		}
		t.params = q
	}
	return t, nil
}

// tlsEnv names the TLS identity directory a target without ?tls=DIR uses.
const tlsEnv = "CAIRN_TLS_DIR"

// tlsConfig is the client TLS configuration of the target: the identity in
// its tls option or in $CAIRN_TLS_DIR; nil (plain text, for a cluster run
// with --insecure) when neither names one.
func (t cairnTarget) tlsConfig() (*tls.Config, error) {
	dir := t.params.Get("tls")
	if dir == "" {
		dir = os.Getenv(tlsEnv)
	}
	if dir == "" {
		return nil, nil
	}
	id, err := pki.Load(dir)
	if err != nil {
		return nil, err
	}
	return id.ClientConfig(), nil
}

// cairnOpenTimeout bounds connecting to the masters and reading the map.
const cairnOpenTimeout = 20 * time.Second

// openVolume opens the target's volume through the SDK: it fails at once
// when no master accepts a connection, says so when the volume does not
// exist, and checks that the volume is writable (a probe file is created
// and removed in its root).
func openVolume(ctx context.Context, name string, t cairnTarget) (*client.Volume, error) {
	// Fail fast when no master even accepts a connection (the SDK would
	// retry until its deadline).
	var dialErr error
	reachable := false
	for _, m := range t.masters {
		conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", m)
		if err == nil {
			conn.Close()
			reachable = true
			break
		}
		dialErr = err
	}
	if !reachable {
		return nil, fmt.Errorf("target %s: no master at %s answered: %w", name, strings.Join(t.masters, ","), dialErr)
	}
	conf, err := t.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	octx, cancel := context.WithTimeout(ctx, cairnOpenTimeout)
	defer cancel()
	v, err := client.Open(octx, t.masters, t.volume, &client.Options{TLS: conf})
	if err != nil {
		if client.ErrnoOf(err) == syscall.ENOENT {
			return nil, fmt.Errorf("target %s: volume %q does not exist (create it with: cairn volume create %s)", name, t.volume, t.volume)
		}
		return nil, fmt.Errorf("target %s: open volume %s through the masters at %s (waited up to %s): %w", name, t.volume, strings.Join(t.masters, ","), cairnOpenTimeout, err)
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	probe := fmt.Sprintf(".cairn-bench-probe-%d-%d", os.Getpid(), time.Now().UnixNano())
	if _, err := v.Create(octx, client.RootIno, probe, 0o600, uid, gid); err != nil {
		v.Close()
		return nil, fmt.Errorf("target %s: volume %s is not writable: %w", name, t.volume, err)
	}
	if err := v.Unlink(octx, client.RootIno, probe); err != nil {
		v.Close()
		return nil, fmt.Errorf("target %s: remove probe file %s: %w", name, probe, err)
	}
	return v, nil
}

// openSDK parses a target of scheme (params: the query keys it accepts),
// opens its volume (openVolume) and starts a session described as kind.
func openSDK(ctx context.Context, scheme, rest, kind string, params ...string) (*sdkSession, cairnTarget, error) {
	t, err := parseCairnTarget(scheme, rest, params...)
	if err != nil {
		return nil, t, err
	}
	name := scheme + ":" + rest
	v, err := openVolume(ctx, name, t)
	if err != nil {
		return nil, t, err
	}
	return newSDKSession(name, kind, v, t), t, nil
}

// sdkSession is what both SDK backends hold: the volume, the identity
// files are created with, the count of opens and the reader of the meta
// nodes' metrics.
type sdkSession struct {
	name     string
	kind     string // fs_type in the report
	v        *client.Volume
	masters  []string
	uid, gid uint32
	opens    atomic.Int64
	scraper  *servermetrics.Scraper
}

func newSDKSession(name, kind string, v *client.Volume, t cairnTarget) *sdkSession {
	return &sdkSession{name: name, kind: kind, v: v, masters: t.masters,
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), scraper: metaScraper(v)}
}

// metaAddrsTimeout bounds asking the master for the meta nodes' addresses.
const metaAddrsTimeout = 10 * time.Second

// metaScraper reads the metrics of the volume's meta nodes, asking the
// master for their addresses at every sample.
func metaScraper(v *client.Volume) *servermetrics.Scraper {
	return &servermetrics.Scraper{
		Addrs: func(ctx context.Context) ([]string, error) {
			ctx, cancel := context.WithTimeout(ctx, metaAddrsTimeout)
			defer cancel()
			return v.MetaMetricsAddrs(ctx)
		},
		Timeout: 5 * time.Second,
	}
}

func (s *sdkSession) String() string { return s.name }

// Close ends the session.
func (s *sdkSession) Close() error {
	if err := s.v.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s.name, err)
	}
	return nil
}

// Counters returns the SDK's traffic counters and this session's opens.
func (s *sdkSession) Counters() map[string]int64 {
	st := s.v.Stats()
	return map[string]int64{
		"meta_requests":   st.MetaRequests,
		"opens":           s.opens.Load(),
		"data_sent_bytes": st.BytesToData,
		"data_recv_bytes": st.BytesFromData,
	}
}

// SampleServers reads the metrics of every meta node of the volume.
func (s *sdkSession) SampleServers(ctx context.Context) servermetrics.Sample {
	return s.scraper.Sample(ctx)
}

// Describe names the volume, its masters and the map epoch, for the report.
func (s *sdkSession) Describe() map[string]string {
	return map[string]string{
		"fs_type": s.kind, "volume": s.v.Name(), "masters": strings.Join(s.masters, ","),
		"epoch": strconv.FormatUint(s.v.Epoch(), 10), "meta_partitions": strconv.Itoa(len(s.v.Partitions())),
	}
}

// MetaMetrics reads the metrics of a volume's meta nodes for a target that
// reaches the volume some other way than an SDK session (a posix: target on
// a Cairn mount).
type MetaMetrics struct {
	v       *client.Volume
	scraper *servermetrics.Scraper
}

// SampleServers reads the metrics of every meta node of the volume.
func (m *MetaMetrics) SampleServers(ctx context.Context) servermetrics.Sample {
	return m.scraper.Sample(ctx)
}

// Close releases the connection to the masters.
func (m *MetaMetrics) Close() error { return m.v.Close() }

// CheckMetaMetrics validates "MASTER[,MASTER...]/VOLUME", the volume whose
// meta nodes' metrics OpenMetaMetrics reads.
func CheckMetaMetrics(spec string) error {
	_, err := parseCairnTarget("meta metrics", spec)
	return err
}

// OpenMetaMetrics connects to the masters of "MASTER[,MASTER...]/VOLUME"
// and returns a reader of the metrics of the volume's meta nodes, for a
// target that reaches the volume some other way (a FUSE mount). It checks
// that the volume exists; Close releases it.
func OpenMetaMetrics(ctx context.Context, spec string) (*MetaMetrics, error) {
	t, err := parseCairnTarget("meta metrics", spec)
	if err != nil {
		return nil, err
	}
	conf, err := t.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("meta metrics of %s: %w", spec, err)
	}
	octx, cancel := context.WithTimeout(ctx, cairnOpenTimeout)
	defer cancel()
	v, err := client.Open(octx, t.masters, t.volume, &client.Options{RefreshInterval: -1, TLS: conf})
	if err != nil {
		return nil, fmt.Errorf("meta metrics of %s: %w", spec, err)
	}
	return &MetaMetrics{v: v, scraper: metaScraper(v)}, nil
}

// withErrno returns err if it carries an errno (the SDK's *client.Error
// does), else err wrapped in a *client.Error with the errno a POSIX caller
// would see (ETIMEDOUT for an ended deadline, EIO for a transport failure).
func withErrno(op string, err error) error {
	var en syscall.Errno
	if errors.As(err, &en) {
		return err
	}
	return &client.Error{Op: op, Errno: client.ErrnoOf(err), Err: err}
}

// cerr wraps a client error as the *fs.PathError every backend returns.
func cerr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: withErrno(op, err)}
}

// linkErr wraps a client error of a two-name operation as *os.LinkError.
func linkErr(op, o, n string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: o, New: n, Err: withErrno(op, err)}
}

// statter gives an SDK backend Stat and Lstat from its way of reading a
// name's attributes, following a final symlink or not; errors are the
// backend's (*fs.PathError).
type statter func(op, name string, follow bool) (*client.Attr, error)

// Stat returns the attributes of name, following a final symlink.
func (attr statter) Stat(name string) (fs.FileInfo, error) { return attr.info("stat", name, true) }

// Lstat returns the attributes of name itself.
func (attr statter) Lstat(name string) (fs.FileInfo, error) { return attr.info("lstat", name, false) }

func (attr statter) info(op, name string, follow bool) (fs.FileInfo, error) {
	a, err := attr(op, name, follow)
	if err != nil {
		return nil, err
	}
	return newCairnInfo(name, a), nil
}

// cairnFile is an open file of the SDK with a stream position.
type cairnFile struct {
	v          *client.Volume
	name       string
	ino        uint64
	f          *client.File // nil for a directory
	dir        bool
	appendMode bool
	pos        int64
	closed     bool
}

func (f *cairnFile) data(op string) error {
	switch {
	case f.closed:
		return cerr(op, f.name, fs.ErrClosed)
	case f.dir:
		return cerr(op, f.name, syscall.EISDIR)
	}
	return nil
}

func (f *cairnFile) Read(b []byte) (int, error) {
	if err := f.data("read"); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	n, err := f.f.ReadAt(b, f.pos)
	f.pos += int64(n)
	if err == io.EOF {
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	}
	return n, cerr("read", f.name, err)
}

func (f *cairnFile) ReadAt(b []byte, off int64) (int, error) {
	if err := f.data("read"); err != nil {
		return 0, err
	}
	n, err := f.f.ReadAt(b, off)
	if err == io.EOF {
		return n, io.EOF
	}
	return n, cerr("read", f.name, err)
}

func (f *cairnFile) Write(b []byte) (int, error) {
	if err := f.data("write"); err != nil {
		return 0, err
	}
	n, err := f.f.WriteAt(b, f.pos)
	if f.appendMode {
		f.pos = int64(f.f.Size())
	} else {
		f.pos += int64(n)
	}
	return n, cerr("write", f.name, err)
}

func (f *cairnFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.data("write"); err != nil {
		return 0, err
	}
	if f.appendMode {
		return 0, cerr("write", f.name, errors.New("WriteAt on a file opened with O_APPEND"))
	}
	n, err := f.f.WriteAt(b, off)
	return n, cerr("write", f.name, err)
}

func (f *cairnFile) Seek(off int64, whence int) (int64, error) {
	if err := f.data("seek"); err != nil {
		return 0, err
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.pos
	case io.SeekEnd:
		base = int64(f.f.Size())
	default:
		return 0, cerr("seek", f.name, syscall.EINVAL)
	}
	if base+off < 0 {
		return 0, cerr("seek", f.name, syscall.EINVAL)
	}
	f.pos = base + off
	return f.pos, nil
}

func (f *cairnFile) Sync() error {
	if f.closed {
		return cerr("fsync", f.name, fs.ErrClosed)
	}
	if f.dir {
		return nil
	}
	return cerr("fsync", f.name, f.f.Fsync(context.Background()))
}

func (f *cairnFile) Truncate(size int64) error {
	if err := f.data("truncate"); err != nil {
		return err
	}
	if size < 0 {
		return cerr("truncate", f.name, syscall.EINVAL)
	}
	return cerr("truncate", f.name, f.f.Truncate(context.Background(), uint64(size)))
}

// Stat reads the open inode's attributes (by its handle, not by name).
func (f *cairnFile) Stat() (fs.FileInfo, error) {
	if f.closed {
		return nil, cerr("stat", f.name, fs.ErrClosed)
	}
	a, err := f.v.GetAttr(context.Background(), f.ino)
	if err != nil {
		return nil, cerr("stat", f.name, err)
	}
	if f.f != nil {
		a.Size = max(a.Size, f.f.Size())
	}
	return newCairnInfo(f.name, a), nil
}

func (f *cairnFile) Close() error {
	if f.closed {
		return cerr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	if f.f == nil {
		return nil
	}
	return cerr("close", f.name, f.f.Close(context.Background()))
}

// cairnInfo is an fs.FileInfo from the SDK's attributes.
type cairnInfo struct {
	name string
	a    client.Attr
}

func newCairnInfo(name string, a *client.Attr) *cairnInfo {
	base := name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		base = name[i+1:]
	}
	return &cairnInfo{name: base, a: *a}
}

func (i *cairnInfo) Name() string       { return i.name }
func (i *cairnInfo) Size() int64        { return int64(i.a.Size) }
func (i *cairnInfo) ModTime() time.Time { return i.a.Mtime }
func (i *cairnInfo) IsDir() bool        { return i.a.IsDir() }
func (i *cairnInfo) Sys() any           { return &i.a }
func (i *cairnInfo) Mode() fs.FileMode  { return modeOf(i.a.Mode) }

// modeOf turns st_mode bits into an fs.FileMode.
func modeOf(mode uint32) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	}
	if mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// cairnDirEntry is one name of a listing; Info asks for the attributes
// the way its backend does (by inode, or by path).
type cairnDirEntry struct {
	e    client.DirEntry
	info func(e client.DirEntry) (*client.Attr, error)
}

func (d *cairnDirEntry) Name() string      { return d.e.Name }
func (d *cairnDirEntry) IsDir() bool       { return d.e.Type == syscall.S_IFDIR }
func (d *cairnDirEntry) Type() fs.FileMode { return modeOf(d.e.Type).Type() }
func (d *cairnDirEntry) Info() (fs.FileInfo, error) {
	a, err := d.info(d.e)
	if err != nil {
		return nil, cerr("stat", d.e.Name, err)
	}
	return newCairnInfo(d.e.Name, a), nil
}
