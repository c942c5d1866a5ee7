package fusefs

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/client"
)

// TestKeepPages: an open keeps the kernel's pages of a file only at the
// Version they were recorded at (or a newer record), and none keeps them
// while another open is still making the kernel drop them.
func TestKeepPages(t *testing.T) {
	fs := &FS{pages: map[uint64]client.Version{}, dropping: map[uint64]int{}}
	const ino, node = 7, 7
	v1 := client.Version{Size: 8, Mtime: 10, Ctime: 10}
	v2 := client.Version{Size: 8, Mtime: 20, Ctime: 20}
	var drops int
	fs.dropPagesHook = func(uint64) { drops++ }
	if fs.keepPagesAt(ino, node, v1, true) {
		t.Fatal("the first open kept pages of a file nothing was recorded for")
	}
	if !fs.keepPagesAt(ino, node, v1, true) {
		t.Fatal("an open at the recorded Version dropped the pages")
	}
	var during []bool
	fs.dropPagesHook = func(uint64) {
		drops++
		// Opens that run while the kernel drops the pages: one of the
		// new Version (already recorded) and one of the old.
		during = append(during, fs.keepPagesAt(ino, node, v2, true), fs.keepPagesAt(ino, node, v1, true))
	}
	if fs.keepPagesAt(ino, node, v2, true) {
		t.Fatal("an open of a new Version kept the pages")
	}
	if len(during) != 2 || during[0] || during[1] {
		t.Fatalf("opens while the pages were being dropped kept them: %v", during)
	}
	if fs.pages[ino] != v2 || len(fs.dropping) != 0 {
		t.Fatalf("record %v, dropping %v", fs.pages[ino], fs.dropping)
	}
	fs.dropPagesHook = func(uint64) { drops++ }
	if !fs.keepPagesAt(ino, node, v2, true) || !fs.keepPagesAt(ino, node, v1, true) {
		t.Fatal("opens after the drop, at the record or older, did not keep the pages")
	}
	if fs.pages[ino] != v2 {
		t.Fatalf("an older open moved the record back to %v", fs.pages[ino])
	}
	if fs.keepPagesAt(ino, node, client.Version{}, false) {
		t.Fatal("an open of an unknown Version kept the pages")
	}
	if _, known := fs.pages[ino]; known {
		t.Fatal("an unknown Version left a record")
	}
	if drops != 3 {
		t.Fatalf("%d drops, want one per open that did not keep and did not wait for another's (3)", drops)
	}
}

// TestFlushedPages: a flush moves the record to its new Version only when
// the servers confirmed that nothing else changed the file between, drops
// it otherwise, and leaves it alone when it changed nothing, also for a
// handle whose earlier changes were not confirmed (a writer's RELEASE that
// comes after the next open recorded the pages).
func TestFlushedPages(t *testing.T) {
	const ino = 7
	v1 := client.Version{Size: 8, Mtime: 10, Ctime: 10}
	v2 := client.Version{Size: 16, Mtime: 20, Ctime: 20}
	v3 := client.Version{Size: 16, Mtime: 30, Ctime: 30}
	for _, tc := range []struct {
		name          string
		record        *client.Version
		before, after client.Version
		ok            bool
		want          *client.Version // nil: no record
	}{
		{"confirmed change moves the record", &v1, v1, v2, true, &v2},
		{"unconfirmed change drops the record", &v1, v1, v2, false, nil},
		{"change from another Version than the record's drops it", &v3, v1, v2, true, nil},
		{"change with no record leaves none", nil, v1, v2, true, nil},
		{"no change leaves the record", &v2, v2, v2, true, &v2},
		{"no change of an unconfirmed handle leaves the record", &v2, v2, v2, false, &v2},
		{"no change leaves a newer record an open made", &v3, v2, v2, false, &v3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &FS{pages: map[uint64]client.Version{}, dropping: map[uint64]int{}}
			if tc.record != nil {
				fs.pages[ino] = *tc.record
			}
			fs.flushedPagesAt(ino, tc.before, tc.after, tc.ok)
			got, known := fs.pages[ino]
			switch {
			case tc.want == nil && known:
				t.Fatalf("record %v, want none", got)
			case tc.want != nil && (!known || got != *tc.want):
				t.Fatalf("record %v (known %v), want %v", got, known, *tc.want)
			}
		})
	}
}
