//go:build linux

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

const (
	// floodConns is the idle connections the flood keeps open to each
	// port it targets: past the 4,096 a data node serves.
	floodConns = 5000
	// floodSources is the loopback addresses they come from (127.0.0.2
	// on), 50 connections each: past both the per-source bound of
	// handshakes (32) and, together, the overall one (1,024).
	floodSources = 100
	// floodRenew is how soon the flood replaces a connection the server
	// closed.
	floodRenew = time.Second
	// floodOpMax bounds one file's create, write, fsync and read back
	// under the flood: tens of milliseconds with the handshake bounds on
	// the test machine; before them the first file took 10 s of retries.
	floodOpMax = 5 * time.Second
	// floodFor is how long the authenticated load runs under the flood:
	// past the handshake timeout (3 s) twice, so that timed-out and
	// renewed connections are part of it.
	floodFor = 8 * time.Second
)

// TestHandshakeFlood: 5,000 TCP connections that never send a byte, kept
// open (each replaced a second after the server closes it) to a data
// node's data-path port and to a meta node's RPC port, from 100 loopback
// addresses, do not stop authenticated clients: new authenticated
// connections to both ports are served at once (a data-path ping, a
// lightrpc and a gRPC health check), and a client opened during the flood
// writes, fsyncs and reads back files. The authenticated clients connect
// from 127.0.0.1, a source of their own, and hold the fewest handshakes,
// so the overall bound evicts the flood's and not theirs. Before the
// handshake bounds, the
// idle connections took all 4,096 places of the data port and every new
// authenticated connection to it was closed ("TLS handshake: EOF").
func TestHandshakeFlood(t *testing.T) {
	raiseNofile(t, 2*floodConns+2048)
	dir := filepath.Join(t.TempDir(), "flood")
	startUp(t, dir, "--mount", "")
	st := waitLeaders(t, dir)
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	var dataAddr, metaAddr string
	for _, p := range l.Procs {
		if p.Role == "data" && dataAddr == "" {
			dataAddr = p.DataAddr
		}
	}
	for _, n := range st.Nodes {
		if n.Role == "meta" && metaAddr == "" {
			metaAddr = n.Address
		}
	}
	if dataAddr == "" || metaAddr == "" {
		t.Fatalf("no data port or meta node in %+v / %+v", l.Procs, st.Nodes)
	}
	admin := adminTLS(t, dir)
	probes := []struct{ addr, role, proto string }{
		{dataAddr, "data", "data"}, {metaAddr, "meta", "lightrpc"}, {metaAddr, "meta", "grpc"},
	}
	for _, p := range probes {
		if err := probe(p.addr, p.role, p.proto, admin); err != nil {
			t.Fatalf("%s port %s over %s before the flood: %v", p.role, p.addr, p.proto, err)
		}
	}

	floods := []*flood{startFlood(t, dataAddr), startFlood(t, metaAddr)}
	for _, f := range floods {
		f.waitDialed(t)
	}
	t.Logf("flood open: %s", floods[0])

	// New authenticated connections to the flooded ports, one after
	// another, each within the probe's 5 s.
	var wg sync.WaitGroup
	probeErrs := make(chan error, 1000)
	var probed, probeMaxNs atomic.Int64
	stop := time.Now().Add(floodFor)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			for _, p := range probes {
				start := time.Now()
				err := probe(p.addr, p.role, p.proto, admin)
				took := time.Since(start)
				if err != nil {
					probeErrs <- fmt.Errorf("%s port %s over %s after %v: %w", p.role, p.addr, p.proto, took.Round(time.Millisecond), err)
				}
				probed.Add(1)
				if ns := int64(took); ns > probeMaxNs.Load() {
					probeMaxNs.Store(ns)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// A client opened under the flood (so every connection it makes is
	// new) writes and reads back files.
	v := openClient(t, dir)
	files, slowest := 0, time.Duration(0)
	for i := 0; time.Now().Before(stop); i++ {
		start := time.Now()
		err := writeReadBack(v, fmt.Sprintf("flood-%d", i), 128<<10+i)
		took := time.Since(start)
		slowest = max(slowest, took)
		if err == nil && took > floodOpMax {
			err = fmt.Errorf("took %v, more than %v", took.Round(time.Millisecond), floodOpMax)
		}
		if err != nil {
			t.Errorf("file %d under the flood: %v", i, err)
			break
		}
		files++
	}
	wg.Wait()
	close(probeErrs)
	for err := range probeErrs {
		t.Error(err)
	}
	for _, f := range floods {
		f.stop()
	}
	t.Logf("under the flood: %d files written and read back (slowest %v), %d authenticated probes (slowest %v); flood: data %s; meta %s",
		files, slowest.Round(time.Millisecond), probed.Load(), time.Duration(probeMaxNs.Load()).Round(time.Millisecond), floods[0], floods[1])
	if files == 0 || probed.Load() == 0 {
		t.Fatalf("nothing checked under the flood")
	}
	// The flood really was refused and timed out, not served: the server
	// closed its connections.
	for _, f := range floods {
		if f.closedByServer.Load() < floodConns/2 {
			t.Errorf("flood of %s: only %d connections closed by the server", f.addr, f.closedByServer.Load())
		}
	}
}

// writeReadBack creates name in the root of v, writes size bytes, fsyncs,
// and reads them back through a new handle.
func writeReadBack(v *client.Volume, name string, size int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data := fileContent(uint64(size), size)
	a, f, err := v.CreateFile(ctx, client.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := f.Fsync(ctx); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(ctx); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	r, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer r.Close(ctx)
	got := make([]byte, size)
	if n, err := r.ReadAt(got, 0); n != size || !bytes.Equal(got, data) {
		return fmt.Errorf("read back %d of %d bytes (equal %v): %v", n, size, bytes.Equal(got, data), err)
	}
	return nil
}

// flood keeps floodConns idle TCP connections open to addr from
// floodSources loopback addresses; a connection the server closes is
// opened again floodRenew later. Its connections are watched with one
// epoll set, not a goroutine each (the race detector allows 8,128
// goroutines).
type flood struct {
	addr string
	ep   int           // epoll descriptor of the open connections
	due  chan int      // slots to dial
	done chan struct{} // closed by stop
	wg   sync.WaitGroup

	mu      sync.Mutex
	open    map[int32]*os.File // by descriptor
	slotOf  map[int32]int
	dialed  int // slots dialed at least once
	first   []bool
	stopped bool

	opened, closedByServer, dialErrs atomic.Int64
}

// floodDialers dial a flood's connections.
const floodDialers = 16

func startFlood(t *testing.T, addr string) *flood {
	t.Helper()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatalf("epoll: %v", err)
	}
	f := &flood{addr: addr, ep: ep, due: make(chan int, floodConns), done: make(chan struct{}),
		open: map[int32]*os.File{}, slotOf: map[int32]int{}, first: make([]bool, floodConns)}
	for i := range floodConns {
		f.due <- i
	}
	f.wg.Add(floodDialers + 1)
	for range floodDialers {
		go f.dialer()
	}
	go f.watch()
	t.Cleanup(f.stop)
	return f
}

// dialer opens the connections of the slots that are due.
func (f *flood) dialer() {
	defer f.wg.Done()
	for {
		var slot int
		select {
		case <-f.done:
			return
		case slot = <-f.due:
		}
		src := net.IPv4(127, 0, 0, byte(2+slot%floodSources))
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
		c, err := d.Dial("tcp", f.addr)
		var file *os.File
		if err == nil {
			// A descriptor of its own, out of Go's poller, for the epoll set.
			file, err = c.(*net.TCPConn).File()
			c.Close()
		}
		f.mu.Lock()
		if !f.first[slot] {
			f.first[slot] = true
			f.dialed++
		}
		if err != nil || f.stopped {
			f.mu.Unlock()
			if file != nil {
				file.Close()
			}
			if err != nil {
				f.dialErrs.Add(1)
				f.renew(slot)
			}
			continue
		}
		fd := int32(file.Fd())
		f.open[fd], f.slotOf[fd] = file, slot
		f.mu.Unlock()
		f.opened.Add(1)
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: fd}
		if err := unix.EpollCtl(f.ep, unix.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
			panic(fmt.Sprintf("epoll add: %v", err))
		}
	}
}

// watch closes the connections the server closed and renews them.
func (f *flood) watch() {
	defer f.wg.Done()
	events := make([]unix.EpollEvent, 256)
	for {
		select {
		case <-f.done:
			return
		default:
		}
		n, err := unix.EpollWait(f.ep, events, 100)
		if err != nil && err != unix.EINTR {
			panic(fmt.Sprintf("epoll wait: %v", err))
		}
		for _, ev := range events[:max(n, 0)] {
			_ = unix.EpollCtl(f.ep, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
			f.mu.Lock()
			file, slot := f.open[ev.Fd], f.slotOf[ev.Fd]
			delete(f.open, ev.Fd)
			delete(f.slotOf, ev.Fd)
			f.mu.Unlock()
			if file == nil {
				continue
			}
			file.Close()
			f.closedByServer.Add(1)
			f.renew(slot)
		}
	}
}

// renew makes slot due again floodRenew from now.
func (f *flood) renew(slot int) {
	time.AfterFunc(floodRenew, func() {
		select {
		case f.due <- slot: // never full: a slot is in it at most once
		case <-f.done:
		}
	})
}

// waitDialed waits until every slot dialed once.
func (f *flood) waitDialed(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f.mu.Lock()
		n := f.dialed
		f.mu.Unlock()
		if n == floodConns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("flood of %s: not all connections dialed after 20s: %s", f.addr, f)
		}
	}
}

// stop closes every connection and waits for the flood's goroutines.
func (f *flood) stop() {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.stopped = true
	close(f.done)
	f.mu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	for fd, file := range f.open {
		file.Close()
		delete(f.open, fd)
	}
	f.mu.Unlock()
	unix.Close(f.ep)
}

func (f *flood) String() string {
	f.mu.Lock()
	open := len(f.open)
	f.mu.Unlock()
	return fmt.Sprintf("%d open, %d opened, %d closed by the server, %d dial errors", open, f.opened.Load(), f.closedByServer.Load(), f.dialErrs.Load())
}

// raiseNofile raises this process's descriptor limit to at least n, or
// skips the test.
func raiseNofile(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("descriptor limit %d, need %d", lim.Max, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit %d: %v", n, err)
	}
}
