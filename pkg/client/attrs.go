package client

import (
	"context"

	"github.com/cairnfs/cairn/pkg/metapb"
)

type attrsKey struct{}

// WithAttrs returns a context under which operations pass fn attributes
// the servers answered in their course, before they return: create,
// mkdir, mknod, symlink and unlink those of the parent directory right
// after the change (its new mtime, ctime and link count; not when the
// answer does not carry them: the parent's update was finished by this
// client, or an earlier server version answered), OpenFile those of the
// file it opens. A mount uses them to answer the kernel's next GETATTR of
// that inode without a request.
func WithAttrs(ctx context.Context, fn func(*Attr)) context.Context {
	return context.WithValue(ctx, attrsKey{}, fn)
}

// noteAttrs passes an inode's attributes to ctx's WithAttrs.
func noteAttrs(ctx context.Context, in *metapb.Inode) {
	if in == nil || in.GetIno() == 0 {
		return
	}
	if fn, ok := ctx.Value(attrsKey{}).(func(*Attr)); ok && fn != nil {
		fn(toAttr(in))
	}
}

type changingKey struct{}

// WithChanging returns a context under which rename and rmdir pass fn each
// inode they are about to change other than the parents (the moved or
// exchanged inode, a replaced one, the removed directory), as soon as they
// know it and before they send the change; a retry passes the inodes it
// finds again. A mount uses it to forget what it knows of those inodes
// only, rather than of every inode.
func WithChanging(ctx context.Context, fn func(ino uint64)) context.Context {
	return context.WithValue(ctx, changingKey{}, fn)
}

// noteChanging passes ino to ctx's WithChanging.
func noteChanging(ctx context.Context, ino uint64) {
	if ino == 0 {
		return
	}
	if fn, ok := ctx.Value(changingKey{}).(func(uint64)); ok && fn != nil {
		fn(ino)
	}
}
