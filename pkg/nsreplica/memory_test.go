package nsreplica

import (
	"fmt"
	"runtime"
	"testing"
)

// liveHeap returns the bytes of live heap objects. Two collections let the
// sweeper finish and free what the first one found unreachable, so the figure
// depends only on what is reachable, not on timing.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// fill puts n directories with names like those of the benchmark, spread
// over about 1,000 parents.
func fill(r *Replica, n int, name func(i int) string) {
	for i := range n {
		r.Put(uint64(i%1000+2), name(i), dirEntry(uint64(i+10_000_000), 0o755, 1000, 1000), r.Gen())
	}
}

// TestBytesEstimate checks that Stats().Bytes, computed from counts, stays
// within 25% of the heap the replica really holds.
func TestBytesEstimate(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 200,000 entries")
	}
	const n = 200_000
	names := []struct {
		label string
		name  func(i int) string
	}{
		{"9-byte names", func(i int) string { return fmt.Sprintf("n%08d", i) }},
		{"16-byte names", func(i int) string { return fmt.Sprintf("dir-%012d", i) }},
		{"40-byte names", func(i int) string { return fmt.Sprintf("some-longer-directory-name-%013d", i) }},
	}
	for _, tt := range names {
		t.Run(tt.label, func(t *testing.T) {
			before := liveHeap()
			r := New(0)
			fill(r, n, tt.name)
			after := liveHeap()
			st := r.Stats()
			runtime.KeepAlive(r)

			if st.Entries != n {
				t.Fatalf("%d entries, want %d", st.Entries, n)
			}
			measured := float64(after) - float64(before)
			ratio := float64(st.Bytes) / measured
			t.Logf("measured %.1f bytes/dir, estimated %.1f (ratio %.3f)",
				measured/n, float64(st.Bytes)/n, ratio)
			if ratio < 0.75 || ratio > 1.25 {
				t.Errorf("Stats().Bytes = %d, heap grew by %.0f: off by more than 25%%", st.Bytes, measured)
			}
		})
	}
}

// BenchmarkMemoryPerDirectory reports the heap held per directory for one
// million directories with 9-byte names under about 1,000 parents. Run it
// with -benchtime 1x; the time per op is that of filling the replica.
func BenchmarkMemoryPerDirectory(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		b.StopTimer()
		before := liveHeap()
		b.StartTimer()
		r := New(0)
		fill(r, n, func(i int) string { return fmt.Sprintf("n%08d", i) })
		b.StopTimer()
		after := liveHeap()
		st := r.Stats()
		runtime.KeepAlive(r)
		b.ReportMetric((float64(after)-float64(before))/n, "bytes/dir")
		b.ReportMetric(float64(st.Bytes)/n, "est-bytes/dir")
		b.StartTimer()
	}
}
