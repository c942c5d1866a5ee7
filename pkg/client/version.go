package client

import "github.com/cairnfs/cairn/pkg/metapb"

// Version names one state of a file's content as the metadata stamps it:
// every change of the content sets the file's mtime and ctime, so while
// size, mtime and ctime are the same, so are the bytes. A cache of the
// content made at one Version (the kernel's page cache of a mount) is
// current while the file still has that Version.
type Version struct {
	Size         uint64
	Mtime, Ctime int64 // Unix ns
}

func versionOf(in *metapb.Inode) Version {
	return Version{Size: in.GetSize(), Mtime: in.GetMtimeNs(), Ctime: in.GetCtimeNs()}
}

// Version returns the Version of the file's content this handle knows: the
// one read at open, moved on by each change this handle made (a flush,
// a truncate) whose answer says the file was at the known Version just
// before it (metapb.OpResult.pre). ok is false once a change came after a
// change this handle did not make, or from a server that does not say:
// the handle then no longer knows. Writes not yet flushed are not part of
// it; call it after Flush.
func (f *File) Version() (v Version, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ver, f.verOK
}

// changed moves the known Version by res, the answer to a change this
// handle made to its inode.
func (f *File) changed(res *metapb.OpResult) {
	pre := res.GetPre()
	if pre == nil || (Version{Size: pre.GetSize(), Mtime: pre.GetMtimeNs(), Ctime: pre.GetCtimeNs()}) != f.ver {
		f.verOK = false
	}
	if in := res.GetInode(); in != nil {
		f.ver = versionOf(in)
	}
}

// Before reports whether v is an older Version of a file than w: its ctime
// (then its mtime) is earlier. The file's meta partition stamps the ctime
// of every change, past the one before it (never a client's clock), so of
// two Versions of one file the later is never Before the earlier.
func (v Version) Before(w Version) bool {
	return v.Ctime < w.Ctime || v.Ctime == w.Ctime && v.Mtime < w.Mtime
}
