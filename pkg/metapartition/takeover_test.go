package metapartition

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

func takeover(parent, token uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: parent, Token: token, Takeover: true}}}
}

func lockOp(parent, token uint64, takeover bool) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: parent, Token: token, Lock: true, Takeover: takeover}}}
}

// TestFenceTakeover: a takeover fence replaces a fence of an earlier
// attempt of the same request, and nothing else; an earlier attempt's
// fence or lift after the takeover changes nothing.
func TestFenceTakeover(t *testing.T) {
	const dir = 1 // the root
	req, other := uint64(0x1234567), uint64(0x7654321)
	t5, t6 := TakeoverToken(req, 5), TakeoverToken(req, 6)
	for _, tc := range []struct {
		name  string
		held  *metapb.Op // the fence in place (nil: none)
		op    *metapb.Op
		want  metapb.Errno
		after uint64 // the fence's token afterwards
	}{
		{"a later attempt takes over", takeover(dir, t5), takeover(dir, t6), metapb.OK, t6},
		{"an earlier attempt is refused", takeover(dir, t6), takeover(dir, t5), metapb.EBUSY, t6},
		{"the same attempt again", takeover(dir, t6), takeover(dir, t6), metapb.OK, t6},
		{"another request is refused", takeover(dir, TakeoverToken(other, 5)), takeover(dir, t6), metapb.EBUSY, TakeoverToken(other, 5)},
		{"a client's fence is refused", fence(dir, 99), takeover(dir, t6), metapb.EBUSY, 99},
		{"without takeover, a later attempt is refused", takeover(dir, t5), fence(dir, t6), metapb.EBUSY, t5},
		{"a fence does not take over a lock", lockOp(dir, t5, true), takeover(dir, t6), metapb.EBUSY, t5 | lockBit},
		{"a lock does not take over a fence", takeover(dir, t5), lockOp(dir, t6, true), metapb.EBUSY, t5},
		{"a later attempt's lock takes over", lockOp(dir, t5, true), lockOp(dir, t6, true), metapb.OK, t6 | lockBit},
		{"an earlier attempt's lock is refused", lockOp(dir, t6, true), lockOp(dir, t5, true), metapb.EBUSY, t6 | lockBit},
		{"the earlier attempt's unlock after the takeover", lockOp(dir, t6, true), unfence(dir, t5), metapb.EINVAL, t6 | lockBit},
		{"no fence: placed", nil, takeover(dir, t6), metapb.OK, t6},
		{"the earlier attempt's lift after the takeover", takeover(dir, t6), unfence(dir, t5), metapb.EINVAL, t6},
		{"the later attempt's lift", takeover(dir, t6), unfence(dir, t6), metapb.OK, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRoot(t)
			if tc.held != nil {
				mustRun(t, p, 10, tc.held)
			}
			if r := run(t, p, 11, tc.op); metapb.Errno(r.Errno) != tc.want {
				t.Fatalf("errno %v (%s), want %v", metapb.Errno(r.Errno), r.Message, tc.want)
			}
			got := uint64(0)
			if f, ok := p.fences.Get(dir); ok {
				got = f.token
			}
			if got != tc.after {
				t.Errorf("fence token %#x afterwards, want %#x", got, tc.after)
			}
		})
	}
	if TakeoverToken(0, 0) == 0 {
		t.Error("a takeover token of 0")
	}
}
