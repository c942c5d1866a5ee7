package client

import (
	"context"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Directory layout attributes are read on the create path, so a client
// remembers them briefly: another client's change of a directory's
// LayoutAttr reaches this one's creates within dirLayoutTTL.
const (
	dirLayoutTTL     = 3 * time.Second
	maxDirLayoutSize = 4096
)

// dirLayouts caches the LayoutAttr of directories new files were created in.
type dirLayouts struct {
	mu sync.Mutex
	m  map[uint64]dirLayout
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

func (d *dirLayouts) forget(dir uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, dir)
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

// layoutFor returns the layout of a new regular file in dir: the
// directory's LayoutAttr, else the volume's default. A volume without a
// chunk index (made before chunked files existed) has only extents.
func (v *Volume) layoutFor(ctx context.Context, op string, dir uint64) (metapb.FileLayout, error) {
	vol := v.current().vol
	if len(vol.GetChunkIndexPartitions()) == 0 {
		return metapb.FileLayout_FILE_LAYOUT_EXTENT, nil
	}
	val, err := v.dirLayoutAttr(ctx, op, dir)
	if err != nil {
		return 0, err
	}
	if val != nil {
		if l, err := clustermap.ParseLayout(string(val)); err == nil {
			return l, nil
		}
	}
	return metapb.FileLayout(vol.GetDefaultLayout()), nil
}
