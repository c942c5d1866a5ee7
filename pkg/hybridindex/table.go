package hybridindex

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ErrInvalidTable is wrapped by the errors of NewSlots, Rebalance and
// Table.Validate.
var ErrInvalidTable = errors.New("invalid slot table")

// MaxSlots bounds the slot count of a volume (as the cluster map does).
const MaxSlots = 1 << 16

// Table is what a client, a meta partition or the master needs to place a
// record: the volume's slot owners and its exception table. Slots[i] is the
// id of the MP that owns slot i; len(Slots) is fixed for the life of the
// volume. A nil Exceptions is an empty table. Table does not copy its
// fields; treat them as read-only while routing.
type Table struct {
	Slots      []uint64
	Exceptions *ExceptionTable
}

// Validate checks that the table can route every name: 1 to MaxSlots
// slots, every owner a non-zero MP id, and every override targeting an MP
// that owns at least one slot (an override to an MP outside the volume
// would strand its records).
func (t *Table) Validate() error {
	if t == nil {
		return fmt.Errorf("%w: nil table", ErrInvalidTable)
	}
	if len(t.Slots) == 0 || len(t.Slots) > MaxSlots {
		return fmt.Errorf("%w: %d slots, want 1..%d", ErrInvalidTable, len(t.Slots), MaxSlots)
	}
	owners := make(map[uint64]bool)
	for i, mp := range t.Slots {
		if mp == 0 {
			return fmt.Errorf("%w: slot %d has owner 0", ErrInvalidTable, i)
		}
		owners[mp] = true
	}
	for _, n := range t.Exceptions.Names() {
		if r, _ := t.Exceptions.Get(n); r.Kind == Override && !owners[r.MP] {
			return fmt.Errorf("%w: %q overridden to MP %d, which owns no slot", ErrInvalidTable, n, r.MP)
		}
	}
	return nil
}

// MPs returns the distinct slot owners in increasing order.
func (t *Table) MPs() []uint64 {
	if t == nil {
		return nil
	}
	mps := slices.Clone(t.Slots)
	slices.Sort(mps)
	return slices.Compact(mps)
}

// Route returns the MP that holds the record (parent, name) and how it was
// found. It is a pure function of the table and its arguments, so every
// client, MP and master holding the same table version agrees. A
// PathWalk result costs a client that lacks the parent's inode number one
// more hop. Route does not validate name (see ValidateName); a table with
// no slots routes hashed and path-walk names to MP 0, which no partition
// has (see Validate).
func (t *Table) Route(parent uint64, name string) (mp uint64, kind Kind) {
	if t == nil {
		return 0, Hashed
	}
	r, ok := t.Exceptions.Get(name)
	switch {
	case ok && r.Kind == Override:
		return r.MP, Override
	case ok && r.Kind == PathWalk:
		return t.owner(SlotOfParent(parent, name, len(t.Slots))), PathWalk
	}
	return t.owner(SlotOf(name, len(t.Slots))), Hashed
}

func (t *Table) owner(slot int) uint64 {
	if slot < 0 || slot >= len(t.Slots) {
		return 0
	}
	return t.Slots[slot]
}

// SlotShare returns how many slots each MP owns.
func (t *Table) SlotShare() map[uint64]int {
	share := make(map[uint64]int)
	if t != nil {
		for _, mp := range t.Slots {
			share[mp]++
		}
	}
	return share
}

func checkMPs(mps []uint64, slots int) error {
	if len(mps) == 0 {
		return fmt.Errorf("%w: no MPs", ErrInvalidTable)
	}
	if slots < len(mps) || slots > MaxSlots {
		return fmt.Errorf("%w: %d slots for %d MPs, want %d..%d", ErrInvalidTable, slots, len(mps), len(mps), MaxSlots)
	}
	seen := make(map[uint64]bool, len(mps))
	for _, mp := range mps {
		if mp == 0 {
			return fmt.Errorf("%w: MP id 0", ErrInvalidTable)
		}
		if seen[mp] {
			return fmt.Errorf("%w: MP %d listed twice", ErrInvalidTable, mp)
		}
		seen[mp] = true
	}
	return nil
}

// NewSlots assigns slots to mps in contiguous ranges in the order given:
// slot i goes to mps[i×len(mps)/slots], the assignment the cluster map makes
// for a new volume, so every MP owns ⌊slots/len(mps)⌋ or ⌈slots/len(mps)⌉
// slots. It fails on no MPs, an MP id 0 or listed twice, or a slot count
// outside len(mps)..MaxSlots.
func NewSlots(mps []uint64, slots int) ([]uint64, error) {
	if err := checkMPs(mps, slots); err != nil {
		return nil, err
	}
	out := make([]uint64, slots)
	for i := range out {
		out[i] = mps[uint64(i)*uint64(len(mps))/uint64(slots)]
	}
	return out, nil
}

// Rebalance reassigns slots so that each MP in mps owns ⌊S/n⌋ or ⌈S/n⌉ of
// the S slots, moving the fewest slots that achieves this. It returns the
// new owners and the indexes of the slots whose owner changed, in
// increasing order; the input is not modified.
//
// Guarantees: a slot moves only away from an MP that owns more than its
// target (or is not in mps, e.g. an MP being removed) and only to an MP
// that owns fewer than its target; the ⌈S/n⌉ targets go to the MPs that own
// the most slots already (ties: earlier in mps), which makes the number of
// moved slots Σ max(0, owned − target), the minimum for any balanced
// assignment. Adding one MP to n balanced ones therefore moves about
// S/(n+1) slots, all to the new MP. Donors give up their highest-numbered
// slots, so a contiguous range stays contiguous. The result depends only on
// the arguments.
func Rebalance(slots []uint64, mps []uint64) (newSlots []uint64, moved []int, err error) {
	if err := checkMPs(mps, len(slots)); err != nil {
		return nil, nil, fmt.Errorf("rebalance: %w", err)
	}
	owned := make(map[uint64]int, len(mps))
	for _, mp := range slots {
		owned[mp]++
	}
	// Rank MPs by slots owned, most first, to hand out the larger targets.
	rank := make([]int, len(mps))
	for i := range rank {
		rank[i] = i
	}
	slices.SortStableFunc(rank, func(a, b int) int {
		return cmp.Compare(owned[mps[b]], owned[mps[a]])
	})
	target := make(map[uint64]int, len(mps))
	base, extra := len(slots)/len(mps), len(slots)%len(mps)
	for r, i := range rank {
		target[mps[i]] = base
		if r < extra {
			target[mps[i]]++
		}
	}
	// Collect surplus slots: all slots of MPs not in mps, and each
	// over-full MP's highest-numbered ones. Walking slots from the top
	// and counting down what each MP keeps frees the highest first.
	keep := make(map[uint64]int, len(mps))
	for mp, t := range target {
		keep[mp] = min(t, owned[mp])
	}
	kept := make(map[uint64]int, len(mps))
	var free []int
	for i := range slots {
		mp := slots[i]
		if kept[mp] < keep[mp] {
			kept[mp]++
			continue
		}
		free = append(free, i)
	}
	// The loop above kept the lowest-numbered slots of each MP; free is
	// already in increasing order.
	newSlots = slices.Clone(slots)
	next := 0
	for _, mp := range mps {
		for n := target[mp] - owned[mp]; n > 0 && next < len(free); n-- {
			newSlots[free[next]] = mp
			next++
		}
	}
	return newSlots, free, nil
}
