package dataclient

import "testing"

// TestSequentialRuns: a run starts at 0 or where the last read ended, and
// reads of a run that arrive out of order (the kernel's read-ahead sends
// several at once) stay in it while they are near its furthest end; a
// random reader is never taken for a run.
func TestSequentialRuns(t *testing.T) {
	const mib = 1 << 20
	type read struct {
		off, n int64
		seq    bool
	}
	for _, tc := range []struct {
		name  string
		reads []read
	}{
		{"in order", []read{{0, mib, true}, {mib, mib, true}, {2 * mib, mib, true}}},
		{"out of order within the window", []read{{0, mib, true}, {2 * mib, mib, true}, {mib, mib, true}, {4 * mib, mib, true}, {3 * mib, mib, true}, {5 * mib, mib, true}}},
		{"a jump far ahead ends the run", []read{{0, mib, true}, {mib, mib, true}, {100 * mib, mib, false}, {50 * mib, mib, false}}},
		// One that happens to follow the last is taken for a run (and
		// fetched with read-ahead), but the next near one is not.
		{"random 4 KiB reads", []read{{37 * 4096, 4096, false}, {9 * 4096, 4096, false}, {10 * 4096, 4096, true}, {12 * 4096, 4096, false}, {901 * 4096, 4096, false}, {902 * 4096, 4096, true}, {880 * 4096, 4096, false}}},
		{"random reads near each other are not a run", []read{{5 * mib, 4096, false}, {5*mib + 8192, 4096, false}, {5*mib - 65536, 4096, false}}},
		{"random 1 MiB reads near each other are not a run", []read{{5 * mib, mib, false}, {7 * mib, mib, false}, {3 * mib, mib, false}}},
		{"back to the start", []read{{0, mib, true}, {mib, mib, true}, {0, mib, true}, {mib, mib, true}}},
	} {
		r := &Reader{chunk: mib, ahead: 8, lastEnd: -1}
		for i, rd := range tc.reads {
			if got := r.sequentialLocked(rd.off, rd.off+rd.n); got != rd.seq {
				t.Errorf("%s: read %d at %d: sequential %v, want %v", tc.name, i, rd.off, got, rd.seq)
			}
		}
	}
}
