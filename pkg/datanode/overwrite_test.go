package datanode

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"
)

func TestOverwriteCommand(t *testing.T) {
	data := []byte("new bytes")
	cmd := encodeOverwrite(7, 12345, data)
	ext, off, got, err := decodeOverwrite(cmd)
	if err != nil || ext != 7 || off != 12345 || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d %d %q %v", ext, off, got, err)
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
		if _, _, _, err := decodeOverwrite(tc.b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func testPartition() *partition {
	return &partition{stale: map[uint64]uint64{}, kick: make(chan struct{}, 1), log: slog.New(slog.NewTextHandler(io.Discard, nil)), recent: map[uint64]time.Time{}}
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
	for _, bad := range [][]byte{nil, {snapshotVersion, 0, 5, 0, 0, 0}, {9, 0, 0, 0, 0, 0}} {
		if err := (&overwriteSM{p: testPartition()}).Restore(bad); err == nil {
			t.Errorf("snapshot %v accepted", bad)
		}
	}
}
