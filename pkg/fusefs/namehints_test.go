package fusefs

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// A name hint is taken once, within its ttl, and a change of the name
// through this mount drops it; past the bound, expired hints make room
// and fresh ones are not pushed out.
func TestNameHints(t *testing.T) {
	n := newNameHints(time.Hour)
	file := &client.Attr{Ino: 7, Mode: syscall.S_IFREG | 0o644}
	n.found(1, "a", file)
	n.absent(1, "b")
	if h := n.take(1, "a"); h == nil || h.Absent || h.Ino != 7 || h.Mode != file.Mode {
		t.Fatalf("take a = %+v, want inode 7", h)
	}
	if h := n.take(1, "a"); h != nil {
		t.Fatalf("a hint is used once; got %+v again", h)
	}
	if h := n.take(1, "b"); h == nil || !h.Absent {
		t.Fatalf("take b = %+v, want absent", h)
	}
	if h := n.take(2, "a"); h != nil {
		t.Fatalf("another directory's name: %+v", h)
	}
	n.found(1, "c", file)
	n.forget(1, "c")
	if h := n.take(1, "c"); h != nil {
		t.Fatalf("forgotten hint returned: %+v", h)
	}

	short := newNameHints(0)
	short.found(1, "a", file)
	time.Sleep(short.ttl)
	if h := short.take(1, "a"); h != nil {
		t.Fatalf("expired hint returned: %+v", h)
	}

	full := newNameHints(time.Hour)
	for i := range maxNameHints {
		full.absent(1, fmt.Sprint(i))
	}
	full.found(1, "new", file)
	if h := full.take(1, "new"); h != nil {
		t.Fatalf("a hint past the bound was kept while none had expired")
	}
	if h := full.take(1, "0"); h == nil {
		t.Fatal("a fresh hint was pushed out")
	}
	full.absent(1, "0") // at the bound again
	full.ttl = 0        // and everything kept has expired: the next hint makes room
	full.pruned = time.Time{}
	full.found(1, "new", file)
	full.ttl = time.Hour
	if h := full.take(1, "new"); h == nil || len(full.hints) != 0 {
		t.Fatalf("expired hints were not pruned for a new one: %+v, %d kept", h, len(full.hints))
	}
}
