package fusefs

import (
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

func attrAt(ino uint64, ctime int64) *client.Attr {
	return &client.Attr{Ino: ino, Ctime: time.Unix(0, ctime)}
}

func TestAttrHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(h *attrHints) *client.Attr // returns what take(1) gives at the end
		want int64                           // ctime of the hint taken; 0: none
	}{
		{"kept and taken", func(h *attrHints) *client.Attr {
			h.put(h.begin(1), attrAt(1, 10))
			return h.take(1)
		}, 10},
		{"taken once", func(h *attrHints) *client.Attr {
			h.put(h.begin(1), attrAt(1, 10))
			h.take(1)
			return h.take(1)
		}, 0},
		{"other inode", func(h *attrHints) *client.Attr {
			h.put(h.begin(2), attrAt(2, 10))
			return h.take(1)
		}, 0},
		{"newer change wins", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			h.put(st, attrAt(1, 20))
			h.put(st, attrAt(1, 10)) // answered later, changed earlier
			return h.take(1)
		}, 20},
		{"its inode invalidated after", func(h *attrHints) *client.Attr {
			h.put(h.begin(1), attrAt(1, 10))
			h.invalidateIno(1)
			return h.take(1)
		}, 0},
		{"another inode invalidated after", func(h *attrHints) *client.Attr {
			h.put(h.begin(1), attrAt(1, 10))
			h.invalidateIno(2)
			return h.take(1)
		}, 10},
		{"overlapping rename of the directory drops the hint", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			h.invalidateIno(1) // a rename named directory 1 while a create in it ran
			h.put(st, attrAt(1, 10))
			return h.take(1)
		}, 0},
		{"overlapping change of its inode drops the hint", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			h.invalidateIno(1) // a write to the file started while it was opened again
			h.put(st, attrAt(1, 10))
			return h.take(1)
		}, 0},
		{"overlapping change of another inode keeps it", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			h.invalidateIno(2)
			h.put(st, attrAt(1, 10))
			return h.take(1)
		}, 10},
		{"operation begun after an invalidation", func(h *attrHints) *client.Attr {
			h.invalidateIno(1)
			h.put(h.begin(1), attrAt(1, 10))
			return h.take(1)
		}, 10},
		{"own closing invalidation keeps it (rmdir)", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			h.put(h.begin(1), attrAt(1, 5)) // learnt by another operation
			st = h.invalidateInoKeeping(1, st)
			if a := h.take(1); a != nil {
				t.Errorf("the closing invalidation kept %v", a)
			}
			h.put(st, attrAt(1, 10))
			return h.take(1)
		}, 10},
		{"closing invalidation after another drops it", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			h.invalidateIno(1) // another rmdir or rename in directory 1 overlapped
			st = h.invalidateInoKeeping(1, st)
			h.put(st, attrAt(1, 10))
			return h.take(1)
		}, 0},
		{"closing invalidation after a later one drops it", func(h *attrHints) *client.Attr {
			st := h.begin(1)
			st = h.invalidateInoKeeping(1, st)
			h.invalidateIno(1) // a change of directory 1 after this one ended
			h.put(st, attrAt(1, 10))
			return h.take(1)
		}, 0},
		{"rename of other inodes keeps the hint", func(h *attrHints) *client.Attr {
			h.put(h.begin(1), attrAt(1, 10))
			st := h.begin(2)
			h.invalidateIno(3) // the moved inode
			h.invalidateInoKeeping(2, st)
			return h.take(1)
		}, 10},
		{"expired", func(h *attrHints) *client.Attr {
			h.put(h.begin(1), attrAt(1, 10))
			d := h.hints[1]
			d.at = d.at.Add(-h.ttl)
			h.hints[1] = d
			return h.take(1)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.run(newAttrHints(time.Second))
			switch {
			case tc.want == 0 && got != nil:
				t.Fatalf("took %v, want none", got)
			case tc.want != 0 && (got == nil || got.Ctime.UnixNano() != tc.want):
				t.Fatalf("took %v, want ctime %d", got, tc.want)
			}
		})
	}
}

// With attribute caching off (attr_timeout=0) the mount keeps no hints:
// every GETATTR asks the servers.
func TestAttrHintsOffWithoutAttrCache(t *testing.T) {
	h := newAttrHints(0)
	h.put(h.begin(1), attrAt(1, 10))
	if a := h.take(1); a != nil {
		t.Fatalf("took %v with attribute caching off", a)
	}
}

func TestAttrHintsBounded(t *testing.T) {
	h := newAttrHints(time.Second)
	for i := range maxAttrHints + 10 {
		ino := uint64(i + 1)
		h.put(h.begin(ino), attrAt(ino, 1))
	}
	if len(h.hints) > maxAttrHints {
		t.Fatalf("%d hints kept, bound %d", len(h.hints), maxAttrHints)
	}
}

// Invalidations racing with puts leave no hint once the last one ended
// (run with -race).
func TestAttrHintsRace(t *testing.T) {
	h := newAttrHints(time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			h.invalidateIno(1)
		}
	}()
	for range 2000 {
		h.put(h.begin(1), attrAt(1, 1))
		h.take(1)
	}
	st := h.begin(1)
	<-done
	h.put(st, attrAt(1, 1)) // begun before the last invalidations ended
	if a := h.take(1); a != nil && !h.valid(1, st) {
		t.Fatalf("hint kept from an operation an invalidation overlapped: %v", a)
	}
}
