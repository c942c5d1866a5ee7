package datanode

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/extentstore"
)

// list answers a page of the partition's extents (OpListExtents) for a
// peer's alignment: refused while this replica is being rebuilt or its
// store reopened, whose lists would lack extents the peer must not
// delete or stop comparing.
func (s *session) list(in *dataproto.Inbound) {
	r := s.begin(in)
	p, _, _, ok := s.target(r, false)
	if !ok {
		return
	}
	if p.rebuilding.Load() {
		r.fail(dataproto.CodeNotHeld, "partition %d is being rebuilt on node %d", p.id, s.h.env.NodeID)
		return
	}
	// The epoch is read before the extents: an append this node makes
	// with a view older than it is either in the list or, having found
	// the view changed after its local append, forwarded down the newer
	// chain (see forwardAfterAppend). A follower relies on it to report
	// itself in sync (noteSynced).
	rh := dataproto.Header{Epoch: p.view().epoch}
	entries, more, err := listPage(p.st(), in.Header.Arg)
	if err != nil {
		r.fail(dataproto.CodeNotHeld, "partition %d on node %d: %v", p.id, s.h.env.NodeID, err)
		return
	}
	if more {
		rh.Flags = dataproto.FlagMore
	}
	r.ok(rh, dataproto.AppendExtentEntries(make([]byte, 0, len(entries)*dataproto.ExtentEntryLen), entries))
}

// listPage lists the extents of st above id after, at most
// dataproto.MaxExtentEntries of them (more: there are others). A store
// closed meanwhile (its partition reopening it, checkStore) lists none,
// which a peer aligning with this one would take for "no extents here"
// and clear its own marks for: that is an error instead. (The simulation,
// test/sim, found a follower that cleared its marks so, in the instant
// its head reopened its store, and then served bytes an acknowledged
// overwrite had replaced.)
func listPage(st *extentstore.Store, after uint64) (entries []dataproto.ExtentEntry, more bool, err error) {
	exts := st.Extents()
	if err := st.Err(); errors.Is(err, extentstore.ErrClosed) {
		// Close marks the store closed before it forgets its extents.
		return nil, false, fmt.Errorf("the extent store is being reopened: %w", err)
	}
	i := sort.Search(len(exts), func(i int) bool { return exts[i].ID > after })
	page := exts[i:]
	if len(page) > dataproto.MaxExtentEntries {
		page, more = page[:dataproto.MaxExtentEntries], true
	}
	entries = make([]dataproto.ExtentEntry, len(page))
	for i, e := range page {
		entries[i] = dataproto.ExtentEntry{ID: e.ID, Kind: uint8(e.Kind), Size: e.Size, Committed: e.Committed, Punched: e.PunchedBytes}
	}
	return entries, more, nil
}
