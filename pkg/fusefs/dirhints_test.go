package fusefs

import (
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

func attrAt(ino uint64, ctime int64) *client.Attr {
	return &client.Attr{Ino: ino, Ctime: time.Unix(0, ctime)}
}

func TestDirHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(h *dirHints) *client.Attr // returns what take(1) gives at the end
		want int64                          // ctime of the hint taken; 0: none
	}{
		{"kept and taken", func(h *dirHints) *client.Attr {
			h.put(h.begin(), attrAt(1, 10))
			return h.take(1)
		}, 10},
		{"taken once", func(h *dirHints) *client.Attr {
			h.put(h.begin(), attrAt(1, 10))
			h.take(1)
			return h.take(1)
		}, 0},
		{"other directory", func(h *dirHints) *client.Attr {
			h.put(h.begin(), attrAt(2, 10))
			return h.take(1)
		}, 0},
		{"newer change wins", func(h *dirHints) *client.Attr {
			e := h.begin()
			h.put(e, attrAt(1, 20))
			h.put(e, attrAt(1, 10)) // answered later, changed earlier
			return h.take(1)
		}, 20},
		{"invalidated after", func(h *dirHints) *client.Attr {
			h.put(h.begin(), attrAt(1, 10))
			h.invalidate()
			return h.take(1)
		}, 0},
		{"overlapping invalidation drops the hint", func(h *dirHints) *client.Attr {
			e := h.begin()
			h.invalidate() // a setattr started while the create ran
			h.put(e, attrAt(1, 10))
			return h.take(1)
		}, 0},
		{"operation begun after an invalidation", func(h *dirHints) *client.Attr {
			h.invalidate()
			h.put(h.begin(), attrAt(1, 10))
			return h.take(1)
		}, 10},
		{"expired", func(h *dirHints) *client.Attr {
			h.put(h.begin(), attrAt(1, 10))
			d := h.hints[1]
			d.at = d.at.Add(-h.ttl)
			h.hints[1] = d
			return h.take(1)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.run(newDirHints(time.Second))
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
func TestDirHintsOffWithoutAttrCache(t *testing.T) {
	h := newDirHints(0)
	h.put(h.begin(), attrAt(1, 10))
	if a := h.take(1); a != nil {
		t.Fatalf("took %v with attribute caching off", a)
	}
}

func TestDirHintsBounded(t *testing.T) {
	h := newDirHints(time.Second)
	e := h.begin()
	for i := range maxDirHints + 10 {
		h.put(e, attrAt(uint64(i+1), 1))
	}
	if len(h.hints) > maxDirHints {
		t.Fatalf("%d hints kept, bound %d", len(h.hints), maxDirHints)
	}
}
