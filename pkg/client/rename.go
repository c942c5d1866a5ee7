package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Rename moves (oldParent, oldName) to (newParent, newName) with the
// semantics and errno order of renameat2(2): flags RenameNoreplace (EEXIST
// if the new name exists) or RenameExchange (swap two existing names,
// ENOENT if the new one is missing); EINVAL for unknown or both flags and
// for moving a directory into its own subtree; ENOTDIR for a directory over
// a non-directory, EISDIR for the reverse, ENOTEMPTY over a non-empty
// directory or onto an ancestor of the source; renaming a name onto another
// name of the same inode does nothing.
//
// Order across partitions: create or replace the new name first, then
// delete the old one (a crash in between leaves one name too many, never
// none); then Link -1 (and Evict at 0) of a replaced inode, the moved
// inode's ctime and, for a directory, its parent pointer, and TouchDir of
// both parents (nlink ±1 for a directory that changes parent). On one
// partition the dentry steps and every record homed there are one Txn. A
// rename within one directory without flags is one request: the old
// name's partition runs these steps itself (PATH_OP_RENAME), unless it
// leaves them to this client.
func (v *Volume) Rename(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags uint32) error {
	const op = "rename"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if flags&^(RenameNoreplace|RenameExchange) != 0 || flags == RenameNoreplace|RenameExchange {
		return errnoErr(op, syscall.EINVAL, "flags %#x", flags)
	}
	if err := checkName(op, oldName); err != nil {
		return err
	}
	if err := checkName(op, newName); err != nil {
		return err
	}
	h := hintsFor(ctx, oldParent, newParent, flags)
	if oldParent == newParent && flags&^RenameNoreplace == 0 {
		// One request: the old name's partition runs it, unless it
		// leaves it to the client (a directory over a directory, for
		// one).
		if done, err := v.renameOnServer(ctx, op, oldParent, oldName, newName, flags); done {
			return err
		}
	}
	if h.src != nil || h.dst != nil {
		err := replanned(ctx, op, func() error { return v.rename(ctx, oldParent, oldName, newParent, newName, flags, h) })
		if !staleHint(err) {
			return err
		}
		// A name was not what the hint said: nothing changed (or the
		// new name was taken back); start over with lookups, which give
		// the exact errno.
	}
	var err error
	for attempt := 0; attempt < renameAttempts; {
		// ESTALE: a name changed between lookup and commit; start over
		// (at once the first times, then after a pause, since names that
		// keep changing are contended: rename(2) has no ESTALE to give).
		// errReplan: the routing changed before the first dentry step
		// applied; start over under the new view.
		err = replanned(ctx, op, func() error {
			return v.rename(ctx, oldParent, oldName, newParent, newName, flags, renameHints{})
		})
		if !isErrno(err, syscall.ESTALE) {
			return err
		}
		if attempt++; attempt >= 3 {
			// Jittered, so that two renames that keep undoing each other
			// fall out of step.
			select {
			case <-ctx.Done():
				return transportErr(op, fmt.Errorf("names kept changing: %w (last attempt: %v)", ctx.Err(), err))
			case <-time.After(renameWait/2 + rand.N(renameWait)):
			}
		}
	}
	return err
}

// A rename starts over at most renameAttempts times when its names keep
// changing under it, after the third time with a pause of renameWait on
// average.
const (
	renameWait     = 20 * time.Millisecond
	renameAttempts = 20
)

// NameHint is what a caller learned of a name just before an operation
// on it, from its own lookup: the inode it names and that inode's type
// (Mode's syscall.S_IFMT bits), or that it names nothing (Absent). A
// mount has one for both names of most renames: the kernel looked them up
// before sending the rename.
type NameHint struct {
	Absent bool
	Ino    uint64
	Mode   uint32
}

type renameHintsKey struct{}

// renameHints are a rename's hints in the form its steps use: the
// dentries the names hold, src never nil, dst nil for a missing name.
type renameHints struct {
	src *metapb.Dentry // nil: look the old name up
	dst *metapb.Dentry // with dstKnown: nil for a missing new name
	// dstKnown: dst is the hint's (else look the new name up).
	dstKnown bool
}

// WithRenameHints returns a context under which Rename takes src and dst
// (either may be nil: unknown) for what its old and new name hold, instead
// of looking them up: a rename within one directory without flags then
// costs its Txns only. Every step of a rename names the inode it expects
// (or that the name is free), so a stale hint cannot make a rename do
// anything else: the step fails, what the rename did is taken back, and it
// starts over with lookups. A hint is only worth giving fresh (a mount
// gives what it answered the kernel's LOOKUP within the entry timeout).
func WithRenameHints(ctx context.Context, src, dst *NameHint) context.Context {
	return context.WithValue(ctx, renameHintsKey{}, [2]*NameHint{src, dst})
}

// hintsFor returns ctx's rename hints that a rename from oldParent to
// newParent with flags may use: a rename within one directory, without
// flags (the ancestor, quota and flag checks of the others read the
// names anyway).
func hintsFor(ctx context.Context, oldParent, newParent uint64, flags uint32) renameHints {
	hs, ok := ctx.Value(renameHintsKey{}).([2]*NameHint)
	if !ok || oldParent != newParent || flags != 0 {
		return renameHints{}
	}
	var h renameHints
	// An absent source needs no hint: the kernel answers ENOENT itself.
	if s := hs[0]; s != nil && !s.Absent && s.Ino != 0 {
		if t, ok := fileType(s.Mode); ok {
			h.src = &metapb.Dentry{Ino: s.Ino, Type: t}
		}
	}
	if d := hs[1]; d != nil {
		if d.Absent {
			h.dstKnown = true
		} else if t, ok := fileType(d.Mode); ok && d.Ino != 0 {
			h.dst, h.dstKnown = &metapb.Dentry{Ino: d.Ino, Type: t}, true
		}
	}
	return h
}

// staleHint reports whether a rename run on hints failed because a name
// was not what a hint said: the source gone or another inode (ENOENT,
// ESTALE), the new name taken (EEXIST), or a type the hint did not tell
// (ENOTDIR, EISDIR, ENOTEMPTY).
func staleHint(err error) bool {
	switch ErrnoOf(err) {
	case syscall.ENOENT, syscall.ESTALE, syscall.EEXIST, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY:
		var e *Error
		return errors.As(err, &e)
	}
	return false
}

// isAncestor reports whether dir is ino or one of ino's ancestors, walking
// ino's parent pointers up to the root.
func (v *Volume) isAncestor(ctx context.Context, dir, ino uint64) (bool, error) {
	for range maxWalkDepth {
		if ino == dir {
			return true, nil
		}
		if ino == RootIno || ino == 0 {
			return false, nil
		}
		in, err := v.getInode(ctx, "rename", ino)
		if err != nil {
			return false, err
		}
		ino = in.GetParent()
	}
	return false, errnoErr("rename", syscall.ELOOP, "directory chain above %d is deeper than %d", ino, maxWalkDepth)
}

func (v *Volume) rename(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags uint32, h renameHints) error {
	const op = "rename"
	// Both names at once, unless hinted. Within one directory, a source
	// that exists shows the directory is one, so a missing target costs
	// no check of its parent.
	var (
		src, dst *metapb.Dentry
		err      error
		dstErr   error
		wg       sync.WaitGroup
	)
	if h.dstKnown {
		dst = h.dst
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst, _, dstErr = v.lookupDentryIn(ctx, op, newParent, newName, oldParent == newParent)
		}()
	}
	if h.src != nil {
		src = h.src
	} else {
		src, _, err = v.lookupDentry(ctx, op, oldParent, oldName)
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if src == nil {
		return errnoErr(op, syscall.ENOENT, "%d/%q", oldParent, oldName)
	}
	if err := dstErr; err != nil {
		return err
	}
	noteChanging(ctx, src.GetIno())
	noteChanging(ctx, dst.GetIno())
	exchange := flags&RenameExchange != 0
	switch {
	case flags&RenameNoreplace != 0 && dst != nil:
		return errnoErr(op, syscall.EEXIST, "%d/%q", newParent, newName)
	case exchange && dst == nil:
		return errnoErr(op, syscall.ENOENT, "%d/%q", newParent, newName)
	}
	srcDir := isDirType(src.GetType())
	dstDir := dst != nil && isDirType(dst.GetType())
	if oldParent != newParent {
		if srcDir {
			if anc, err := v.isAncestor(ctx, src.GetIno(), newParent); err != nil {
				return err
			} else if anc {
				return errnoErr(op, syscall.EINVAL, "directory %d would move into its own subtree", src.GetIno())
			}
		}
		if dstDir {
			if anc, err := v.isAncestor(ctx, dst.GetIno(), oldParent); err != nil {
				return err
			} else if anc {
				if exchange {
					return errnoErr(op, syscall.EINVAL, "directory %d is an ancestor of the source", dst.GetIno())
				}
				return errnoErr(op, syscall.ENOTEMPTY, "directory %d is an ancestor of the source", dst.GetIno())
			}
		}
	}
	if dst != nil && dst.GetIno() == src.GetIno() {
		if h.src != nil || h.dstKnown {
			// Nothing to send that would check the hints: look.
			return errnoErr(op, syscall.ESTALE, "hinted names are one inode")
		}
		return v.sameInode(ctx, op, oldParent, oldName, newParent, newName, src, srcDir)
	}
	if oldParent != newParent {
		if err := v.quotaMove(ctx, src, oldParent, newParent); err != nil {
			return err
		}
		if exchange {
			if err := v.quotaMove(ctx, dst, newParent, oldParent); err != nil {
				return err
			}
		}
	}
	if !exchange && dst != nil {
		switch {
		case srcDir && !dstDir:
			return errnoErr(op, syscall.ENOTDIR, "directory over %d/%q", newParent, newName)
		case !srcDir && dstDir:
			return errnoErr(op, syscall.EISDIR, "%d/%q is a directory", newParent, newName)
		}
	}
	if !exchange && dstDir {
		empty, unfence, err := v.fenceEmpty(ctx, op, newParent, newName, dst.GetIno())
		if err != nil {
			return err
		}
		defer unfence()
		if !empty {
			return errnoErr(op, syscall.ENOTEMPTY, "%d/%q", newParent, newName)
		}
	}
	// A directory that moves changes where the paths below it lead:
	// namespace replicas must forget it before the move commits.
	if srcDir {
		unlock, err := v.nsLock(ctx, op, oldParent, oldName, src.GetIno())
		if err != nil {
			return err
		}
		defer unlock()
	}
	if exchange && dstDir {
		unlock, err := v.nsLock(ctx, op, newParent, newName, dst.GetIno())
		if err != nil {
			return err
		}
		defer unlock()
	}

	w := v.current()
	ps, err := w.route(oldParent, oldName)
	if err != nil {
		return &Error{Op: op, Errno: syscall.EIO, Err: err}
	}
	pd, err := w.route(newParent, newName)
	if err != nil {
		return &Error{Op: op, Errno: syscall.EIO, Err: err}
	}
	srcIno, srcType := src.GetIno(), src.GetType()

	// The dentry steps: first on the new name's partition, then on the old.
	var newOps, oldOps, undoNew []*metapb.Op
	switch {
	case exchange:
		newOps = []*metapb.Op{opDeleteDentry(newParent, newName, dst.GetIno(), 0), opCreateDentry(newParent, newName, srcIno, srcType)}
		oldOps = []*metapb.Op{opDeleteDentry(oldParent, oldName, srcIno, 0), opCreateDentry(oldParent, oldName, dst.GetIno(), dst.GetType())}
		undoNew = []*metapb.Op{opDeleteDentry(newParent, newName, srcIno, 0), opCreateDentry(newParent, newName, dst.GetIno(), dst.GetType())}
	case dst != nil:
		newOps = []*metapb.Op{opReplaceDentry(newParent, newName, srcIno, srcType, dst.GetIno())}
		oldOps = []*metapb.Op{opDeleteDentry(oldParent, oldName, srcIno, 0)}
		undoNew = []*metapb.Op{opReplaceDentry(newParent, newName, dst.GetIno(), dst.GetType(), srcIno)}
	default:
		newOps = []*metapb.Op{opCreateDentry(newParent, newName, srcIno, srcType)}
		oldOps = []*metapb.Op{opDeleteDentry(oldParent, oldName, srcIno, 0)}
		undoNew = []*metapb.Op{opDeleteDentry(newParent, newName, srcIno, 0)}
	}
	if ps.GetId() == pd.GetId() {
		oldOps = append(oldOps[:len(oldOps):len(oldOps)], newOps...)
		if exchange {
			// Both deletes before both creates: the names swap in one Txn.
			oldOps = []*metapb.Op{oldOps[0], newOps[0], oldOps[1], newOps[1]}
		}
		newOps = nil
	}
	var pend *metapb.PendingRename
	if len(newOps) > 0 {
		// Placed ahead of the commit: pending until settled, so that no
		// other operation acts on a name this rename may still take back.
		pend = &metapb.PendingRename{Id: newID()>>1 | 1, FromParent: oldParent, FromName: []byte(oldName)}
		markPending(newOps, undoNew, pend)
		// The commit holds the pending name: it must not wait for another
		// rename's on its old name (EBUSY: take ours back, start over).
		oldOps[0].GetDeleteDentry().Held = true
	}

	// Follow-ups on inode homes, folded into the commit Txn (the old name's
	// partition) when homed there.
	var homed []homedOp
	// An inode renamed to another directory follows it (metapb.Inode.parent):
	// a path-restricted client reaches it only through its parent.
	moved := func(ino, to uint64) *metapb.Op {
		if oldParent != newParent {
			return opSetParent(ino, to)
		}
		return opLink(ino, 0) // ctime = now
	}
	var dOld, dNew int32
	homed = append(homed, homedOp{srcIno, moved(srcIno, newParent)})
	if srcDir && oldParent != newParent {
		dOld, dNew = dOld-1, dNew+1
	}
	var dropIno uint64
	if exchange {
		homed = append(homed, homedOp{dst.GetIno(), moved(dst.GetIno(), oldParent)})
		if dstDir && oldParent != newParent {
			dOld, dNew = dOld+1, dNew-1
		}
	} else if dst != nil {
		links := int32(-1)
		if dstDir {
			links, dNew = -2, dNew-1
		}
		dropIno = dst.GetIno()
		homed = append(homed, homedOp{dropIno, opLink(dropIno, links)})
	}
	if oldParent == newParent {
		homed = append(homed, homedOp{oldParent, opTouchDir(oldParent, dOld+dNew, newID())})
	} else {
		homed = append(homed, homedOp{oldParent, opTouchDir(oldParent, dOld, newID())},
			homedOp{newParent, opTouchDir(newParent, dNew, newID())})
	}

	// The steps on other partitions go with the Txn that commits the old
	// name, as its then steps: the partition sends them (txnThen).
	var res *metapb.TxnResult
	var then []*metapb.OpResult
	if len(newOps) == 0 {
		// One Txn for both names: a routing change before it applied
		// starts the rename over (errReplan).
		ops, rest := fold(w, ps.GetId(), oldOps, homed)
		if res, then, err = v.txnThen(ctx, op, pinned(ps.GetId(), nameKey{oldParent, oldName}, nameKey{newParent, newName}), ops, rest); err != nil {
			return newNameChanged(op, ops, res, err, newParent, newName)
		}
	} else {
		if res, err := v.txn(ctx, op, pinned(pd.GetId(), nameKey{newParent, newName}), newOps...); err != nil {
			return newNameChanged(op, newOps, res, err, newParent, newName)
		}
		// The new name exists: from here on each step follows the routing
		// by itself instead of starting over.
		if res, then, err = v.nameStepThen(ctx, op, oldParent, oldName, oldOps, homed); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Err == nil {
				// Refused: the new name is taken back. Not when the
				// outcome is unknown (the commit may have applied): the
				// new name stays pending for its partition's resolver.
				_, _, uerr := v.nameStep(ctx, op, newParent, newName, undoNew, nil)
				if isErrno(uerr, syscall.ESTALE) {
					// Not pending under this rename any more: after a
					// stall, the partition's resolver rolled the rename
					// forward (the old name is gone because of it).
					if d, _, lerr := v.lookupDentry(ctx, op, newParent, newName); lerr == nil && d.GetIno() == srcIno && d.GetPending() == nil {
						return nil
					}
				}
				if isErrno(err, syscall.EBUSY) {
					// The old name is another rename's pending new name:
					// ours is taken back; start over once that one is
					// settled (the lookups wait for it).
					return &Error{Op: op, Errno: syscall.ESTALE, Msg: fmt.Sprintf("%d/%q is another rename's, not settled yet", oldParent, oldName), Err: err}
				}
			}
			return err
		}
		settle := &metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: &metapb.SettleDentry{
			Parent: newParent, Name: []byte(newName), Ino: srcIno, Id: pend.GetId()}}}
		if _, _, err := v.nameStep(ctx, op, newParent, newName, []*metapb.Op{settle}, nil); err != nil {
			// Renamed all the same: the partition's resolver settles it.
			v.opts.Logger.Warn("renamed name not settled", "parent", newParent, "name", newName, "err", err)
		}
	}
	// Evict a replaced inode that lost its last name, and pass on the
	// parents' new attributes.
	for _, results := range [][]*metapb.OpResult{res.GetResults(), then} {
		for _, r := range results {
			if in := r.GetInode(); in != nil && dropIno != 0 && in.GetIno() == dropIno && in.GetNlink() == 0 {
				v.evict(ctx, op, dropIno)
			}
		}
		noteDir(ctx, oldParent, results)
		if newParent != oldParent {
			noteDir(ctx, newParent, results)
		}
	}
	return nil
}

// sameInode answers a rename (without flags or with RENAME_EXCHANGE) whose
// lookups found one inode under both names: rename(2) of a name onto
// itself, or of two names of one inode, does nothing. But the lookups of
// two names ran apart (at once, on two partitions), so they show one inode
// under both also when another rename moved it from the one to the other
// in between; doing nothing then would answer from a state that never was.
// The names held it at once only if the inode has two links or more (a
// file with one link never has two names a lookup can see: a rename's new
// name is pending until its old name is gone; a directory never has two),
// and if looking again, the old name and then the new one, still finds it
// under both. Otherwise the rename starts over (ESTALE) with fresh
// lookups. A file whose names move away and back between the looks (an
// ABA through two other renames of hard links) is not told apart.
func (v *Volume) sameInode(ctx context.Context, op string, oldParent uint64, oldName string, newParent uint64, newName string, src *metapb.Dentry, srcDir bool) error {
	if oldParent == newParent && oldName == newName {
		return nil // one name: one lookup's answer
	}
	changed := errnoErr(op, syscall.ESTALE, "%d/%q and %d/%q named inode %d one after the other", oldParent, oldName, newParent, newName, src.GetIno())
	if srcDir {
		return changed
	}
	in, err := v.getInode(ctx, op, src.GetIno())
	switch {
	case isErrno(err, syscall.ENOENT):
		return changed // evicted since: neither name holds it now
	case err != nil:
		return err
	case in.GetNlink() < 2:
		return changed
	}
	for _, n := range []struct {
		parent uint64
		name   string
	}{{oldParent, oldName}, {newParent, newName}} {
		d, _, err := v.lookupDentry(ctx, op, n.parent, n.name)
		if err != nil {
			return err
		}
		if d.GetIno() != src.GetIno() {
			return changed
		}
	}
	return nil
}

// markPending places the new-name ops of a rename (its create or replace of
// the new name) as pend's pending name, and makes the ops of undo that take
// that name back name pend.
func markPending(ops, undo []*metapb.Op, pend *metapb.PendingRename) {
	for _, o := range ops {
		switch o := o.GetOp().(type) {
		case *metapb.Op_CreateDentry:
			o.CreateDentry.Pending = pend
		case *metapb.Op_ReplaceDentry:
			o.ReplaceDentry.Pending = pend
		}
	}
	for _, o := range undo {
		switch o := o.GetOp().(type) {
		case *metapb.Op_DeleteDentry:
			o.DeleteDentry.Undo = pend.GetId()
		case *metapb.Op_ReplaceDentry:
			o.ReplaceDentry.Undo = pend.GetId()
		}
	}
}

// newNameChanged returns err, the failure of a rename's Txn of ops, as
// ESTALE when the op that failed is the new name's and says the names are
// not what the lookups found: the new name taken since (a create's EEXIST),
// or another inode or gone (a replace's or delete's ESTALE or ENOENT), or
// the moved inode gone (a create's ENOENT). rename(2) has no such
// answer (without RENAME_NOREPLACE it replaces a name that exists), so the
// rename starts over with lookups, as for an old name that changed.
func newNameChanged(op string, ops []*metapb.Op, res *metapb.TxnResult, err error, parent uint64, name string) error {
	i := int(res.GetFailedOp())
	if res == nil || i < 0 || i >= len(ops) {
		return err
	}
	var changed bool
	switch o := ops[i].GetOp().(type) {
	case *metapb.Op_CreateDentry:
		// EEXIST: the name was taken. ENOENT: the moved inode is gone
		// (the old name was replaced or removed since it was looked up,
		// and the inode evicted), or the new directory is: the fresh
		// lookups of the next attempt give the errno that holds.
		changed = o.CreateDentry.GetParent() == parent && string(o.CreateDentry.GetName()) == name &&
			(isErrno(err, syscall.EEXIST) || isErrno(err, syscall.ENOENT))
	case *metapb.Op_ReplaceDentry:
		changed = o.ReplaceDentry.GetParent() == parent && string(o.ReplaceDentry.GetName()) == name &&
			(isErrno(err, syscall.ESTALE) || isErrno(err, syscall.ENOENT))
	case *metapb.Op_DeleteDentry:
		changed = o.DeleteDentry.GetParent() == parent && string(o.DeleteDentry.GetName()) == name &&
			(isErrno(err, syscall.ESTALE) || isErrno(err, syscall.ENOENT))
	}
	if !changed {
		return err
	}
	return &Error{Op: op, Errno: syscall.ESTALE, Msg: fmt.Sprintf("%d/%q changed since it was looked up", parent, name), Err: err}
}

// renameOnServer asks the partition of the old name to run a rename within
// directory parent (PATH_OP_RENAME; PATH_OP_RENAME_NOREPLACE under flag
// RenameNoreplace): one request, whatever partitions the names route to. done is false when the partition left the rename to the
// client, having changed nothing: EXDEV (a directory over a directory, a
// sticky check it cannot make there, a name that changed meanwhile), EBUSY
// (another operation holds the directory being renamed; the client's
// protocol waits longer) or EINVAL (a node of an earlier version, which
// does not know the operation; the names were checked here).
func (v *Volume) renameOnServer(ctx context.Context, op string, parent uint64, oldName, newName string, flags uint32) (done bool, err error) {
	pop := metapb.PathOp_PATH_OP_RENAME
	if flags&RenameNoreplace != 0 {
		pop = metapb.PathOp_PATH_OP_RENAME_NOREPLACE
	}
	req := &metapb.PathRequest{Op: pop, NewName: []byte(newName), RequestId: newID(), OpId: newID()}
	v.keepOpen(req)
	resp, err := v.nameReq(ctx, op, parent, oldName, req)
	if err != nil {
		return true, err
	}
	return v.renameAnswer(ctx, op, parent, req, resp)
}

// renameAnswer reads the answer to a rename a partition ran
// (renameOnServer, RenamePath) and sends what it reported undone: the
// replaced inode's Link -1 (and Evict at 0), the parent's TouchDir.
func (v *Volume) renameAnswer(ctx context.Context, op string, parent uint64, req *metapb.PathRequest, resp *metapb.PathResponse) (done bool, err error) {
	if left, err := v.serverErr(ctx, op, parent, req, resp); left || err != nil {
		return !left, err
	}
	noteChanging(ctx, resp.GetDentry().GetIno())
	if ino := resp.GetReplaced(); ino != 0 {
		noteChanging(ctx, ino)
		v.afterUnlink(ctx, op, req, resp, ino)
	} else if p := resp.GetParent(); !resp.GetParentTouched() && p != 0 {
		_, _ = v.txn(ctx, op, byIno(p), opTouchDir(p, 0, req.OpId))
	}
	if resp.GetParentTouched() {
		noteAttrs(ctx, resp.GetParentAttrs())
	}
	return true, nil
}
