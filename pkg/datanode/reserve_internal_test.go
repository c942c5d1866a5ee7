package datanode

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestReserve walks a data node's reserve through what its disk says:
// taken while there is room, given up (and new data refused) once free
// space falls below half of it, taken back only when a tenth of the disk
// is free again.
func TestReserve(t *testing.T) {
	const size, total = 1000, 100_000
	type step struct {
		free     uint64
		full     bool  // new data refused after the check
		fileSize int64 // what the reserve file holds after it
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"room: taken", []step{{50_000, false, size}, {40_000, false, size}}},
		{"own data fills it: given up, then back", []step{{50_000, false, size}, {600, false, size}, {499, true, 0}, {5_000, true, 0}, {10_000, false, size}}},
		{"filled by someone else at once", []step{{50_000, false, size}, {0, true, 0}, {1_500, true, 0}, {20_000, false, size}}},
		{"no room at start", []step{{1_500, true, 0}, {9_999, true, 0}, {10_000, false, size}}},
		{"nearly none at start", []step{{100, true, 0}, {50_000, false, size}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var free uint64
			fs := func(string) (uint64, uint64, error) { return free, total, nil }
			free = tt.steps[0].free
			r := newReserve(dir, size, fs, slog.New(slog.DiscardHandler))
			for i, st := range tt.steps {
				free = st.free
				if i > 0 {
					r.check()
				}
				var got int64
				if fi, err := os.Stat(filepath.Join(dir, ReserveName)); err == nil {
					got = fi.Size()
				}
				if r.Full() != st.full || got != st.fileSize {
					t.Fatalf("step %d (free %d): full %v, reserve file %d bytes; want %v, %d", i, st.free, r.Full(), got, st.full, st.fileSize)
				}
			}
		})
	}
	if r := newReserve(t.TempDir(), -1, func(string) (uint64, uint64, error) { return 0, total, nil }, slog.New(slog.DiscardHandler)); r.Full() {
		t.Error("a node with no reserve refuses data")
	}
	var none *reserve
	if none.Full() {
		t.Error("a node without a data dir refuses data")
	}
}
