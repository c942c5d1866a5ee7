package metanode

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// The layout of a new regular file is its parent directory's layout
// attribute, else the volume's default (PathRequest.inherit_layout): the
// partition that creates the file decides, so that a create stays one
// client request. A parent homed here is read at the plan; one homed
// elsewhere is read from its home and remembered for layoutTTL, so that
// another client's change of the attribute reaches creates within that
// time, as the SDK's own cache (pkg/client, dirLayoutTTL) promises.

const (
	layoutTTL = 3 * time.Second
	// maxLayouts bounds the remembered directories (the cache starts
	// over when full).
	maxLayouts = 16384
)

// layoutKey names a directory of a volume.
type layoutKey struct{ volume, ino uint64 }

type layoutEntry struct {
	attr []byte // the attribute's value; nil: none
	at   time.Time
}

// layoutCache remembers layout attributes of directories homed on other
// partitions. The zero value is ready.
type layoutCache struct {
	mu sync.Mutex
	m  map[layoutKey]layoutEntry
}

func (c *layoutCache) get(k layoutKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Since(e.at) > layoutTTL {
		return nil, false
	}
	return e.attr, true
}

func (c *layoutCache) put(k layoutKey, attr []byte, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxLayouts {
		c.m = map[layoutKey]layoutEntry{}
	}
	c.m[k] = layoutEntry{attr: attr, at: at}
}

// parentLayout returns directory dir's layout attribute (nil: none) and
// whether it is known: read here when dir is homed on this partition (a
// missing parent has none; the create's Txn finds it missing), else from
// the cache.
func (s *service) parentLayout(p *partition, mp *metapartition.Partition, dir uint64) ([]byte, bool) {
	if mp.Holds(dir) {
		in, _ := mp.GetInode(dir)
		return in.GetXattrs()[clustermap.LayoutAttr], true
	}
	return s.h.layouts.get(layoutKey{p.volume, dir})
}

// layoutOf is the layout an attribute value names; def says there is
// none (or it is not valid): the volume's default applies.
func layoutOf(attr []byte) (l metapb.FileLayout, def bool) {
	if attr == nil {
		return 0, true
	}
	l, err := clustermap.ParseLayout(string(attr))
	if err != nil {
		return 0, true
	}
	return l, false
}

// fetchLayout reads directory dir's layout attribute from its home (a
// namespace fetch: it waits while a coordinator holds the directory) and
// remembers it. A missing directory is remembered without an attribute:
// the create then fails on its TouchDir.
func (s *service) fetchLayout(ctx context.Context, p *partition, dir uint64) error {
	backoff := nsBusyMin
	for {
		at := time.Now()
		fctx, cancel := context.WithTimeout(ctx, nsFetchTimeout)
		in, e, err := s.fetchInode(fctx, p, dir)
		cancel()
		if err != nil {
			return err
		}
		if e != metapb.EBUSY {
			s.h.layouts.put(layoutKey{p.volume, dir}, in.GetXattrs()[clustermap.LayoutAttr], at)
			return nil
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.DeadlineExceeded, "layout of directory %d: it stays locked: %v", dir, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, nsBusyMax)
	}
}

// defaultLayout is the volume's default layout of new files, from the
// node's copy of the cluster map.
func (s *service) defaultLayout(ctx context.Context, p *partition) (metapb.FileLayout, error) {
	m, err := s.h.peers.clusterMap(ctx)
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "default layout of volume %d: %v", p.volume, err)
	}
	return metapb.FileLayout(m.GetVolumes()[p.volume].GetDefaultLayout()), nil
}
