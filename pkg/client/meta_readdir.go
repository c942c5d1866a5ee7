package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Listing a directory: pages from every partition of the volume, merged,
// read under one routing.

// ReadDir lists up to limit names of directory dir after the name cursor
// ("" from the start), merged by name (byte order) across all meta
// partitions of the volume, which are asked in parallel. Pass the last name
// returned as the next cursor; more reports whether names may follow. The
// cursor stays valid across concurrent changes: names created behind it
// are not returned, removed ones are skipped. "." and ".." are not listed.
// limit <= 0 means 1024; it is capped at 4096.
func (v *Volume) ReadDir(ctx context.Context, dir uint64, cursor string, limit int) (entries []DirEntry, more bool, err error) {
	return v.readDir(ctx, "readdir", dir, cursor, limit, false)
}

// ReadDirPlus is ReadDir with each entry's attributes (Attr). Inodes homed
// on another partition than their name are fetched from their homes in
// parallel; a name whose inode vanished meanwhile (a racing unlink) is left
// out, and one whose inode this client may not read (a hard link to a file
// outside a path-restricted client's subtree) is listed without Attr.
func (v *Volume) ReadDirPlus(ctx context.Context, dir uint64, cursor string, limit int) (entries []DirEntry, more bool, err error) {
	return v.readDir(ctx, "readdirplus", dir, cursor, limit, true)
}

func (v *Volume) readDir(ctx context.Context, op string, dir uint64, cursor string, limit int, plus bool) ([]DirEntry, bool, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if limit <= 0 {
		limit = 1024
	}
	limit = min(limit, 4096)
	if cursor == "" {
		if err := v.checkDir(ctx, op, dir); err != nil {
			return nil, false, err
		}
	}
	resps, _, err := v.dirPage(ctx, op, dir, cursor, limit, plus)
	if err != nil {
		return nil, false, err
	}
	more := false
	var ds []*metapb.Dentry
	inodes := map[uint64]*metapb.Inode{}
	for _, r := range resps {
		more = more || r.GetMore()
		ds = append(ds, r.GetDentries()...)
		for _, in := range r.GetInodes() {
			inodes[in.GetIno()] = in
		}
	}
	slices.SortFunc(ds, func(a, b *metapb.Dentry) int { return strings.Compare(string(a.GetName()), string(b.GetName())) })
	if len(ds) > limit {
		ds, more = ds[:limit], true
	}
	out := make([]DirEntry, len(ds))
	for i, d := range ds {
		out[i] = DirEntry{Name: string(d.GetName()), Ino: d.GetIno(), Type: d.GetType().ModeBits()}
	}
	if !plus {
		return out, more, nil
	}
	// Fetch the inodes homed elsewhere, fanOut at a time.
	sem := make(chan struct{}, fanOut)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	denied := make([]bool, len(out))
	for i := range out {
		if in, ok := inodes[out[i].Ino]; ok {
			out[i].Attr = toAttr(in)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in, err := v.getInode(ctx, op, out[i].Ino)
			switch {
			case err == nil:
				out[i].Attr = toAttr(in)
			case isErrno(err, syscall.EACCES):
				denied[i] = true
			case !isErrno(err, syscall.ENOENT):
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, false, firstErr
	}
	kept := out[:0]
	for i, e := range out {
		if e.Attr != nil || denied[i] {
			kept = append(kept, e)
		}
	}
	return kept, more, nil
}

// dirPage fetches one page of dir (names after cursor, up to limit each)
// from every partition of the view, and returns the responses once they
// agree on the routing (pagesAgree): pages of partitions at different
// points of a routing change could list a moving name twice or not at all.
// Until they agree the map is re-read and the page fetched again, with
// backoff, until ctx ends (ETIMEDOUT). It also returns the view the page
// was read under.
func (v *Volume) dirPage(ctx context.Context, op string, dir uint64, cursor string, limit int, plus bool) ([]*metapb.ReadDirResponse, *view, error) {
	backoff := routeBackoffMin
	for {
		w := v.current()
		parts := w.all()
		resps := make([]*metapb.ReadDirResponse, len(parts))
		err := v.each(parts, func(p *pb.Partition) error {
			i := slices.Index(parts, p)
			return v.do(ctx, op, byID(p.GetId()), func(ctx context.Context, p *pb.Partition) (err error) {
				resps[i], err = v.meta.ReadDir(ctx, p, dir, cursor, uint32(limit), plus)
				if err == nil {
					// EMOVING: a rename's new name in the page, not
					// settled yet; asked again once it is.
					err = routingCheck(resps[i].GetErrno(), p.GetId(), "")
				}
				return err
			})
		})
		if err != nil {
			return nil, nil, err
		}
		why := pagesAgree(w.routing, resps)
		if why == "" {
			return resps, w, nil
		}
		v.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil, nil, transportErr(op, fmt.Errorf("%w (listing of %d: %s)", ctx.Err(), dir, why))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, routeBackoffMax)
	}
}

// pagesAgree returns "" if the pages of one listing were served under one
// routing state, (version, change in progress), not newer than the view's
// routing version viewRouting; else why not. A partition that never got a
// routing (version 0) and lists nothing here takes no part: it holds no
// name that could be moving (a new partition before the master's first
// push).
func pagesAgree(viewRouting uint64, resps []*metapb.ReadDirResponse) string {
	type state struct {
		version uint64
		moving  bool
	}
	var first *state
	for _, r := range resps {
		if e := syscall.Errno(r.GetErrno()); e == errnoWrongMP || e == errnoMoving {
			return fmt.Sprintf("a partition answered errno %d", e)
		}
		if r.GetRoutingVersion() == 0 && len(r.GetDentries()) == 0 {
			continue
		}
		s := state{r.GetRoutingVersion(), r.GetRoutingMoving()}
		switch {
		case first == nil:
			first = &s
		case s != *first:
			return fmt.Sprintf("pages at routing %+v and %+v", *first, s)
		}
	}
	// Pages that agree list by one routing: the previous one while a
	// change is in progress (its version is the target's minus one), else
	// the current one. The view must know every partition of that routing,
	// so it may not be older; during a change the master's map still holds
	// the previous routing until the switch, which the view may have.
	if first == nil {
		return ""
	}
	listedBy := first.version
	if first.moving && listedBy > 0 {
		listedBy--
	}
	if listedBy > viewRouting {
		return fmt.Sprintf("pages at routing %+v, the map at version %d", *first, viewRouting)
	}
	return ""
}
