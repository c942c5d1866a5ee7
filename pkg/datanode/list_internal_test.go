package datanode

import (
	"errors"
	"testing"

	"github.com/cairnfs/cairn/pkg/extentstore"
)

// A store being reopened (closed, its extents forgotten) must not list
// itself as empty: a peer aligning with it would clear its own marks
// having compared nothing.
func TestListPageOfAClosedStore(t *testing.T) {
	st, err := extentstore.Open(t.TempDir(), extentstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.NewExtent(extentstore.KindLarge)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(id, 0, []byte("bytes")); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	entries, more, err := listPage(st, 0)
	if err != nil || more || len(entries) != 1 || entries[0].ID != id || entries[0].Committed != 5 {
		t.Fatalf("open store: %+v more=%v err=%v", entries, more, err)
	}
	if entries, _, err := listPage(st, id); err != nil || len(entries) != 0 {
		t.Fatalf("after the last extent: %+v, %v", entries, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _, err = listPage(st, 0)
	if !errors.Is(err, extentstore.ErrClosed) {
		t.Fatalf("closed store listed %+v, err %v", entries, err)
	}
}
