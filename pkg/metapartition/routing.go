package metapartition

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// routeTable is one routing (metapb.Routing) in canonical form, with the
// hybridindex.Table built from it. It is immutable once built, so that a
// Frozen and the live partition can share it.
type routeTable struct {
	version uint64
	slots   []uint64
	exc     []routeExc // sorted by name, names unique
	table   hybridindex.Table
}

type routeExc struct {
	name string
	kind hybridindex.Kind
	mp   uint64
}

// routing is the partition's replicated routing state (docs/routing.md). A
// nil *routing is a partition that never got SetRouting: it accepts every
// name. Like routeTable it is immutable; SetRouting replaces it whole.
type routing struct {
	self     uint64
	current  *routeTable
	previous *routeTable // nil: no routing change in progress
	sealed   bool        // only with previous
}

// newRouteTable validates m and builds its table.
func newRouteTable(what string, m *metapb.Routing) (*routeTable, error) {
	if m == nil {
		return nil, fmt.Errorf("%s routing missing", what)
	}
	if m.GetVersion() == 0 {
		return nil, fmt.Errorf("%s routing has version 0", what)
	}
	rt := &routeTable{version: m.GetVersion(), slots: slices.Clone(m.GetSlotOwners())}
	et := hybridindex.NewExceptionTable()
	if n := len(m.GetExceptions()); n > hybridindex.MaxEntries {
		return nil, fmt.Errorf("%s routing v%d: %d exceptions, more than %d", what, rt.version, n, hybridindex.MaxEntries)
	}
	for _, e := range m.GetExceptions() {
		name := string(e.GetName())
		if e.GetKind() != uint32(hybridindex.PathWalk) && e.GetKind() != uint32(hybridindex.Override) {
			return nil, fmt.Errorf("%s routing v%d: exception %s has kind %d", what, rt.version, quote(name), e.GetKind())
		}
		if _, dup := et.Get(name); dup {
			return nil, fmt.Errorf("%s routing v%d: exception %s given twice", what, rt.version, quote(name))
		}
		r := hybridindex.Redirect{Kind: hybridindex.Kind(e.GetKind()), MP: e.GetMp()}
		if err := et.Set(name, r); err != nil {
			return nil, fmt.Errorf("%s routing v%d: %w", what, rt.version, err)
		}
		rt.exc = append(rt.exc, routeExc{name: name, kind: r.Kind, mp: r.MP})
	}
	slices.SortFunc(rt.exc, func(a, b routeExc) int { return cmp.Compare(a.name, b.name) })
	rt.table = hybridindex.Table{Slots: rt.slots, Exceptions: et}
	if err := rt.table.Validate(); err != nil {
		return nil, fmt.Errorf("%s routing v%d: %w", what, rt.version, err)
	}
	return rt, nil
}

// newRouting validates a SetRouting and builds the state it describes.
func newRouting(m *metapb.SetRouting) (*routing, error) {
	if m.GetSelf() == 0 {
		return nil, fmt.Errorf("self is partition 0")
	}
	r := &routing{self: m.GetSelf(), sealed: m.GetSealed()}
	var err error
	if r.current, err = newRouteTable("current", m.GetCurrent()); err != nil {
		return nil, err
	}
	if m.GetPrevious() != nil {
		if r.previous, err = newRouteTable("previous", m.GetPrevious()); err != nil {
			return nil, err
		}
		if r.previous.version >= r.current.version {
			return nil, fmt.Errorf("previous routing v%d is not older than current v%d", r.previous.version, r.current.version)
		}
	} else if r.sealed {
		return nil, fmt.Errorf("sealed without a previous routing")
	}
	return r, nil
}

// toProto returns the SetRouting that builds r (for snapshots and tests).
func (r *routing) toProto() *metapb.SetRouting {
	m := &metapb.SetRouting{Self: r.self, Current: r.current.toProto(), Sealed: r.sealed}
	if r.previous != nil {
		m.Previous = r.previous.toProto()
	}
	return m
}

func (rt *routeTable) toProto() *metapb.Routing {
	m := &metapb.Routing{Version: rt.version, SlotOwners: slices.Clone(rt.slots)}
	for _, e := range rt.exc {
		m.Exceptions = append(m.Exceptions, &metapb.RouteException{Name: []byte(e.name), Kind: uint32(e.kind), Mp: e.mp})
	}
	return m
}

func (rt *routeTable) equal(o *routeTable) bool {
	return rt.version == o.version && slices.Equal(rt.slots, o.slots) && slices.Equal(rt.exc, o.exc)
}

// phase orders the states of one routing version: a change in progress
// (previous), sealed, done (no previous). SetRouting of the same version
// only moves forward.
func (r *routing) phase() int {
	switch {
	case r.previous == nil:
		return 2
	case r.sealed:
		return 1
	}
	return 0
}

func (r *routing) owns(rt *routeTable, parent uint64, name string) bool {
	mp, _ := rt.table.Route(parent, name)
	return mp == r.self
}

// check applies the decision table of docs/routing.md to (parent, name):
// OK when the partition serves it, else EWRONGMP or EMOVING. write selects
// the mutation column.
func (r *routing) check(parent uint64, name string, write bool) metapb.Errno {
	if r == nil {
		return metapb.OK
	}
	oc := r.owns(r.current, parent, name)
	if r.previous == nil {
		if oc {
			return metapb.OK
		}
		return metapb.EWRONGMP
	}
	op := r.owns(r.previous, parent, name)
	switch {
	case op && oc:
		return metapb.OK
	case op && r.sealed:
		return metapb.EWRONGMP
	case op && write:
		return metapb.EMOVING // the frozen source copy is read-only
	case op:
		return metapb.OK
	case oc:
		return metapb.EMOVING // not yet (fully) imported here
	}
	return metapb.EWRONGMP
}

// listed reports whether ReadDir lists (parent, name): by previous while a
// change is in progress, by current otherwise.
func (r *routing) listed(parent uint64, name string) bool {
	switch {
	case r == nil:
		return true
	case r.previous != nil:
		return r.owns(r.previous, parent, name)
	}
	return r.owns(r.current, parent, name)
}

// notOwned reports whether the partition holds (parent, name) without
// owning it under the current routing: what a migration copies to the owner
// and later purges. Without a routing every name is owned.
func (r *routing) notOwned(parent uint64, name string) bool {
	return r != nil && !r.owns(r.current, parent, name)
}

func (r *routing) version() uint64 {
	if r == nil {
		return 0
	}
	return r.current.version
}

// RoutingState returns the partition's routing version (0 if it never got a
// routing) and whether a routing change is in progress (a previous routing
// is set). Every Lookup, ReadDir and Scan answer carries both, so that a
// client merging answers of several partitions can tell they disagree.
func (p *Partition) RoutingState() (version uint64, moving bool) {
	return p.routing.version(), p.routing != nil && p.routing.previous != nil
}

// Routing returns the SetRouting that describes the partition's routing
// state (its own id, current and previous routing, sealed), or nil if it
// never got one. Exceptions are sorted by name.
func (p *Partition) Routing() *metapb.SetRouting {
	if p.routing == nil {
		return nil
	}
	return p.routing.toProto()
}

// ---- Operations. ----

// route returns the routing the Txn sees: its own SetRouting if it had
// one, else the partition's.
func (t *txn) route() *routing {
	if t.routingSet {
		return t.routing
	}
	return t.p.routing
}

// checkRoute refuses a dentry mutation the routing does not let this
// partition serve.
func (t *txn) checkRoute(parent uint64, name string) *opError {
	switch e := t.route().check(parent, name, true); e {
	case metapb.OK:
		return nil
	case metapb.EMOVING:
		return fail(e, "%d/%s is moving to another partition (routing v%d)", parent, quote(name), t.route().version())
	default:
		return fail(e, "%d/%s is not on this partition under routing v%d", parent, quote(name), t.route().version())
	}
}

func (t *txn) setRouting(m *metapb.SetRouting) (*metapb.OpResult, *opError) {
	next, err := newRouting(m)
	if err != nil {
		return nil, fail(metapb.EINVAL, "set_routing: %v", err)
	}
	cur := t.route()
	if cur != nil {
		if next.self != cur.self {
			return nil, fail(metapb.EINVAL, "set_routing for partition %d, but this is partition %d", next.self, cur.self)
		}
		switch v, cv := next.current.version, cur.current.version; {
		case v < cv:
			return &metapb.OpResult{}, nil // a late retry of an older change
		case v == cv && !next.current.equal(cur.current):
			return nil, fail(metapb.EINVAL, "set_routing: routing v%d differs from the one in place", v)
		case v == cv && next.phase() <= cur.phase():
			return &metapb.OpResult{}, nil // a retry, or a step backwards
		}
	}
	t.routing, t.routingSet = next, true
	return &metapb.OpResult{}, nil
}

// MaxDentriesPerOp bounds the dentries of one ImportDentries or
// PurgeDentries (E2BIG beyond); it is above the Scan page cap of the meta
// node service, so one page always fits one op.
const MaxDentriesPerOp = 1 << 14

func (t *txn) importDentries(m *metapb.ImportDentries) (*metapb.OpResult, *opError) {
	ds := m.GetDentries()
	if len(ds) > MaxDentriesPerOp {
		return nil, fail(metapb.E2BIG, "%d dentries in one import, more than %d", len(ds), MaxDentriesPerOp)
	}
	r := t.route()
	if r != nil && r.previous == nil {
		// Only a routing change in progress imports: a late import from a
		// deposed master after the switch would overwrite names the
		// partition now serves. (A partition that never got a routing
		// accepts every name, imports included.)
		return nil, fail(metapb.ESTALE, "import outside a routing change")
	}
	for i, pd := range ds {
		d := dentry{parent: pd.GetParent(), name: string(pd.GetName()), ino: pd.GetIno(), typ: pd.GetType()}
		if e, msg := checkName(d.name); e != metapb.OK {
			return nil, fail(e, "dentry %d: %s", i, msg)
		}
		if p := pd.GetPending(); p != nil {
			// A pending name moves pending, as of when it was placed.
			pend, err := t.pendingOf(p)
			if err != nil {
				return nil, fail(err.errno, "dentry %d: %s", i, err.msg)
			}
			pend.Since = p.GetSince()
			d.pend = pend
		}
		if d.parent == 0 || d.ino == 0 || d.ino == d.parent || !validType(d.typ) {
			return nil, fail(metapb.EINVAL, "dentry %d: %d/%s -> %d (%v) is invalid", i, d.parent, quote(d.name), d.ino, d.typ)
		}
		if r != nil && (!r.owns(r.current, d.parent, d.name) || r.owns(r.previous, d.parent, d.name)) {
			// Names the partition serves under the previous routing, or
			// does not get under the target, are not a migration's to set.
			return nil, fail(metapb.ESTALE, "dentry %d: %d/%s does not move to this partition", i, d.parent, quote(d.name))
		}
		// Same contents: a retry, nothing changes; other contents: the
		// source is authoritative while the name is frozen.
		t.putDentry(d, true)
	}
	return &metapb.OpResult{}, nil
}

func (t *txn) purgeDentries(m *metapb.PurgeDentries) (*metapb.OpResult, *opError) {
	keys := m.GetKeys()
	if len(keys) > MaxDentriesPerOp {
		return nil, fail(metapb.E2BIG, "%d keys in one purge, more than %d", len(keys), MaxDentriesPerOp)
	}
	r := t.route()
	for i, k := range keys {
		parent, name := k.GetParent(), string(k.GetName())
		if e, msg := checkName(name); e != metapb.OK {
			return nil, fail(e, "key %d: %s", i, msg)
		}
		if parent == 0 {
			return nil, fail(metapb.EINVAL, "key %d: parent 0", i)
		}
		// Only what is surely someone else's goes: not during a change (the
		// copy may still be the one served), and never an owned name.
		if r == nil || r.previous != nil || !r.notOwned(parent, name) {
			continue
		}
		if d, ok := t.dentry(parent, name); ok {
			t.putDentry(d, false)
		}
	}
	return &metapb.OpResult{}, nil
}

// ---- Queries. ----

// ScanInodes returns up to limit inodes with numbers above after, in
// increasing order, and whether more follow. Extents and chunk lists are
// included only when withExtents is set; xattrs, layout and layout_gen
// always. limit <= 0 returns nothing.
func (p *Partition) ScanInodes(after uint64, limit int, withExtents bool) ([]*metapb.Inode, bool) {
	if limit <= 0 {
		return nil, false
	}
	var out []*metapb.Inode
	more := false
	p.inodes.Ascend(&inode{ino: after}, func(in *inode) bool {
		if in.ino == after {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		m := in.toProto(true)
		if !withExtents {
			m.Extents, m.Chunks = nil, nil
		}
		out = append(out, m)
		return true
	})
	return out, more
}

// ScanDentries returns up to limit dentries after (afterParent, afterName)
// in key order (parent, then name bytes), and whether more follow. Pass
// (0, "") to start and the last key returned to resume. With notOwned it
// returns only dentries the partition holds but does not own under its
// current routing (during a change, current is the target): what a
// migration copies to their owner, and afterwards purges. Without a routing
// every name is owned. limit <= 0 returns nothing.
func (p *Partition) ScanDentries(afterParent uint64, afterName string, limit int, notOwned bool) ([]*metapb.Dentry, bool) {
	if limit <= 0 {
		return nil, false
	}
	if notOwned && p.routing == nil {
		return nil, false
	}
	var out []*metapb.Dentry
	more := false
	p.dentries.Ascend(dentry{parent: afterParent, name: afterName}, func(d dentry) bool {
		if d.parent == afterParent && d.name == afterName {
			return true
		}
		if notOwned && !p.routing.notOwned(d.parent, d.name) {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, d.toProto())
		return true
	})
	return out, more
}

// Route returns the partition the current routing sends (parent, name) to;
// ok is false when the partition never got a routing (it then accepts
// every name, see docs/routing.md).
func (p *Partition) Route(parent uint64, name string) (owner uint64, ok bool) {
	if p.routing == nil {
		return 0, false
	}
	mp, _ := p.routing.current.table.Route(parent, name)
	return mp, true
}

// CheckRoute says whether the partition serves (parent, name) now: OK, or
// EWRONGMP / EMOVING as docs/routing.md's table says; write selects the
// mutation column.
func (p *Partition) CheckRoute(parent uint64, name string, write bool) metapb.Errno {
	return p.routing.check(parent, name, write)
}
