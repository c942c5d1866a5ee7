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
