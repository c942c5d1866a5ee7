package client

import (
	"context"

	"github.com/cairnfs/cairn/pkg/metapb"
)

type dirAttrsKey struct{}

// WithDirAttrs returns a context under which create, mkdir, mknod,
// symlink and unlink call fn with the parent directory's attributes right
// after the change, as the meta partition answered them (its new mtime,
// ctime and link count), before they return. fn is not called when the
// answer does not carry them (the parent's update was finished by this
// client, or an earlier server version answered). A mount uses it to
// answer the kernel's next GETATTR of the directory without a request.
func WithDirAttrs(ctx context.Context, fn func(*Attr)) context.Context {
	return context.WithValue(ctx, dirAttrsKey{}, fn)
}

// noteDirAttrs passes a directory's attributes to ctx's WithDirAttrs.
func noteDirAttrs(ctx context.Context, in *metapb.Inode) {
	if in == nil || in.GetIno() == 0 {
		return
	}
	if fn, ok := ctx.Value(dirAttrsKey{}).(func(*Attr)); ok && fn != nil {
		fn(toAttr(in))
	}
}
