package metapartition

import (
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Dentry ops: CreateDentry, DeleteDentry and ReplaceDentry with the checks
// they share on the parent and the target inode, and the Fence and Unfence
// ops that lock a directory's names.

// checkParent: if the parent's home is this partition, it must be a live
// directory. This closes, for the dentries that share the parent's
// partition, the window after an rmdir has unfenced and evicted the parent
// in which a late create could still add a name under it; for the other
// partitions the service checks the parent.
func (t *txn) checkParent(parent uint64) *opError {
	if !t.isLocal(parent) {
		return nil
	}
	in := t.inode(parent)
	switch {
	case in == nil || in.nlink == 0:
		return fail(metapb.ENOENT, "parent %d does not exist", parent)
	case in.typ() != metapb.FileType_FILE_TYPE_DIRECTORY:
		return fail(metapb.ENOTDIR, "parent %d is a %v", parent, in.typ())
	}
	return nil
}

// checkTarget verifies what this partition can know about the inode a new
// or replaced dentry points to. If the inode's home is here it must exist,
// have links (a name for an unlinked inode is how link(2) to a deleted file
// fails: ENOENT) and be of the dentry's type. A remote inode is the
// service's to check.
func (t *txn) checkTarget(ino uint64, typ metapb.FileType) *opError {
	in := t.inode(ino)
	if in == nil {
		if t.isLocal(ino) {
			return fail(metapb.ENOENT, "inode %d does not exist", ino)
		}
		return nil
	}
	if in.typ() != typ {
		return fail(metapb.EINVAL, "dentry type %v differs from inode %d's type %v", typ, ino, in.typ())
	}
	if in.nlink == 0 {
		return fail(metapb.ENOENT, "inode %d has no links", ino)
	}
	return nil
}

// dentryArgs checks what CreateDentry and ReplaceDentry share: the parent and
// inode references (ino 0: the Txn's created inode), the name and the type.
func (t *txn) dentryArgs(rawParent uint64, rawName []byte, typ metapb.FileType, rawIno uint64) (parent uint64, name string, ino uint64, _ *opError) {
	parent, err := t.ref("parent", rawParent)
	if err != nil {
		return 0, "", 0, err
	}
	name = string(rawName)
	if e, msg := checkName(name); e != metapb.OK {
		return 0, "", 0, fail(e, "%s", msg)
	}
	if !validType(typ) {
		return 0, "", 0, fail(metapb.EINVAL, "invalid file type %d", typ)
	}
	if ino, err = t.ref("ino", rawIno); err != nil {
		return 0, "", 0, err
	}
	if ino == parent {
		return 0, "", 0, fail(metapb.EINVAL, "dentry %d/%s would point at its own parent", parent, quote(name))
	}
	return parent, name, ino, nil
}

func (t *txn) createDentry(m *metapb.CreateDentry) (*metapb.OpResult, *opError) {
	typ := m.GetType()
	parent, name, ino, err := t.dentryArgs(m.GetParent(), m.GetName(), typ, m.GetIno())
	if err != nil {
		return nil, err
	}
	if err := t.checkRoute(parent, name); err != nil {
		return nil, err
	}
	if f := t.fenceOf(parent); f != 0 && f&lockBit == 0 {
		return nil, fail(metapb.ENOENT, "parent %d is fenced (being removed)", parent)
	}
	if err := t.checkParent(parent); err != nil {
		return nil, err
	}
	if cur, ok := t.dentry(parent, name); ok {
		if err := pendingFor(cur, 0); err != nil {
			return nil, err
		}
		return nil, fail(metapb.EEXIST, "%d/%s exists", parent, quote(name))
	}
	if err := t.checkTarget(ino, typ); err != nil {
		return nil, err
	}
	pend, err := t.pendingOf(m.GetPending())
	if err != nil {
		return nil, err
	}
	d := dentry{parent: parent, name: name, ino: ino, typ: typ, pend: pend}
	t.putDentry(d, true)
	return &metapb.OpResult{Dentry: d.toProto()}, nil
}

// pendingFor checks that an op of rename undo (0: of no rename) may change
// or take name d: EMOVING while d is another rename's pending new name (the
// caller waits for it to settle or be taken back), ESTALE when an undo
// finds d not pending under its rename (settled since, or not its own).
func pendingFor(d dentry, undo uint64) *opError {
	switch {
	case undo != 0 && (d.pend == nil || d.pend.GetId() != undo):
		return fail(metapb.ESTALE, "%d/%s is not pending under rename %d", d.parent, quote(d.name), undo)
	case undo == 0 && d.pend != nil:
		return fail(metapb.EMOVING, "%d/%s is the new name of rename %d, not settled yet", d.parent, quote(d.name), d.pend.GetId())
	}
	return nil
}

// pendingOf returns the pending record a rename's placement stores, stamped
// with the Txn's time, or nil for an op that places no pending name.
func (t *txn) pendingOf(m *metapb.PendingRename) (*metapb.PendingRename, *opError) {
	if m == nil {
		return nil, nil
	}
	if m.GetId() == 0 || m.GetFromParent() == 0 {
		return nil, fail(metapb.EINVAL, "pending rename without id or old name")
	}
	if e, msg := checkName(string(m.GetFromName())); e != metapb.OK {
		return nil, fail(e, "pending rename's old name: %s", msg)
	}
	return &metapb.PendingRename{Id: m.GetId(), FromParent: m.GetFromParent(), FromName: []byte(string(m.GetFromName())), Since: t.now}, nil
}

// settleDentry ends rename m.id's pending state of (parent, name) -> ino,
// or hands it to rename m.take_over; anything else there is left as it is
// (a retry, or a rename taken back).
func (t *txn) settleDentry(m *metapb.SettleDentry) (*metapb.OpResult, *opError) {
	d, ok, err := t.named(m.GetParent(), m.GetName())
	if err != nil {
		return nil, err
	}
	if !ok {
		return &metapb.OpResult{}, nil
	}
	if d.pend != nil && d.pend.GetId() == m.GetId() && d.ino == m.GetIno() {
		if to := m.GetTakeOver(); to != 0 {
			pend := proto.Clone(d.pend).(*metapb.PendingRename)
			pend.Id = to
			d.pend = pend
		} else {
			d.pend = nil
		}
		t.putDentry(d, true)
	}
	return &metapb.OpResult{Dentry: d.toProto()}, nil
}

// named checks an op's reference to an existing name (the parent, the
// name, the routing) and returns its dentry, ok false when it is missing.
func (t *txn) named(rawParent uint64, rawName []byte) (dentry, bool, *opError) {
	parent, err := t.ref("parent", rawParent)
	if err != nil {
		return dentry{}, false, err
	}
	name := string(rawName)
	if e, msg := checkName(name); e != metapb.OK {
		return dentry{}, false, fail(e, "%s", msg)
	}
	if err := t.checkRoute(parent, name); err != nil {
		return dentry{}, false, err
	}
	d, ok := t.dentry(parent, name)
	if !ok {
		d = dentry{parent: parent, name: name}
	}
	return d, ok, nil
}

func (t *txn) deleteDentry(m *metapb.DeleteDentry) (*metapb.OpResult, *opError) {
	d, ok, err := t.named(m.GetParent(), m.GetName())
	if err != nil {
		return nil, err
	}
	parent, name := d.parent, d.name
	if !ok {
		return nil, fail(metapb.ENOENT, "%d/%s does not exist", parent, quote(name))
	}
	if err := pendingFor(d, m.GetUndo()); err != nil {
		if m.GetHeld() && err.errno == metapb.EMOVING {
			err.errno = metapb.EBUSY
		}
		return nil, err
	}
	if exp := m.GetExpectIno(); exp != 0 && d.ino != exp {
		return nil, fail(metapb.ESTALE, "%d/%s is inode %d, not %d", parent, quote(name), d.ino, exp)
	}
	if err := checkExpectType(m.GetExpectType(), d); err != nil {
		return nil, err
	}
	t.putDentry(d, false)
	return &metapb.OpResult{Dentry: d.toProto()}, nil
}

// checkExpectType: DIRECTORY asks for a directory (rmdir: ENOTDIR if not);
// any other type asks for a non-directory (unlink: EISDIR if it is one).
// Non-directory types are not told apart, because unlink(2) removes all of
// them alike and its caller does not know which one it is removing.
func checkExpectType(et metapb.FileType, d dentry) *opError {
	if et == metapb.FileType_FILE_TYPE_UNKNOWN {
		return nil
	}
	if !validType(et) {
		return fail(metapb.EINVAL, "invalid expect_type %d", et)
	}
	isDir := d.typ == metapb.FileType_FILE_TYPE_DIRECTORY
	if et == metapb.FileType_FILE_TYPE_DIRECTORY && !isDir {
		return fail(metapb.ENOTDIR, "%d/%s is a %v, not a directory", d.parent, quote(d.name), d.typ)
	}
	if et != metapb.FileType_FILE_TYPE_DIRECTORY && isDir {
		return fail(metapb.EISDIR, "%d/%s is a directory", d.parent, quote(d.name))
	}
	return nil
}

func (t *txn) replaceDentry(m *metapb.ReplaceDentry) (*metapb.OpResult, *opError) {
	typ := m.GetType()
	parent, name, ino, err := t.dentryArgs(m.GetParent(), m.GetName(), typ, m.GetIno())
	if err != nil {
		return nil, err
	}
	if err := t.checkRoute(parent, name); err != nil {
		return nil, err
	}
	old, ok := t.dentry(parent, name)
	if !ok {
		return nil, fail(metapb.ENOENT, "%d/%s does not exist", parent, quote(name))
	}
	if err := pendingFor(old, m.GetUndo()); err != nil {
		return nil, err
	}
	if exp := m.GetExpectIno(); exp != 0 && old.ino != exp {
		return nil, fail(metapb.ESTALE, "%d/%s is inode %d, not %d", parent, quote(name), old.ino, exp)
	}
	// rename(2): a directory replaces only a directory, a non-directory only
	// a non-directory.
	newDir, oldDir := typ == metapb.FileType_FILE_TYPE_DIRECTORY, old.typ == metapb.FileType_FILE_TYPE_DIRECTORY
	if newDir && !oldDir {
		return nil, fail(metapb.ENOTDIR, "directory cannot replace %v %d/%s", old.typ, parent, quote(name))
	}
	if !newDir && oldDir {
		return nil, fail(metapb.EISDIR, "%v cannot replace directory %d/%s", typ, parent, quote(name))
	}
	if err := t.checkTarget(ino, typ); err != nil {
		return nil, err
	}
	pend, err := t.pendingOf(m.GetPending())
	if err != nil {
		return nil, err
	}
	if pend != nil {
		// A rename's placement over a name: the mark says what it
		// replaced, for whichever attempt takes the placement back.
		pend.ReplacedIno, pend.ReplacedType = old.ino, old.typ
	}
	t.putDentry(dentry{parent: parent, name: name, ino: ino, typ: typ, pend: pend}, true)
	return &metapb.OpResult{Dentry: old.toProto()}, nil
}

func (t *txn) fence(m *metapb.Fence) (*metapb.OpResult, *opError) {
	parent, err := t.ref("parent", m.GetParent())
	if err != nil {
		return nil, err
	}
	token := m.GetToken() &^ lockBit
	if token == 0 {
		return nil, fail(metapb.EINVAL, "fence token must be non-zero")
	}
	if m.GetLock() {
		token |= lockBit
	}
	res := &metapb.OpResult{}
	if !m.GetLock() || m.GetRequireEmpty() {
		has := t.hasChildren(parent)
		if has && m.GetRequireEmpty() {
			return nil, fail(metapb.ENOTEMPTY, "parent %d has names here", parent)
		}
		res.HasChildren = &has
	}
	switch cur := t.fenceOf(parent); {
	case cur == token:
		return res, nil // a retry
	case cur != 0 && m.GetTakeover() && TakesOver(token, cur):
		t.putFence(parent, token) // an earlier attempt of the same request
		return res, nil
	case cur != 0:
		return nil, fail(metapb.EBUSY, "parent %d is fenced with another token", parent)
	}
	if t.fenceCount() >= MaxFences {
		return nil, fail(metapb.EAGAIN, "%d fences are in place", MaxFences)
	}
	t.putFence(parent, token)
	return res, nil
}

// hasChildren reports whether the partition, with this Txn's changes,
// lists a name under parent (as Partition.HasChildren does).
func (t *txn) hasChildren(parent uint64) bool {
	for _, c := range t.dentries {
		if c.present && c.d.parent == parent && t.p.routing.listed(parent, c.d.name) {
			return true
		}
	}
	has := false
	t.p.dentries.Ascend(dentry{parent: parent}, func(d dentry) bool {
		if d.parent != parent {
			return false
		}
		if i := t.dentryChange(parent, d.name); i >= 0 && !t.dentries[i].present {
			return true // removed by this Txn
		}
		has = t.p.routing.listed(d.parent, d.name)
		return !has
	})
	return has
}

func (t *txn) unfence(m *metapb.Unfence) (*metapb.OpResult, *opError) {
	parent, err := t.ref("parent", m.GetParent())
	if err != nil {
		return nil, err
	}
	token := m.GetToken() &^ lockBit
	if token == 0 {
		return nil, fail(metapb.EINVAL, "fence token must be non-zero")
	}
	switch cur := t.fenceOf(parent); {
	case cur == 0:
		return &metapb.OpResult{}, nil // a retry, or never fenced here
	case cur&^lockBit != token:
		return nil, fail(metapb.EINVAL, "parent %d is fenced with another token", parent)
	}
	t.putFence(parent, 0)
	return &metapb.OpResult{}, nil
}

// TakeoverToken is the token of an attempt of the request with id-derived
// bits req (the low 31 bits are used) ordered by order (a Raft term; the
// low 32 bits are used), for a Fence with takeover set. It is never 0.
func TakeoverToken(req, order uint64) uint64 {
	if t := (req&(1<<31-1))<<32 | order&(1<<32-1); t != 0 {
		return t
	}
	return 1
}

// TakesOver reports whether a takeover fence with token may replace a
// fence holding cur: both are fences or both namespace locks (the top
// bit), both name the same request, and token orders its attempt after
// cur's.
func TakesOver(token, cur uint64) bool {
	const order = 1<<32 - 1
	return token&^order == cur&^order && token&order > cur&order
}
