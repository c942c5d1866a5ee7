// Package handshake bounds the connections of a port whose handshake has
// not finished (the TLS handshake of an RPC port, the TLS handshake and
// mode byte of a data-path port), so that peers that connect and then say
// nothing cannot hold the places, descriptors and goroutines that
// authenticated peers need.
//
// Three bounds hold on every port a Listener serves:
//
//   - time: a handshake that has not finished within Limits.Timeout (3 s)
//     is closed;
//   - per source: at most Limits.MaxPerSource (32) connections of one
//     source address (an IPv4 address, or an IPv6 /64) are in their
//     handshake at once; more from that source are closed at once;
//   - overall: at most Limits.MaxPending (1024) connections are in their
//     handshake at once; one more closes the oldest handshake of the
//     source that has the most going, to make room.
//
// A server's own bound on connections (dataproto's MaxConns, lightrpc's)
// then counts only connections whose handshake finished. An attacker
// without a certificate holds at most MaxPending descriptors, each for at
// most Timeout, and an authenticated peer's new connection is still
// admitted while they are all taken. It is closed before its handshake
// finishes only if no source has more handshakes going than its own (an
// attacker spread over about MaxPending addresses) and every source that
// got there before it has been evicted already: MaxPending newer
// connections within its handshake's few milliseconds.
//
// Gate is the bookkeeping of these bounds, with no clock and no sockets;
// Listener applies it to a net.Listener.
package handshake

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	// DefaultTimeout bounds one handshake. A mutual TLS 1.3 handshake is
	// two round trips and a few milliseconds of signatures; 3 s covers a
	// 300 ms round trip with a lost packet and its first retransmission
	// (1 s), so no real peer is cut off, while a peer that connects and
	// stays silent holds its slot 3 s and not the 10 s it used to.
	DefaultTimeout = 3 * time.Second
	// DefaultMaxPerSource bounds the handshakes of one source at once. A
	// Cairn process opens a handful of connections to a port at a time (a
	// mount one per data node, a node its peers' pools), each handshake
	// over in milliseconds; 32 leaves room for many processes behind one
	// address, while one address alone holds only 32 of MaxPending.
	DefaultMaxPerSource = 32
	// DefaultMaxPending bounds the handshakes of a port at once, whatever
	// their sources: 1024 descriptors and goroutines (tens of MiB at most,
	// with a partial TLS record buffered in each) beside the 4096
	// authenticated connections a server keeps, well inside the
	// descriptor limit of a Cairn process.
	DefaultMaxPending = 1024
)

// Limits are the bounds of a port's handshakes. Zero fields take the
// defaults (WithDefaults).
type Limits struct {
	// Timeout closes a connection whose handshake has not finished this
	// long after it was accepted; default DefaultTimeout.
	Timeout time.Duration
	// MaxPerSource bounds the connections of one source (Source) in their
	// handshake at once; more are closed at once. Default
	// DefaultMaxPerSource.
	MaxPerSource int
	// MaxPending bounds the connections in their handshake at once; one
	// more closes the oldest of the source with the most (Gate.Admit).
	// Default DefaultMaxPending.
	MaxPending int
}

// WithDefaults returns l with its zero (or negative) fields set to the
// defaults.
func (l Limits) WithDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MaxPerSource <= 0 {
		l.MaxPerSource = DefaultMaxPerSource
	}
	if l.MaxPending <= 0 {
		l.MaxPending = DefaultMaxPending
	}
	return l
}

// Source returns the key the per-source bound counts a remote address
// under: the IPv4 address (an IPv4-mapped IPv6 address counts as IPv4), or
// the /64 of an IPv6 address, since one host usually holds a whole /64.
// Addresses that are not IP (a Unix socket, a pipe) share the zero
// prefix.
func Source(a net.Addr) netip.Prefix {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip = a.AddrPort().Addr()
	case *net.UDPAddr:
		ip = a.AddrPort().Addr()
	default:
		if a != nil {
			if ap, err := netip.ParseAddrPort(a.String()); err == nil {
				ip = ap.Addr()
			}
		}
	}
	if !ip.IsValid() {
		return netip.Prefix{}
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// Stats are the counters of a Gate (and of the Listener around it).
type Stats struct {
	// Pending is the number of connections in their handshake now.
	Pending int
	// Admitted counts connections that began their handshake.
	Admitted uint64
	// RefusedSource counts connections closed at once because their
	// source had MaxPerSource handshakes going.
	RefusedSource uint64
	// Evicted counts handshakes closed to make room under MaxPending.
	Evicted uint64
	// Completed, Failed and TimedOut count the handshakes that finished,
	// failed (a bad certificate, a peer that hung up) and ran out of time.
	Completed, Failed, TimedOut uint64
}

// Outcome is how a handshake ended, for Gate.Finish.
type Outcome int

const (
	// Completed: the peer authenticated; its connection goes to the server.
	Completed Outcome = iota
	// Failed: the handshake failed before its deadline.
	Failed
	// TimedOut: the handshake did not finish within Limits.Timeout.
	TimedOut
)

// Ticket is a connection's place in a Gate, from Admit to Finish or its
// eviction.
type Ticket struct {
	src        *source
	cancel     func()
	prev, next *Ticket // in the source's admission order; nil ends
	in         bool    // still counted
}

// source is the handshakes one source has going: its tickets oldest
// first, in the list of the sources with as many (Gate.byCount).
type source struct {
	prefix         netip.Prefix
	n              int
	oldest, newest *Ticket
	prev, next     *source // in byCount[n], longest there first
}

// sourceList is the sources with one count of handshakes going, in the
// order they came to it.
type sourceList struct{ first, last *source }

func (l *sourceList) push(s *source) {
	s.prev, s.next = l.last, nil
	if l.last != nil {
		l.last.next = s
	} else {
		l.first = s
	}
	l.last = s
}

func (l *sourceList) remove(s *source) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.first = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.last = s.prev
	}
	s.prev, s.next = nil, nil
}

// Gate keeps the per-source and overall bounds of a port's handshakes. It
// knows no clock and no socket: the caller admits a connection when it is
// accepted and finishes it when its handshake ends; the gate decides who
// is admitted and whom to evict. Admit and Finish cost O(1) (plus at most
// MaxPerSource steps to find the busiest source). Safe for concurrent use.
// Invariants: Pending <= MaxPending, and no source has more than
// MaxPerSource handshakes counted.
type Gate struct {
	limits Limits

	mu      sync.Mutex
	sources map[netip.Prefix]*source
	byCount []sourceList // [n]: the sources with n handshakes going, 1..MaxPerSource
	top     int          // the highest n with a source, 0 if none
	pending int
	closed  bool
	stats   Stats
}

// NewGate returns an empty gate with limits l (zero fields: defaults).
func NewGate(l Limits) *Gate {
	l = l.WithDefaults()
	return &Gate{limits: l, sources: map[netip.Prefix]*source{}, byCount: make([]sourceList, l.MaxPerSource+1)}
}

// Limits returns the gate's limits, defaults filled in.
func (g *Gate) Limits() Limits { return g.limits }

// Verdict is what Admit decided about a new connection.
type Verdict int

const (
	// Admitted: the connection begins its handshake.
	Admitted Verdict = iota
	// AdmittedEvicting: the connection begins its handshake, and the oldest
	// one was evicted to make room under MaxPending.
	AdmittedEvicting
	// RefusedSource: the connection's source has MaxPerSource handshakes
	// going; the caller closes it at once.
	RefusedSource
	// RefusedClosed: the gate is closed; the caller closes the connection.
	RefusedClosed
)

// Admit counts a new connection from source src and returns its ticket,
// or nil, counting nothing, when the verdict is a refusal: src already has
// MaxPerSource handshakes going, or the gate is closed. When MaxPending
// handshakes are going, one is evicted to make room: the oldest of the
// source with the most going (of those with as many, the one that reached
// that count first), which may be src itself. The evicted handshake stops
// being counted and its cancel (which closes its connection) is called
// before Admit returns, outside the gate's lock. A ticket's cancel is
// called at most once, and never after its Finish.
func (g *Gate) Admit(src netip.Prefix, cancel func()) (*Ticket, Verdict) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, RefusedClosed
	}
	s := g.sources[src]
	if s != nil && s.n >= g.limits.MaxPerSource {
		g.stats.RefusedSource++
		g.mu.Unlock()
		return nil, RefusedSource
	}
	v := Admitted
	var evicted *Ticket
	if g.pending >= g.limits.MaxPending {
		evicted = g.byCount[g.top].first.oldest
		g.remove(evicted)
		g.stats.Evicted++
		v = AdmittedEvicting
		s = g.sources[src] // the eviction may have emptied it
	}
	if s == nil {
		s = &source{prefix: src}
		g.sources[src] = s
	} else {
		g.byCount[s.n].remove(s)
	}
	t := &Ticket{src: s, cancel: cancel, in: true, prev: s.newest}
	if s.newest != nil {
		s.newest.next = t
	} else {
		s.oldest = t
	}
	s.newest = t
	s.n++
	g.byCount[s.n].push(s)
	g.top = max(g.top, s.n)
	g.pending++
	g.stats.Admitted++
	g.mu.Unlock()
	if evicted != nil && evicted.cancel != nil {
		evicted.cancel()
	}
	return t, v
}

// Finish ends t's handshake with outcome o and frees its place. It returns
// false when t was evicted (or the gate closed) first: its connection has
// been or is being closed, and must not be served.
func (g *Gate) Finish(t *Ticket, o Outcome) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !t.in {
		return false
	}
	g.remove(t)
	switch o {
	case Completed:
		g.stats.Completed++
	case TimedOut:
		g.stats.TimedOut++
	default:
		g.stats.Failed++
	}
	return true
}

// remove uncounts t; g.mu is held and t is counted.
func (g *Gate) remove(t *Ticket) {
	s := t.src
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		s.oldest = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		s.newest = t.prev
	}
	t.prev, t.next, t.in = nil, nil, false
	g.pending--
	g.byCount[s.n].remove(s)
	s.n--
	if s.n > 0 {
		g.byCount[s.n].push(s)
	} else {
		delete(g.sources, s.prefix)
	}
	for g.top > 0 && g.byCount[g.top].first == nil {
		g.top--
	}
}

// Close evicts every handshake (calling their cancels) and refuses every
// later Admit.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	var cancels []func()
	for g.top > 0 {
		t := g.byCount[g.top].first.oldest
		g.remove(t)
		if t.cancel != nil {
			cancels = append(cancels, t.cancel)
		}
	}
	g.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// Stats returns the gate's counters.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Pending = g.pending
	return s
}
