package handshake

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
)

// step is one event of a gate scenario: a connection from src is admitted
// (finish < 0), or the connection admitted at step finish ends its
// handshake with outcome; close closes the gate.
type step struct {
	src     string // a source prefix, as in "10.0.0.1/32"
	finish  int    // index of the admitting step, or -1
	outcome Outcome
	close   bool

	want        Verdict // of an admission
	wantFinish  bool    // of a finish: still counted?
	wantEvicted []int   // steps whose connections this one evicted
	wantPending int
}

func admit(src string, want Verdict, pending int, evicted ...int) step {
	return step{src: src, finish: -1, want: want, wantPending: pending, wantEvicted: evicted}
}

func finish(i int, o Outcome, counted bool, pending int) step {
	return step{finish: i, outcome: o, wantFinish: counted, wantPending: pending}
}

const (
	a = "10.0.0.1/32"
	b = "10.0.0.2/32"
	c = "10.0.0.3/32"
	d = "2001:db8::/64"
)

// The gate's decisions, step by step (limits: MaxPerSource 2 and
// MaxPending 4 unless the case says otherwise).
func TestGate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lim   Limits
		steps []step
		want  Stats
	}{
		{
			name: "a source past its bound is refused; others are not",
			steps: []step{
				admit(a, Admitted, 1),
				admit(a, Admitted, 2),
				admit(a, RefusedSource, 2),
				admit(b, Admitted, 3),
			},
			want: Stats{Pending: 3, Admitted: 3, RefusedSource: 1},
		},
		{
			name: "a finished handshake frees its source's place",
			steps: []step{
				admit(a, Admitted, 1),
				admit(a, Admitted, 2),
				finish(0, Completed, true, 1),
				admit(a, Admitted, 2),
				finish(1, TimedOut, true, 1),
				finish(3, Failed, true, 0),
				admit(a, Admitted, 1),
			},
			want: Stats{Pending: 1, Admitted: 4, Completed: 1, TimedOut: 1, Failed: 1},
		},
		{
			name: "past the overall bound the busiest source gives up its oldest",
			steps: []step{
				admit(a, Admitted, 1),
				admit(b, Admitted, 2),
				admit(a, Admitted, 3),
				admit(b, Admitted, 4),
				// a and b have 2 each; a had them first.
				admit(c, AdmittedEvicting, 4, 0),
				admit(c, AdmittedEvicting, 4, 1),
				// c is now the only source with 2.
				admit(a, AdmittedEvicting, 4, 4),
				// An evicted handshake that ends is not counted twice.
				finish(0, Completed, false, 4),
				finish(5, Completed, true, 3),
				admit(b, Admitted, 4),
			},
			want: Stats{Pending: 4, Admitted: 8, Evicted: 3, Completed: 1},
		},
		{
			name: "a source with one handshake keeps it while busier ones churn",
			lim:  Limits{MaxPerSource: 3, MaxPending: 5},
			steps: []step{
				admit(c, Admitted, 1), // the authenticated peer
				admit(a, Admitted, 2),
				admit(a, Admitted, 3),
				admit(b, Admitted, 4),
				admit(b, Admitted, 5),
				admit(a, AdmittedEvicting, 5, 1),
				admit(b, AdmittedEvicting, 5, 3),
				admit(a, AdmittedEvicting, 5, 2),
				admit(b, AdmittedEvicting, 5, 4),
				admit(a, AdmittedEvicting, 5, 5),
				admit(b, AdmittedEvicting, 5, 6),
				finish(0, Completed, true, 4),
			},
			want: Stats{Pending: 4, Admitted: 11, Evicted: 6, Completed: 1},
		},
		{
			name: "among sources with as many, the one there longest goes",
			lim:  Limits{MaxPerSource: 2, MaxPending: 3},
			steps: []step{
				admit(a, Admitted, 1),
				admit(b, Admitted, 2),
				admit(c, Admitted, 3),
				admit(d, AdmittedEvicting, 3, 0),
				admit(a, AdmittedEvicting, 3, 1),
				admit(a, AdmittedEvicting, 3, 2),
				// a has 2 now: its own oldest goes.
				admit(b, AdmittedEvicting, 3, 4),
			},
			want: Stats{Pending: 3, Admitted: 7, Evicted: 4},
		},
		{
			name: "an evicted source regains its place",
			steps: []step{
				admit(a, Admitted, 1),
				admit(a, Admitted, 2),
				admit(b, Admitted, 3),
				admit(b, Admitted, 4),
				admit(c, AdmittedEvicting, 4, 0),
				admit(a, AdmittedEvicting, 4, 2),
				admit(a, RefusedSource, 4),
			},
			want: Stats{Pending: 4, Admitted: 6, Evicted: 2, RefusedSource: 1},
		},
		{
			name: "closing evicts everything and refuses later connections",
			steps: []step{
				admit(a, Admitted, 1),
				admit(b, Admitted, 2),
				{close: true, finish: -1, wantEvicted: []int{0, 1}},
				finish(0, Completed, false, 0),
				admit(c, RefusedClosed, 0),
			},
			want: Stats{Admitted: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim
			if lim == (Limits{}) {
				lim = Limits{MaxPerSource: 2, MaxPending: 4}
			}
			g := NewGate(lim)
			tickets := map[int]*Ticket{}
			var evicted []int
			for i, s := range tc.steps {
				evicted = evicted[:0]
				switch {
				case s.close:
					g.Close()
				case s.finish >= 0:
					if got := g.Finish(tickets[s.finish], s.outcome); got != s.wantFinish {
						t.Fatalf("step %d: Finish(step %d) = %v, want %v", i, s.finish, got, s.wantFinish)
					}
				default:
					tk, v := g.Admit(netip.MustParsePrefix(s.src), func() { evicted = append(evicted, i) })
					if v != s.want {
						t.Fatalf("step %d: Admit(%s) = %v, want %v", i, s.src, v, s.want)
					}
					if (tk != nil) != (v == Admitted || v == AdmittedEvicting) {
						t.Fatalf("step %d: verdict %v with ticket %v", i, v, tk)
					}
					tickets[i] = tk
				}
				// The cancels record the step that admitted them.
				got := slices.Clone(evicted)
				slices.Sort(got)
				if !slices.Equal(got, s.wantEvicted) {
					t.Fatalf("step %d: evicted %v, want %v", i, got, s.wantEvicted)
				}
				if p := g.Stats().Pending; p != s.wantPending {
					t.Fatalf("step %d: %d pending, want %d", i, p, s.wantPending)
				}
			}
			if got := g.Stats(); got != tc.want {
				t.Fatalf("stats %+v, want %+v", got, tc.want)
			}
		})
	}
}

// An eviction calls the cancel of the oldest ticket, not the new one's.
func TestGateCancelsTheEvicted(t *testing.T) {
	g := NewGate(Limits{MaxPerSource: 10, MaxPending: 2})
	var called []string
	src := netip.MustParsePrefix(a)
	for _, name := range []string{"first", "second", "third", "fourth"} {
		g.Admit(src, func() { called = append(called, name) })
	}
	if want := []string{"first", "second"}; !slices.Equal(called, want) {
		t.Fatalf("cancelled %v, want %v", called, want)
	}
}

// Under any order of admissions and finishes, the bounds hold.
func TestGateInvariants(t *testing.T) {
	g := NewGate(Limits{MaxPerSource: 3, MaxPending: 7})
	var live []*Ticket
	srcs := []netip.Prefix{netip.MustParsePrefix(a), netip.MustParsePrefix(b), netip.MustParsePrefix(c), netip.MustParsePrefix("2001:db8::/64")}
	x := uint32(1)
	next := func(n int) int { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return int(x % uint32(n)) }
	for i := range 10000 {
		if next(3) == 0 && len(live) > 0 {
			k := next(len(live))
			g.Finish(live[k], Outcome(next(3)))
			live = slices.Delete(live, k, k+1)
		} else if tk, _ := g.Admit(srcs[next(len(srcs))], nil); tk != nil {
			live = append(live, tk)
		}
		g.mu.Lock()
		ok := checkGate(g)
		g.mu.Unlock()
		if !ok {
			t.Fatalf("after %d steps: gate inconsistent: %d pending, top %d, %d sources", i, g.pending, g.top, len(g.sources))
		}
	}
}

// checkGate reports whether g's structures agree and its bounds hold; g.mu
// is held.
func checkGate(g *Gate) bool {
	total, top := 0, 0
	for p, s := range g.sources {
		n := 0
		for t := s.oldest; t != nil; t = t.next {
			if t.src != s || !t.in {
				return false
			}
			n++
		}
		found := false
		for o := g.byCount[s.n].first; o != nil; o = o.next {
			found = found || o == s
		}
		if n != s.n || n == 0 || n > g.limits.MaxPerSource || s.prefix != p || !found {
			return false
		}
		total += n
		top = max(top, n)
	}
	listed := 0
	for n, l := range g.byCount {
		for s := l.first; s != nil; s = s.next {
			if s.n != n || g.sources[s.prefix] != s {
				return false
			}
			listed++
		}
	}
	return total == g.pending && g.pending <= g.limits.MaxPending && top == g.top && listed == len(g.sources)
}

func TestSource(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}, "192.0.2.7/32"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 4000}, "192.0.2.7/32"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 4000}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 4000, Zone: "eth0"}, "fe80::/64"},
		{&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, "invalid Prefix"},
		{nil, "invalid Prefix"},
	} {
		if got := Source(tc.addr).String(); got != tc.want {
			t.Errorf("Source(%v) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)}, true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ECONNABORTED)}, true},
		{&net.OpError{Op: "accept", Err: os.ErrDeadlineExceeded}, true},
		{net.ErrClosed, false},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EBADF)}, false},
		{errors.New("other"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func (v Verdict) String() string {
	return [...]string{"Admitted", "AdmittedEvicting", "RefusedSource", "RefusedClosed"}[v]
}
