package client

import (
	"context"
	"syscall"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// layout is the part of an open File that places the file's bytes: where
// they live on the data nodes, how writes are buffered, and how a flush
// point records them in the metadata. File keeps the POSIX part (the size
// this handle sees, the access mode, flush points, write-back errors) and
// calls its layout with File.mu held, so a layout's state needs no lock of
// its own. Each layout is one type in its own file; a new one is a new file
// and an entry in layoutKinds.
type layout interface {
	// readAt fills p with the file's bytes at off, which lies below the
	// handle's size; past the end it returns fewer bytes and io.EOF. The
	// handle's own unflushed writes are part of what it reads.
	readAt(op string, p []byte, off uint64) (int, error)
	// writeAt places p at off. The File has checked the handle, reserved
	// the space the write adds and noted the modification time; the layout
	// grows the size (File.grow) by what it accepted.
	writeAt(op string, p []byte, off uint64) (int, error)
	// flush makes every write accepted so far durable on the data nodes
	// and recorded in the metadata: after it returns nil, an OpenFile
	// anywhere reads them.
	flush(ctx context.Context, op string) error
	// truncated drops what lies at or beyond size from the layout's view
	// (the metadata holds that size already); unflushed writes below size
	// are kept.
	truncated(size uint64)
	// truncate is truncated for a truncate this handle made: the layout
	// may read what the metadata now holds before the next write.
	truncate(ctx context.Context, op string, size uint64) error
	// close releases what the layout holds (readers, buffers); the File
	// has flushed for the last time.
	close()
}

// layoutKinds makes the layout of a file just opened, by the inode's
// layout kind.
var layoutKinds = map[metapb.FileLayout]func(f *File, in *metapb.Inode) (layout, error){
	metapb.FileLayout_FILE_LAYOUT_EXTENT: newExtentLayout,
	metapb.FileLayout_FILE_LAYOUT_CDC:    newChunkLayout,
}

// openLayout makes the layout of f, whose inode is in.
func openLayout(op string, f *File, in *metapb.Inode) (layout, error) {
	mk, ok := layoutKinds[in.GetLayout()]
	if !ok {
		return nil, errnoErr(op, syscall.EIO, "inode %d has layout %v, which this client does not know", in.GetIno(), in.GetLayout())
	}
	l, err := mk(f, in)
	if err != nil {
		return nil, errnoErr(op, syscall.EIO, "inode %d: %v", in.GetIno(), err)
	}
	return l, nil
}
