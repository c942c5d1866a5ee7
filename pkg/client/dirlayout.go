package client

import (
	"context"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Directory layout attributes decide the layout of new files. The meta
// partition that creates a file reads its parent's (PathRequest.
// inherit_layout) and remembers one homed elsewhere for a few seconds
// (pkg/metanode, layoutTTL): another client's change of a directory's
// LayoutAttr reaches creates within that time. This client's own change
// must reach its next create at once, so for a while after it (changedFor)
// this client reads the attribute itself and sends the layout it found,
// and remembers attributes it read for dirLayoutTTL.
const (
	dirLayoutTTL     = 3 * time.Second
	maxDirLayoutSize = 4096
	// changedFor outlasts a partition's memory of an attribute read just
	// before this client changed it.
	changedFor = 2 * dirLayoutTTL
)

// dirLayouts caches the LayoutAttr of directories new files were created
// in, and notes the directories whose LayoutAttr this client changed.
type dirLayouts struct {
	mu      sync.Mutex
	m       map[uint64]dirLayout
	changed map[uint64]time.Time // directory -> when this client changed its LayoutAttr
}

type dirLayout struct {
	value []byte // the attribute's value; nil: none
	at    time.Time
}

func (d *dirLayouts) get(dir uint64) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[dir]
	if !ok || time.Since(e.at) > dirLayoutTTL {
		return nil, false
	}
	return e.value, true
}

func (d *dirLayouts) put(dir uint64, value []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= maxDirLayoutSize {
		d.m = map[uint64]dirLayout{}
	}
	d.m[dir] = dirLayout{value: value, at: time.Now()}
}

// bytes estimates the cache's memory (map slot, record and value).
func (d *dirLayouts) bytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := int64(0)
	for _, e := range d.m {
		n += 64 + int64(len(e.value))
	}
	return n
}

// forget drops dir's attribute after this client changed it, and notes
// the change (changedRecently).
func (d *dirLayouts) forget(dir uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, dir)
	now := time.Now()
	for ino, at := range d.changed {
		if now.Sub(at) > changedFor {
			delete(d.changed, ino)
		}
	}
	if d.changed == nil {
		d.changed = map[uint64]time.Time{}
	}
	d.changed[dir] = now
}

// changedRecently reports whether this client changed dir's LayoutAttr
// less than changedFor ago; dir 0: any directory's.
func (d *dirLayouts) changedRecently(dir uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dir != 0 {
		at, ok := d.changed[dir]
		return ok && time.Since(at) <= changedFor
	}
	for _, at := range d.changed {
		if time.Since(at) <= changedFor {
			return true
		}
	}
	return false
}

// dirLayoutAttr returns dir's LayoutAttr (nil if it has none).
func (v *Volume) dirLayoutAttr(ctx context.Context, op string, dir uint64) ([]byte, error) {
	if val, ok := v.layouts.get(dir); ok {
		return val, nil
	}
	in, err := v.getInode(ctx, op, dir)
	if err != nil {
		return nil, err
	}
	val := in.GetXattrs()[LayoutAttr]
	v.layouts.put(dir, val)
	return val, nil
}

// hasLayouts reports whether the volume can hold chunked files, so that
// a new file's layout depends on its directory: a volume without a chunk
// index (made before chunked files existed) has only extents.
func (v *Volume) hasLayouts() bool {
	return len(v.current().vol.GetChunkIndexPartitions()) > 0
}

// layoutOf is the layout a LayoutAttr value names, else the volume's
// default.
func (v *Volume) layoutOf(val []byte) metapb.FileLayout {
	if val != nil {
		if l, err := clustermap.ParseLayout(string(val)); err == nil {
			return l
		}
	}
	return metapb.FileLayout(v.current().vol.GetDefaultLayout())
}
