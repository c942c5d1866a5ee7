package fsck

import (
	"fmt"
	"slices"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// DefaultGrace is how old the newest record of a finding must be before it
// is repaired: an operation whose steps are still under way (each bounded by
// the client's 30 s deadline) must not be "repaired" under its feet.
const DefaultGrace = 2 * time.Minute

// Action is one Txn that repairs one finding, with what Apply checks just
// before sending it.
type Action struct {
	Finding     int          `json:"finding"` // index into the findings planned for
	Kind        Kind         `json:"kind"`
	Partition   uint64       `json:"partition"` // where the Txn goes
	Ops         []*metapb.Op `json:"-"`
	Description string       `json:"description"`
	// The precondition: inode CheckIno on partition CheckPartition must
	// still be absent (CheckMissing) or still have ExpectNlink and
	// ExpectCtimeNs; CheckPartition 0 checks nothing.
	CheckPartition uint64 `json:"-"`
	CheckIno       uint64 `json:"-"`
	CheckMissing   bool   `json:"-"`
	ExpectNlink    uint32 `json:"-"`
	ExpectCtimeNs  int64  `json:"-"`
}

// Skip is a finding the plan leaves alone, and why.
type Skip struct {
	Finding int    `json:"finding"`
	Kind    Kind   `json:"kind"`
	Reason  string `json:"reason"`
}

// Plan is what PlanRepair decided: at most one Action or one Skip per
// finding (findings of kinds not asked for appear in neither).
type Plan struct {
	Actions []Action `json:"actions"`
	Skipped []Skip   `json:"skipped"`
}

// PlanOptions tune PlanRepair.
type PlanOptions struct {
	// Now is the current time; records changed after Now - Grace are left
	// alone.
	Now   time.Time
	Grace time.Duration
	// Kinds restricts the plan to these kinds (nil: every kind).
	Kinds []Kind
}

// Repairable lists the kinds PlanRepair can fix; the others need a person
// to decide (which name of a directory is right, where a lost subtree goes).
var Repairable = []Kind{Orphan, Unlinked, NlinkMismatch, DirParentMismatch, FileParentMismatch, DanglingName}

func linkOp(ino uint64, delta int32) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: delta}}}
}

func evictOp(ino uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: ino}}}
}

// PlanRepair turns findings into Txns of primitive operations. It is pure:
// the same findings and options give the same plan. A finding is repaired
// only if its records are older than the grace period and the fix cannot
// lose data that a name still reaches:
//
//   - Orphan: Link(-nlink) + Evict on its home (a directory only if no name
//     is under it);
//   - Unlinked: Evict;
//   - NlinkMismatch: Link(delta) for a file (+ Evict at 0), TouchDir(delta)
//     for a directory (the missed follow-up of a cross-partition mkdir or
//     rmdir, which also refreshes its mtime);
//   - DirParentMismatch: Setattr SETATTR_PARENT to the directory holding its
//     name (the missed follow-up of a rename);
//   - DanglingName: DeleteDentry with expect_ino, if the inode is still
//     missing when Apply checks.
func PlanRepair(fs []Finding, o PlanOptions) Plan {
	var p Plan
	cutoff := o.Now.Add(-o.Grace).UnixNano()
	for i := range fs {
		f := &fs[i]
		if o.Kinds != nil && !slices.Contains(o.Kinds, f.Kind) {
			continue
		}
		skip := func(format string, a ...any) {
			p.Skipped = append(p.Skipped, Skip{Finding: i, Kind: f.Kind, Reason: fmt.Sprintf(format, a...)})
		}
		if !slices.Contains(Repairable, f.Kind) {
			skip("not repaired automatically")
			continue
		}
		if t := max(f.CtimeNs, f.NewestNs); t > cutoff {
			skip("changed %s ago, within the grace period of %s", o.Now.Sub(time.Unix(0, t)).Round(time.Second), o.Grace)
			continue
		}
		a := Action{Finding: i, Kind: f.Kind, Partition: f.Partition,
			CheckPartition: f.Partition, CheckIno: f.Ino, ExpectNlink: f.Nlink, ExpectCtimeNs: f.CtimeNs}
		switch f.Kind {
		case Orphan:
			if f.HasChildren {
				skip("directory still holds names")
				continue
			}
			a.Ops = []*metapb.Op{linkOp(f.Ino, -int32(f.Nlink)), evictOp(f.Ino)}
			a.Description = fmt.Sprintf("drop the %d links of orphan %s inode %d and evict it", f.Nlink, f.Type, f.Ino)
		case Unlinked:
			if f.HasChildren {
				skip("directory still holds names")
				continue
			}
			a.Ops = []*metapb.Op{evictOp(f.Ino)}
			a.Description = fmt.Sprintf("evict unlinked %s inode %d", f.Type, f.Ino)
		case NlinkMismatch:
			delta := int32(int64(f.WantNlink) - int64(f.Nlink))
			if f.Type == "dir" {
				a.Ops = []*metapb.Op{{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: f.Ino, NlinkDelta: delta}}}}
			} else {
				a.Ops = []*metapb.Op{linkOp(f.Ino, delta)}
				if f.WantNlink == 0 {
					a.Ops = append(a.Ops, evictOp(f.Ino))
				}
			}
			a.Description = fmt.Sprintf("set nlink of %s inode %d from %d to %d", f.Type, f.Ino, f.Nlink, f.WantNlink)
		case DirParentMismatch, FileParentMismatch:
			a.Ops = []*metapb.Op{{Op: &metapb.Op_Setattr{Setattr: &metapb.Setattr{Ino: f.Ino,
				Valid: uint32(metapb.SetattrValid_SETATTR_PARENT), Parent: f.Parent}}}}
			a.Description = fmt.Sprintf("set the parent pointer of %s %d to %d", f.Type, f.Ino, f.Parent)
		case DanglingName:
			if len(f.Dentries) != 1 {
				skip("malformed finding")
				continue
			}
			d := f.Dentries[0]
			a.Partition, a.CheckPartition, a.CheckIno, a.CheckMissing = d.Partition, f.Home, d.Ino, true
			a.ExpectNlink, a.ExpectCtimeNs = 0, 0
			a.Ops = []*metapb.Op{{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
				Parent: d.Parent, Name: []byte(d.Name), ExpectIno: d.Ino}}}}
			a.Description = fmt.Sprintf("delete name %d/%q of missing inode %d", d.Parent, d.Name, d.Ino)
		}
		p.Actions = append(p.Actions, a)
	}
	return p
}
