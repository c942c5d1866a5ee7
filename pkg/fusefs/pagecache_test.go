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
