package chunkgc

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

func rec(fp string, refs uint64, dead bool, mtime int64) Entry {
	return Entry{Partition: 7, Record: &metapb.ChunkRecord{
		Chunk: &metapb.Chunk{Fingerprint: []byte(fp), Size: 100, PartitionId: 1}, Refs: refs, Dead: dead, MtimeNs: mtime,
	}}
}

func TestRecount(t *testing.T) {
	const now, quiet = int64(1000), int64(100)
	tests := []struct {
		name        string
		entries     []Entry
		layouts     map[string]uint64
		pending     bool
		wantKinds   []Kind
		wantFixes   int
		wantSerious bool
	}{
		{"agree", []Entry{rec("a", 2, false, 10), rec("b", 1, false, 10)}, map[string]uint64{"a": 2, "b": 1}, false, nil, 0, false},
		{"leak fixed when quiet", []Entry{rec("a", 3, false, 10)}, map[string]uint64{"a": 1}, false, []Kind{Leaked}, 1, false},
		{"leak to zero", []Entry{rec("a", 1, false, 10)}, nil, false, []Kind{Leaked}, 1, false},
		{"leak changed within grace", []Entry{rec("a", 3, false, 950)}, map[string]uint64{"a": 1}, false, []Kind{Leaked}, 0, false},
		{"leak while drops pending", []Entry{rec("a", 3, false, 10)}, map[string]uint64{"a": 1}, true, []Kind{Leaked}, 0, false},
		{"missing references never fixed", []Entry{rec("a", 1, false, 10)}, map[string]uint64{"a": 2}, false, []Kind{Missing}, 0, true},
		{"layout names unknown chunk", nil, map[string]uint64{"z": 1}, false, []Kind{Dangling}, 0, true},
		{"layout names dead chunk", []Entry{rec("a", 0, true, 10)}, map[string]uint64{"a": 1}, false, []Kind{Dangling}, 0, true},
		{"zero-ref entry is the collector's", []Entry{rec("a", 0, false, 10)}, nil, false, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Recount(Input{Entries: tt.entries, LayoutRefs: tt.layouts, LayoutSizes: map[string]uint32{}, DropsPending: tt.pending, ReadAtNs: now, QuietNs: quiet})
			if len(r.Findings) != len(tt.wantKinds) {
				t.Fatalf("findings %+v, want kinds %v", r.Findings, tt.wantKinds)
			}
			for i, k := range tt.wantKinds {
				if r.Findings[i].Kind != k {
					t.Fatalf("finding %d is %v, want %v", i, r.Findings[i].Kind, k)
				}
			}
			n := 0
			for part, fixes := range r.Fixes() {
				if part != 7 {
					t.Fatalf("fix planned on partition %d, want the entry's shard 7", part)
				}
				for _, f := range fixes {
					if f.GetRefs() != tt.layouts[string(f.GetChunk().GetFingerprint())] || f.GetMtimeNs() != 10 {
						t.Fatalf("fix %v: want the layout count and the read mtime", f)
					}
				}
				n += len(fixes)
			}
			if n != tt.wantFixes {
				t.Fatalf("%d fixes, want %d", n, tt.wantFixes)
			}
			if r.Serious() != tt.wantSerious {
				t.Fatalf("serious = %v, want %v", r.Serious(), tt.wantSerious)
			}
		})
	}
}

func TestDedupRatio(t *testing.T) {
	r := Recount(Input{
		Entries:     []Entry{rec("a", 2, false, 1), rec("b", 1, false, 1)},
		LayoutRefs:  map[string]uint64{"a": 2, "b": 1},
		LayoutSizes: map[string]uint32{"a": 100, "b": 100},
	})
	if r.StoredBytes != 200 || r.LogicalBytes != 300 || r.DedupRatio() != 1.5 {
		t.Fatalf("stored %d logical %d ratio %v, want 200, 300, 1.5", r.StoredBytes, r.LogicalBytes, r.DedupRatio())
	}
}
