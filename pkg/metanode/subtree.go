package metanode

import (
	"context"
	"time"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/nsreplica"
)

// A path-restricted client (capability.Caps.Subtree) reaches only the
// subtree of one directory, R (Caps.RootIno). Whatever names an inode in a
// request (a directory to look in, list or change, a file to read or
// change) must lie below R: walking the inode's parent pointers
// (metapb.Inode.parent) up must meet R before the volume's root. A file's
// pointer is the directory it was created or last renamed in, so a hard
// link made elsewhere does not open a file to a client of another subtree.
//
// Directories' pointers are read from the namespace replica
// (nsreplica.Replica.ParentOf), which a fence on a directory (its rename
// or removal) invalidates; a pointer the replica lacks is read from the
// directory's home and kept there, under the replica's generation rule.
// Files' pointers are read every time: a file's rename takes no fence.

// maxDepth bounds a walk up: a deeper chain (or a loop a corrupt pointer
// would make) is refused.
const maxDepth = 4096

// within reports whether inode ino lies in the subtree of root (root
// itself included).
func (s *service) within(ctx context.Context, p *partition, root, ino uint64) (bool, error) {
	cur := ino
	for hops := 0; hops < maxDepth; hops++ {
		switch cur {
		case root:
			return true, nil
		case RootIno, 0:
			return false, nil
		}
		up, ok := s.knownParent(p, cur)
		if !ok {
			var err error
			if up, ok, err = s.fetchParent(ctx, p, cur); err != nil || !ok {
				return false, err
			}
		}
		cur = up
	}
	return false, nil
}

// knownParent is ino's parent pointer from this partition's records or
// the namespace replica, without asking anyone.
func (s *service) knownParent(p *partition, ino uint64) (up uint64, ok bool) {
	fenced := false
	p.sm.read(func(mp *metapartition.Partition) {
		if mp.Holds(ino) {
			in, e := mp.GetInode(ino)
			up, ok = in.GetParent(), e == metapb.OK
			// A directory being moved: its pointer is about to change;
			// fetchKept waits for the move to end.
			fenced = ok && mp.Fenced(ino, time.Now().UnixNano())
		}
	})
	if fenced {
		return 0, false
	}
	if !ok {
		up, ok = p.ns.ParentOf(ino)
	}
	return up, ok
}

// fetchParent reads ino's parent pointer from its home (fetchKept). ok
// is false for an inode that does not exist.
func (s *service) fetchParent(ctx context.Context, p *partition, ino uint64) (up uint64, ok bool, err error) {
	in, err := s.fetchKept(ctx, p, ino)
	return in.GetParent(), in != nil, err
}

// dirOf is directory ino's entry (mode and owner): from this partition's
// records, the namespace replica, or its home (fetchKept). ok is false
// when ino is not an existing directory.
func (s *service) dirOf(ctx context.Context, p *partition, ino uint64) (e nsreplica.Entry, ok bool, err error) {
	local := false
	p.sm.read(func(mp *metapartition.Partition) {
		if local = mp.Holds(ino); local {
			in, ge := mp.GetInode(ino)
			if ok = ge == metapb.OK && in.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY; ok {
				e = entryOf(in)
			}
		}
	})
	if local {
		return e, ok, nil
	}
	if e, ok = p.ns.Dir(ino); ok {
		return e, true, nil
	}
	in, err := s.fetchKept(ctx, p, ino)
	if err != nil || in.GetType() != metapb.FileType_FILE_TYPE_DIRECTORY {
		return e, false, err
	}
	return entryOf(in), true, nil
}

// fetchKept reads inode ino from its home, waiting while a coordinator
// holds it (a directory being renamed), and keeps a directory in the
// namespace replica. It returns nil for an inode that does not exist.
func (s *service) fetchKept(ctx context.Context, p *partition, ino uint64) (*metapb.Inode, error) {
	backoff := nsBusyMin
	for {
		gen := p.ns.Gen()
		fctx, cancel := context.WithTimeout(ctx, nsFetchTimeout)
		in, e, err := s.fetchInode(fctx, p, ino)
		cancel()
		switch {
		case err != nil:
			return nil, err
		case e == metapb.OK:
			if in.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY {
				p.ns.PutDir(entryOf(in), in.GetParent(), gen)
			}
			return in, nil
		case e != metapb.EBUSY:
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, nsBusyMax)
	}
}

// inSubtree is nil when the caller of ctx may reach every inode of inos
// (a client without a path restriction may reach all), else the refusal.
func (s *service) inSubtree(ctx context.Context, p *partition, inos ...uint64) *refusal {
	c := capability.FromContext(ctx)
	if !c.Subtree() {
		return nil
	}
	for _, ino := range inos {
		ok, err := s.within(ctx, p, c.RootIno, ino)
		if err != nil {
			return refuse(metapb.EAGAIN, "inode %d: its place in the namespace is unknown: %v", ino, err)
		}
		if !ok {
			return refuse(metapb.EACCES, "inode %d is outside %s, the only subtree this client may use", ino, c.Path)
		}
	}
	return nil
}

// sameParent is the inode an answer about a name in directory parent
// may carry along for the caller of ctx: for a path-restricted client,
// only one whose parent pointer is that directory. Another (a hard link to
// a file of another directory) the client asks for by number, and is
// refused unless it lies in its subtree.
func sameParent(ctx context.Context, parent uint64, in *metapb.Inode) *metapb.Inode {
	if in != nil && in.GetParent() != parent && capability.FromContext(ctx).Subtree() {
		return nil
	}
	return in
}

// movesRoot refuses a Txn of a path-restricted client that moves the
// parent pointer of its subtree's own directory: pointed at a child, it
// would make a loop no walk leaves; the directory is not the client's to
// move (its name lies outside the subtree).
func movesRoot(ctx context.Context, txn *metapb.Txn) *refusal {
	c := capability.FromContext(ctx)
	if !c.Subtree() {
		return nil
	}
	for _, op := range txn.GetOps() {
		if m := op.GetSetattr(); m.GetIno() == c.RootIno && m.GetValid()&uint32(metapb.SetattrValid_SETATTR_PARENT) != 0 {
			return refuse(metapb.EACCES, "the subtree's own directory %s is not this client's to move", c.Path)
		}
	}
	return nil
}

// txnInodes lists the inodes a Txn names: the directories it changes names
// in and the inodes it changes.
func txnInodes(txn *metapb.Txn) []uint64 {
	var out []uint64
	for _, op := range txn.GetOps() {
		switch o := op.GetOp().(type) {
		case *metapb.Op_CreateInode:
			// 0 would make an inode no walk reaches: refused like outside.
			out = append(out, o.CreateInode.GetParent())
		case *metapb.Op_CreateDentry:
			out = append(out, o.CreateDentry.GetParent(), o.CreateDentry.GetIno())
		case *metapb.Op_DeleteDentry:
			out = append(out, o.DeleteDentry.GetParent())
		case *metapb.Op_ReplaceDentry:
			out = append(out, o.ReplaceDentry.GetParent(), o.ReplaceDentry.GetIno())
		case *metapb.Op_SettleDentry:
			out = append(out, o.SettleDentry.GetParent())
		case *metapb.Op_Setattr:
			out = append(out, o.Setattr.GetIno())
			if o.Setattr.GetValid()&uint32(metapb.SetattrValid_SETATTR_PARENT) != 0 {
				out = append(out, o.Setattr.GetParent())
			}
		case *metapb.Op_Link:
			out = append(out, o.Link.GetIno())
		case *metapb.Op_TouchDir:
			out = append(out, o.TouchDir.GetIno())
		case *metapb.Op_Evict:
			out = append(out, o.Evict.GetIno())
		case *metapb.Op_SetXattr:
			out = append(out, o.SetXattr.GetIno())
		case *metapb.Op_RemoveXattr:
			out = append(out, o.RemoveXattr.GetIno())
		case *metapb.Op_AppendExtents:
			out = append(out, o.AppendExtents.GetIno())
		case *metapb.Op_SpliceChunks:
			out = append(out, o.SpliceChunks.GetIno())
		case *metapb.Op_Fence:
			out = append(out, o.Fence.GetParent())
		case *metapb.Op_Unfence:
			out = append(out, o.Unfence.GetParent())
		}
	}
	return out
}
