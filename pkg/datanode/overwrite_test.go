package datanode

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

func TestOverwriteCommand(t *testing.T) {
	data := []byte("new bytes")
	cmd := encodeOverwrite(99, 7, 12345, data)
	id, ext, off, got, err := decodeOverwrite(cmd)
	if err != nil || id != 99 || ext != 7 || off != 12345 || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d %d %d %q %v", id, ext, off, got, err)
	}
	// A command of the release before ids (version 1) still reads, id 0.
	v1 := append([]byte{overwriteV1}, cmd[1:17]...)
	v1 = append(v1, cmd[25:]...)
	if id, ext, off, got, err := decodeOverwrite(v1); err != nil || id != 0 || ext != 7 || off != 12345 || !bytes.Equal(got, data) {
		t.Fatalf("version 1: %d %d %d %q %v", id, ext, off, got, err)
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", cmd[:overwriteHeaderLen-1]},
		{"no data", cmd[:overwriteHeaderLen]},
		{"version", append([]byte{9}, cmd[1:]...)},
		{"data corrupt", append(append([]byte(nil), cmd[:len(cmd)-1]...), 'X')},
		{"offset huge", func() []byte {
			b := append([]byte(nil), cmd...)
			b[16] = 0xff
			return b
		}()},
	}
	for _, tc := range bad {
		if _, _, _, _, err := decodeOverwrite(tc.b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func testPartition() *partition {
	return &partition{stale: map[uint64]uint64{}, overwritten: map[uint64]uint64{}, kick: make(chan struct{}, 1), log: slog.New(slog.NewTextHandler(io.Discard, nil)), recent: map[uint64]time.Time{}}
}

// The snapshot carries the stale marks: reopening restores them; a
// snapshot installed from the leader marks everything stale instead.
func TestSnapshotCarriesStaleMarks(t *testing.T) {
	p := testPartition()
	sm := &overwriteSM{p: p}
	p.markStale(3)
	p.markStale(9)
	snap, err := sm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	q := testPartition()
	reopened := &overwriteSM{p: q}
	if err := reopened.Restore(snap); err != nil {
		t.Fatal(err)
	}
	marks, all, _ := q.staleState()
	if len(marks) != 2 || all != 0 {
		t.Fatalf("reopened marks %v all %d", marks, all)
	}
	reopened.running.Store(true)
	if err := reopened.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if _, all, _ := q.staleState(); all == 0 {
		t.Fatal("an installed snapshot did not mark every extent stale")
	}
	// Marks made after a pass started survive its clearing.
	_, _, gen := q.staleState()
	q.markStale(11)
	q.clearStale(gen, true)
	marks, all, _ = q.staleState()
	if all != 0 || len(marks) != 1 || marks[11] == 0 {
		t.Fatalf("after clearing up to %d: marks %v all %d", gen, marks, all)
	}
	for _, bad := range [][]byte{nil, {snapshotVersion, 0, 5, 0, 0, 0}, {snapshotVersion, 0, 0, 0, 0, 0}, {snapshotV1, 0, 1, 0, 0, 0}, {9, 0, 0, 0, 0, 0}} {
		if err := (&overwriteSM{p: testPartition()}).Restore(bad); err == nil {
			t.Errorf("snapshot %v accepted", bad)
		}
	}
}

// The done ring keeps the last doneOverwrites ids, oldest first, with
// whether each failed here, and survives a snapshot.
func TestDoneRing(t *testing.T) {
	var r doneRing
	for id := uint64(1); id <= doneOverwrites+10; id++ {
		r.add(id, id%3 == 0)
		r.add(id, id%3 == 0) // twice: once
	}
	r.add(0, false)
	ids := r.list()
	if len(ids) != doneOverwrites || ids[0] != 11 || ids[len(ids)-1] != doneOverwrites+10 {
		t.Fatalf("%d ids from %d to %d", len(ids), ids[0], ids[len(ids)-1])
	}
	if seen, _ := r.get(10); seen {
		t.Fatal("id 10 not forgotten")
	}
	if seen, failed := r.get(12); !seen || !failed {
		t.Fatalf("id 12: seen %v, failed %v", seen, failed)
	}
	r.add(12, false) // its retry applied
	if seen, failed := r.get(12); !seen || failed {
		t.Fatalf("id 12 after its retry: seen %v, failed %v", seen, failed)
	}
	sm := &overwriteSM{p: testPartition(), done: r}
	snap, err := sm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back := &overwriteSM{p: testPartition()}
	if err := back.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := back.done.list(); !slices.Equal(got, ids) {
		t.Fatalf("after a snapshot: %d ids, want %d", len(got), len(ids))
	}
	for _, id := range []uint64{12, 15, 16} {
		_, want := r.get(id)
		if _, got := back.done.get(id); got != want {
			t.Errorf("id %d after a snapshot: failed here %v, want %v", id, got, want)
		}
	}
	// A snapshot of the release before ids (version 1) restores no ids.
	v1 := []byte{snapshotV1, 0, 1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}
	if err := back.Restore(v1); err != nil || len(back.done.list()) != 0 {
		t.Fatalf("version 1 snapshot: %v, %d ids", err, len(back.done.list()))
	}
}

// A retry of an overwrite that failed here is applied while its extent
// awaits repair (the repair orders it) and left out once the repair is
// done; one applied here is always left out.
func TestRetriedOnlyWhileMarked(t *testing.T) {
	p := testPartition()
	sm := &overwriteSM{p: p}
	sm.done.add(1, false)
	sm.done.add(2, true)
	p.markStale(9)
	for _, tc := range []struct {
		id, ext uint64
		want    bool
	}{
		{1, 9, true}, {1, 5, true}, // applied here
		{2, 9, false}, // failed here, extent still marked
		{2, 5, true},  // failed here, extent repaired
		{3, 9, false}, // never seen
		{0, 9, false}, // no id
	} {
		if got := sm.retried(tc.id, tc.ext); got != tc.want {
			t.Errorf("id %d of extent %d: retried %v, want %v", tc.id, tc.ext, got, tc.want)
		}
	}
}
