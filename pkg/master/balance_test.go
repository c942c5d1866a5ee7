package master

import (
	"errors"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

func TestPlanVolume(t *testing.T) {
	const step = clustermap.InodeRangeStep
	baseVol := func() *pb.Volume {
		return &pb.Volume{Name: "v", MetaPartitions: []uint64{1, 2, 3}, RoutingVersion: 4,
			SlotOwners: []uint64{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}}
	}
	parts := map[uint64]*pb.Partition{
		1: {Id: 1, InodeStart: 1, InodeEnd: step},
		2: {Id: 2, InodeStart: step + 1, InodeEnd: 2 * step},
		3: {Id: 3, InodeStart: 2*step + 1},
	}
	st := func(dentries, inodes, maxIno uint64) *metapb.PartitionStatsResponse {
		return &metapb.PartitionStatsResponse{Dentries: dentries, Inodes: inodes, MaxIno: maxIno, RoutingVersion: 4}
	}
	even := func() map[uint64]*metapb.PartitionStatsResponse {
		return map[uint64]*metapb.PartitionStatsResponse{1: st(1000, 900, 900), 2: st(1000, 10, step+10), 3: st(1000, 100, 2*step+100)}
	}
	tests := []struct {
		name    string
		vol     func(v *pb.Volume)
		stats   func(s map[uint64]*metapb.PartitionStatsResponse)
		wantErr error
		want    action
		reason  string
		check   func(t *testing.T, p volumePlan)
	}{
		{name: "even volume: nothing to do", want: actNone},
		{
			name: "partition without slots gets its share", want: actSlots, reason: reasonGrow,
			vol: func(v *pb.Volume) { v.MetaPartitions = append(v.MetaPartitions, 4) },
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {
				s[4] = st(0, 0, 0)
			},
			check: func(t *testing.T, p volumePlan) {
				if share := (&hybridindex.Table{Slots: p.slots}).SlotShare(); share[1] != 3 || share[2] != 3 || share[3] != 3 || share[4] != 3 {
					t.Fatalf("slots %v", p.slots)
				}
			},
		},
		{
			name: "open partition over the inode limit grows", want: actGrow, reason: reasonGrow,
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) { s[3] = st(1000, 5000, 2*step+5000) },
			check: func(t *testing.T, p volumePlan) {
				if p.cutMP != 3 || p.cutEnd != 2*step+5000+growthMargin {
					t.Fatalf("cut %d at %d", p.cutMP, p.cutEnd)
				}
			},
		},
		{
			name: "empty open partition is cut above its start", want: actGrow,
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {
				s[1] = st(3000, 100, 100)
				s[2] = st(3000, 100, step+100)
				s[3] = st(3000, 0, 0)
			},
			check: func(t *testing.T, p volumePlan) {
				if p.cutEnd != 2*step+growthMargin {
					t.Fatalf("cut at %d", p.cutEnd)
				}
			},
		},
		{
			name: "open partition already cut: finish the growth", want: actGrow,
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) { s[3].InodeEnd = 2*step + 777 },
			check: func(t *testing.T, p volumePlan) {
				if p.cutMP != 3 || p.cutEnd != 2*step+777 {
					t.Fatalf("cut %d at %d", p.cutMP, p.cutEnd)
				}
			},
		},
		{
			name:  "closed partition over the inode limit: growth would not help",
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) { s[1] = st(1000, 5000, 5000) },
			want:  actNone,
		},
		{
			name: "every partition full of dentries grows", want: actGrow,
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {
				for _, x := range s {
					x.Dentries = 2100
				}
			},
		},
		{
			name: "volume limit wins over the master's", want: actGrow,
			vol:   func(v *pb.Volume) { v.MpMaxInodes = 500 },
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {},
		},
		{
			name: "one hot name: balance, not growth", want: actExceptions, reason: reasonBalance,
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {
				s[1] = st(2100, 100, 100)
				s[1].TopNames = []*metapb.NameCount{{Name: []byte("hot"), Count: 1500}, {Name: []byte("a"), Count: 3}}
			},
			check: func(t *testing.T, p volumePlan) {
				if len(p.exceptions) != 1 || string(p.exceptions[0].Name) != "hot" || len(p.changes) != 1 {
					t.Fatalf("exceptions %v changes %v", p.exceptions, p.changes)
				}
			},
		},
		{
			name: "skew below the minimum dentries: left alone", want: actNone,
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {
				for _, x := range s {
					x.Dentries /= 10
				}
				s[1].Dentries = 210
				s[1].TopNames = []*metapb.NameCount{{Name: []byte("hot"), Count: 150}}
			},
		},
		{
			name: "unneeded exception entry is removed", want: actExceptions, reason: reasonShrink,
			vol: func(v *pb.Volume) {
				v.Exceptions = []*pb.ExceptionEntry{{Name: []byte("cold"), Kind: uint32(hybridindex.Override), Mp: 2}}
			},
			stats: func(s map[uint64]*metapb.PartitionStatsResponse) {
				s[2].NamedCounts = []*metapb.NameCount{{Name: []byte("cold"), Count: 10}}
			},
			check: func(t *testing.T, p volumePlan) {
				if len(p.exceptions) != 0 || len(p.changes) != 1 {
					t.Fatalf("exceptions %v changes %v", p.exceptions, p.changes)
				}
			},
		},
		{
			name:    "statistics under an older routing",
			stats:   func(s map[uint64]*metapb.PartitionStatsResponse) { s[2].RoutingVersion = 3 },
			wantErr: errStale,
		},
		{
			name:    "statistics during a change",
			stats:   func(s map[uint64]*metapb.PartitionStatsResponse) { s[2].RoutingMoving = true },
			wantErr: errStale,
		},
		{
			name:    "missing statistics",
			stats:   func(s map[uint64]*metapb.PartitionStatsResponse) { delete(s, 2) },
			wantErr: errAny,
		},
		{
			name:    "migration in progress",
			vol:     func(v *pb.Volume) { v.Migration = &pb.Migration{RoutingVersion: 5} },
			wantErr: errAny,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := baseVol()
			if tt.vol != nil {
				tt.vol(v)
			}
			stats := even()
			if tt.stats != nil {
				tt.stats(stats)
			}
			p, err := planVolume(planInput{vol: v, parts: parts, stats: stats, maxInodes: 2000, minDentries: 1000})
			switch {
			case tt.wantErr == errAny && err == nil, tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if p.act != tt.want || (tt.reason != "" && p.reason != tt.reason) {
				t.Fatalf("plan %+v, want action %d reason %q", p, tt.want, tt.reason)
			}
			if tt.check != nil {
				tt.check(t, p)
			}
			// The plan must be acceptable to the map.
			if p.act == actSlots || p.act == actExceptions {
				slots, exc := v.SlotOwners, v.Exceptions
				if p.act == actSlots {
					slots = p.slots
				} else {
					exc = p.exceptions
				}
				if _, err := clustermap.RoutingTable(slots, exc); err != nil {
					t.Fatalf("planned routing: %v", err)
				}
				if !slices.Equal(v.MetaPartitions, sortedKeys((&hybridindex.Table{Slots: slots}).SlotShare())) {
					t.Fatalf("planned slots %v leave out a partition of %v", slots, v.MetaPartitions)
				}
			}
		})
	}
}

// errAny marks a test case that wants some error.
var errAny = errors.New("any error")

func TestMPStats(t *testing.T) {
	v := &pb.Volume{MetaPartitions: []uint64{1}}
	et := hybridindex.NewExceptionTable()
	if err := et.Set("x", hybridindex.Redirect{Kind: hybridindex.PathWalk}); err != nil {
		t.Fatal(err)
	}
	got := mpStats(v, map[uint64]*metapb.PartitionStatsResponse{1: {
		Dentries:    50,
		TopNames:    []*metapb.NameCount{{Name: []byte("a"), Count: 5}, {Name: []byte("x"), Count: 9}, {Name: []byte("b/c"), Count: 2}, {Name: []byte("z"), Count: 0}},
		NamedCounts: []*metapb.NameCount{{Name: []byte("x"), Count: 7}, {Name: []byte("x"), Count: 7}, {Name: []byte("unknown"), Count: 1}},
	}}, et)
	if len(got) != 1 || got[0].Inodes != 50 || got[0].TableVersion != et.Version() {
		t.Fatalf("stats %+v", got)
	}
	if len(got[0].Top) != 1 || got[0].Top[0].Name != "a" {
		t.Fatalf("top %+v: want only the valid hashed name with records", got[0].Top)
	}
	if len(got[0].Exceptions) != 1 || got[0].Exceptions[0].Count != 7 {
		t.Fatalf("exceptions %+v", got[0].Exceptions)
	}
}
