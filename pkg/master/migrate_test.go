package master

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// errLeaderLost is what the fakes answer once the test has taken leadership
// away from a driver.
var errLeaderLost = errors.New("leadership lost")

// world is a cluster map and the meta partitions of volume "v", faked in
// memory. Every partition call and every proposal is an event; at event
// crashAt the world cancels the driver's context (its master lost
// leadership), applying the event first when applyCrash is set (the call
// succeeded but the answer was lost).
type world struct {
	mu         sync.Mutex
	st         *clustermap.State
	mps        map[uint64]*fakeMP
	events     int
	crashAt    int
	applyCrash bool
	cancel     context.CancelFunc
	failEvery  int // every failEvery-th SetRouting and Import fails, 0: never
	calls      int
	failures   int
	// names are every (parent, name) the volume holds; contents never change.
	names []dkey
	// checkErr is the first violation of the read invariant seen after an event.
	checkErr error
	// lives are the live routings seen by check, by version.
	lives map[uint64]*hybridindex.Table
}

type dkey struct {
	parent uint64
	name   string
}

func cmpKey(a, b dkey) int {
	return cmp.Or(cmp.Compare(a.parent, b.parent), cmp.Compare(a.name, b.name))
}

// fakeMP applies the decision table of docs/routing.md.
type fakeMP struct {
	id       uint64
	has      bool
	version  uint64
	cur      *hybridindex.Table
	prev     *hybridindex.Table // nil: no change in progress
	sealed   bool
	dentries map[dkey]*metapb.Dentry
}

func (m *fakeMP) owns(t *hybridindex.Table, k dkey) bool {
	mp, _ := t.Route(k.parent, k.name)
	return mp == m.id
}

// servesRead reports whether a Lookup of k is answered (found or not) rather
// than refused with EWRONGMP or EMOVING.
func (m *fakeMP) servesRead(k dkey) bool {
	switch {
	case !m.has:
		return true
	case m.prev == nil:
		return m.owns(m.cur, k)
	}
	p, c := m.owns(m.prev, k), m.owns(m.cur, k)
	return p && (c || !m.sealed)
}

func stage(prev *hybridindex.Table, sealed bool) int {
	switch {
	case prev == nil:
		return 2
	case sealed:
		return 1
	}
	return 0
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{st: clustermap.New(), mps: map[uint64]*fakeMP{}}
	cmds := []*pb.Command{{Op: &pb.Command_Init{Init: &pb.InitCluster{ClusterId: "c"}}}}
	for i := 1; i <= 6; i++ {
		role := pb.Role_ROLE_META
		if i > 3 {
			role = pb.Role_ROLE_DATA
		}
		cmds = append(cmds, &pb.Command{Op: &pb.Command_Register{Register: &pb.RegisterNode{Uuid: fmt.Sprint("n", i), Role: role, Addr: fmt.Sprint("n:", i)}}})
	}
	meta := &pb.NewPartition{Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}}
	cmds = append(cmds, &pb.Command{Op: &pb.Command_CreateVolume{CreateVolume: &pb.CreateVolume{
		Name: "v", Replicas: 3, SlotCount: 16,
		Partitions: []*pb.NewPartition{meta, meta, meta, {Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{4, 5, 6}}},
	}}})
	for _, c := range cmds {
		if _, err := w.st.Apply(c); err != nil {
			t.Fatalf("apply %v: %v", c, err)
		}
	}
	v := w.st.VolumeByName("v")
	live, err := clustermap.RoutingTable(v.SlotOwners, v.Exceptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range v.MetaPartitions {
		w.mps[id] = &fakeMP{id: id, has: true, version: 1, cur: live, dentries: map[dkey]*metapb.Dentry{}}
	}
	for parent := uint64(1); parent <= 3; parent++ {
		for i := range 20 {
			w.names = append(w.names, dkey{parent, fmt.Sprint("f", i)})
		}
	}
	for parent := uint64(10); parent < 30; parent++ {
		w.names = append(w.names, dkey{parent, "Makefile"})
	}
	for i, k := range w.names {
		owner, _ := live.Route(k.parent, k.name)
		w.mps[owner].dentries[k] = &metapb.Dentry{Parent: k.parent, Name: []byte(k.name), Ino: uint64(1000 + i), Type: metapb.FileType_FILE_TYPE_REGULAR}
	}
	return w
}

// event counts one call; it reports whether to apply it and what to answer.
// Called with w.mu held.
func (w *world) event(ctx context.Context) (apply bool, err error) {
	if ctx.Err() != nil {
		return false, errLeaderLost
	}
	w.events++
	if w.crashAt != 0 && w.events == w.crashAt {
		w.cancel()
		return w.applyCrash, errLeaderLost
	}
	return true, nil
}

// fails reports whether to inject a failure into this SetRouting or Import.
func (w *world) fails() bool {
	w.calls++
	if w.failEvery > 0 && w.calls%w.failEvery == 0 {
		w.failures++
		return true
	}
	return false
}

// check verifies, after every event, that a client routing by the map's live
// routing, or by any live routing seen before (a client with an old map),
// never reads a missing dentry: an MP that answers a Lookup holds the name.
func (w *world) check() {
	if w.checkErr != nil {
		return
	}
	v := w.st.VolumeByName("v")
	if w.lives == nil {
		w.lives = map[uint64]*hybridindex.Table{}
	}
	if _, ok := w.lives[v.RoutingVersion]; !ok {
		t, err := clustermap.RoutingTable(v.SlotOwners, v.Exceptions)
		if err != nil {
			w.checkErr = err
			return
		}
		w.lives[v.RoutingVersion] = t
	}
	for _, k := range w.names {
		for _, t := range w.lives {
			id, _ := t.Route(k.parent, k.name)
			mp := w.mps[id]
			if mp == nil {
				continue
			}
			if _, ok := mp.dentries[k]; mp.servesRead(k) && !ok {
				w.checkErr = fmt.Errorf("event %d: MP %d answers a lookup of %v but does not hold it", w.events, id, k)
				return
			}
		}
	}
}

func (w *world) mp(p *pb.Partition) (*fakeMP, error) {
	m := w.mps[p.Id]
	if m == nil {
		return nil, fmt.Errorf("meta partition %d is not open", p.Id)
	}
	return m, nil
}

func (w *world) SetRouting(ctx context.Context, p *pb.Partition, r *metapb.SetRouting) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.check()
	apply, err := w.event(ctx)
	if !apply {
		return err
	}
	if w.fails() {
		return errors.New("injected set routing failure")
	}
	m, merr := w.mp(p)
	if merr != nil {
		return merr
	}
	if r.Self != p.Id {
		return fmt.Errorf("set routing for %d sent to %d", r.Self, p.Id)
	}
	var prev *hybridindex.Table
	if r.Previous != nil {
		if prev, err = routingTable(r.Previous); err != nil {
			w.checkErr = cmp.Or(w.checkErr, err)
			return err
		}
	}
	cur, cerr := routingTable(r.Current)
	if cerr != nil {
		w.checkErr = cmp.Or(w.checkErr, cerr)
		return cerr
	}
	switch {
	case !m.has || r.Current.Version > m.version,
		r.Current.Version == m.version && stage(prev, r.Sealed) > stage(m.prev, m.sealed):
		m.has, m.version, m.cur, m.prev, m.sealed = true, r.Current.Version, cur, prev, r.Sealed && prev != nil
	}
	return err
}

func routingTable(r *metapb.Routing) (*hybridindex.Table, error) {
	exc := make([]*pb.ExceptionEntry, len(r.GetExceptions()))
	for i, e := range r.GetExceptions() {
		exc[i] = &pb.ExceptionEntry{Name: e.Name, Kind: e.Kind, Mp: e.Mp}
	}
	tab, err := clustermap.RoutingTable(r.GetSlotOwners(), exc)
	if err != nil {
		return nil, fmt.Errorf("invalid routing sent to a partition: %w", err)
	}
	return tab, nil
}

func (w *world) ScanNotOwned(ctx context.Context, p *pb.Partition, afterParent uint64, afterName []byte, limit uint32) ([]*metapb.Dentry, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.check()
	if apply, err := w.event(ctx); !apply || err != nil {
		return nil, false, errLeaderLost
	}
	m, err := w.mp(p)
	if err != nil {
		return nil, false, err
	}
	after := dkey{afterParent, string(afterName)}
	var keys []dkey
	for k := range m.dentries {
		if cmpKey(k, after) > 0 && m.has && !m.owns(m.cur, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, cmpKey)
	more := len(keys) > int(limit)
	keys = keys[:min(len(keys), int(limit))]
	out := make([]*metapb.Dentry, len(keys))
	for i, k := range keys {
		out[i] = proto.Clone(m.dentries[k]).(*metapb.Dentry)
	}
	return out, more, nil
}

func (w *world) Import(ctx context.Context, p *pb.Partition, dentries []*metapb.Dentry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.check()
	apply, err := w.event(ctx)
	if !apply {
		return err
	}
	if w.fails() {
		return errors.New("injected import failure")
	}
	m, merr := w.mp(p)
	if merr != nil {
		return merr
	}
	for _, d := range dentries {
		m.dentries[dkey{d.Parent, string(d.Name)}] = proto.Clone(d).(*metapb.Dentry)
	}
	return err
}

func (w *world) Purge(ctx context.Context, p *pb.Partition, keys []*metapb.DentryKey) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.check()
	apply, err := w.event(ctx)
	if !apply {
		return err
	}
	m, merr := w.mp(p)
	if merr != nil {
		return merr
	}
	if m.has && m.prev == nil {
		for _, key := range keys {
			if k := (dkey{key.Parent, string(key.Name)}); !m.owns(m.cur, k) {
				delete(m.dentries, k)
			}
		}
	}
	return err
}

func (w *world) SetRange(context.Context, *pb.Partition, uint64) error {
	return errors.New("not used by the driver")
}

func (w *world) Stats(context.Context, *pb.Partition, uint32, [][]byte) (*metapb.PartitionStatsResponse, error) {
	return nil, errors.New("not used by the driver")
}

func (w *world) volume(ctx context.Context, name string) (*pb.Volume, map[uint64]*pb.Partition, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Err() != nil {
		return nil, nil, errLeaderLost
	}
	v := w.st.VolumeByName(name)
	if v == nil {
		return nil, nil, nil
	}
	parts := map[uint64]*pb.Partition{}
	for _, id := range v.MetaPartitions {
		parts[id] = proto.Clone(w.st.Map().Partitions[id]).(*pb.Partition)
	}
	return proto.Clone(v).(*pb.Volume), parts, nil
}

func (w *world) propose(ctx context.Context, cmd *pb.Command) (any, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.check()
	apply, err := w.event(ctx)
	if !apply {
		return nil, err
	}
	res, aerr := w.st.Apply(cmd)
	if aerr != nil {
		return nil, aerr
	}
	return res, err
}

// apply applies commands outside any driver.
func (w *world) apply(t *testing.T, cmds ...*pb.Command) {
	t.Helper()
	for _, c := range cmds {
		if _, err := w.st.Apply(c); err != nil {
			t.Fatalf("apply %v: %v", c, err)
		}
	}
}

func (w *world) testDriver() *driver {
	return &driver{cluster: w, ops: w, log: slog.New(slog.NewTextHandler(io.Discard, nil)), backoff: time.Microsecond, maxBackoff: time.Microsecond, attempts: 3, page: 7}
}

// verify checks the end state: no migration, every partition at the live
// routing without a change in progress, and every name on its owner exactly
// once.
func (w *world) verify(t *testing.T, wantVersion uint64) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checkErr != nil {
		t.Fatal(w.checkErr)
	}
	v := w.st.VolumeByName("v")
	if v.Migration != nil || v.RoutingVersion != wantVersion {
		t.Fatalf("volume at version %d with migration %v, want version %d and none", v.RoutingVersion, v.Migration, wantVersion)
	}
	live, err := clustermap.RoutingTable(v.SlotOwners, v.Exceptions)
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range w.mps {
		if !m.has || m.version != wantVersion || m.prev != nil {
			t.Fatalf("MP %d at version %d (has %v, change in progress %v)", id, m.version, m.has, m.prev != nil)
		}
	}
	for i, k := range w.names {
		owner, _ := live.Route(k.parent, k.name)
		for id, m := range w.mps {
			d, ok := m.dentries[k]
			switch {
			case id == owner && !ok:
				t.Fatalf("%v missing on its owner %d", k, owner)
			case id == owner && d.Ino != uint64(1000+i):
				t.Fatalf("%v on %d points at inode %d", k, owner, d.Ino)
			case id != owner && ok:
				t.Fatalf("%v left on %d, owner %d", k, id, owner)
			}
		}
	}
	var total int
	for _, m := range w.mps {
		total += len(m.dentries)
	}
	if total != len(w.names) {
		t.Fatalf("%d dentries held, want %d", total, len(w.names))
	}
}

// scenario prepares a world and starts one migration on it, returning the
// version it goes to.
type scenario struct {
	name  string
	setup func(t *testing.T, w *world) uint64
}

func startCmd(w *world, slots []uint64, exc []*pb.ExceptionEntry, reason string) *pb.Command {
	v := w.st.VolumeByName("v")
	return &pb.Command{Op: &pb.Command_StartMigration{StartMigration: &pb.StartMigration{
		Volume: "v", FromVersion: v.RoutingVersion, SlotOwners: slots, Exceptions: exc, Reason: reason,
	}}}
}

var scenarios = []scenario{
	{"grow", func(t *testing.T, w *world) uint64 {
		w.apply(t, &pb.Command{Op: &pb.Command_AddMetaPartition{AddMetaPartition: &pb.AddMetaPartition{
			Volume: "v", CutEnd: 3*clustermap.InodeRangeStep + 10, Partition: &pb.NewPartition{Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}},
		}}})
		v := w.st.VolumeByName("v")
		id := v.MetaPartitions[len(v.MetaPartitions)-1]
		// A new partition has never had a routing: it accepts every name.
		w.mps[id] = &fakeMP{id: id, dentries: map[dkey]*metapb.Dentry{}}
		slots, _, err := hybridindex.Rebalance(v.SlotOwners, v.MetaPartitions)
		if err != nil {
			t.Fatal(err)
		}
		w.apply(t, startCmd(w, slots, nil, reasonGrow))
		return 2
	}},
	{"balance", func(t *testing.T, w *world) uint64 {
		v := w.st.VolumeByName("v")
		w.apply(t, startCmd(w, v.SlotOwners, []*pb.ExceptionEntry{
			{Name: []byte("Makefile"), Kind: uint32(hybridindex.PathWalk)},
			{Name: []byte("f3"), Kind: uint32(hybridindex.Override), Mp: v.MetaPartitions[0]},
			{Name: []byte("f4"), Kind: uint32(hybridindex.Override), Mp: v.MetaPartitions[2]},
		}, reasonBalance))
		return 2
	}},
	{"shrink after balance", func(t *testing.T, w *world) uint64 {
		v := w.st.VolumeByName("v")
		w.apply(t, startCmd(w, v.SlotOwners, []*pb.ExceptionEntry{{Name: []byte("Makefile"), Kind: uint32(hybridindex.PathWalk)}}, reasonBalance))
		if err := w.testDriver().run(context.Background(), "v"); err != nil {
			t.Fatal(err)
		}
		w.verify(t, 2)
		w.apply(t, startCmd(w, v.SlotOwners, nil, reasonShrink))
		return 3
	}},
}

func TestDriverCompletes(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			w := newWorld(t)
			want := sc.setup(t, w)
			w.events = 0
			if err := w.testDriver().run(context.Background(), "v"); err != nil {
				t.Fatal(err)
			}
			w.verify(t, want)
			if w.events < 10 {
				t.Fatalf("only %d events", w.events)
			}
		})
	}
}

// TestDriverLeaderChange takes leadership away at every event of a
// migration, once before and once after the event takes effect; a fresh
// driver must finish it from the map.
func TestDriverLeaderChange(t *testing.T) {
	for _, sc := range scenarios {
		probe := newWorld(t)
		sc.setup(t, probe)
		probe.events = 0
		if err := probe.testDriver().run(context.Background(), "v"); err != nil {
			t.Fatal(err)
		}
		total := probe.events
		for k := 1; k <= total; k++ {
			for _, applied := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/event%d/applied=%v", sc.name, k, applied), func(t *testing.T) {
					w := newWorld(t)
					want := sc.setup(t, w)
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					w.mu.Lock()
					w.events, w.crashAt, w.applyCrash, w.cancel = 0, k, applied, cancel
					w.mu.Unlock()
					if err := w.testDriver().run(ctx, "v"); !errors.Is(err, context.Canceled) {
						t.Fatalf("first driver: %v, want it stopped", err)
					}
					w.mu.Lock()
					w.crashAt = 0
					w.mu.Unlock()
					if err := w.testDriver().run(context.Background(), "v"); err != nil {
						t.Fatalf("second driver: %v", err)
					}
					w.verify(t, want)
				})
			}
		}
	}
}

// TestDriverRetriesFailures injects failures into SetRouting and Import.
func TestDriverRetriesFailures(t *testing.T) {
	for _, every := range []int{2, 3, 5} {
		for _, sc := range scenarios {
			t.Run(fmt.Sprintf("%s/every%d", sc.name, every), func(t *testing.T) {
				w := newWorld(t)
				want := sc.setup(t, w)
				w.failEvery = every
				if err := w.testDriver().run(context.Background(), "v"); err != nil {
					t.Fatal(err)
				}
				w.verify(t, want)
				if w.failures == 0 {
					t.Fatal("no failure was injected")
				}
			})
		}
	}
}

func TestSyncRouting(t *testing.T) {
	w := newWorld(t)
	v := w.st.VolumeByName("v")
	parts := map[uint64]*pb.Partition{}
	stats := map[uint64]*metapb.PartitionStatsResponse{}
	for _, id := range v.MetaPartitions {
		parts[id] = w.st.Map().Partitions[id]
		stats[id] = &metapb.PartitionStatsResponse{RoutingVersion: 1}
	}
	stale := v.MetaPartitions[1]
	w.mps[stale] = &fakeMP{id: stale, dentries: w.mps[stale].dentries}
	stats[stale].RoutingVersion = 0
	n, err := syncRouting(context.Background(), w, v, parts, stats)
	if err != nil || n != 1 {
		t.Fatalf("pushed %d, err %v; want 1", n, err)
	}
	if m := w.mps[stale]; !m.has || m.version != 1 || m.prev != nil {
		t.Fatalf("MP %d after push: version %d has %v", stale, m.version, m.has)
	}
	v.Migration = &pb.Migration{RoutingVersion: 2}
	if n, _ := syncRouting(context.Background(), w, v, parts, map[uint64]*metapb.PartitionStatsResponse{stale: {}}); n != 0 {
		t.Fatal("pushed during a migration")
	}
}
