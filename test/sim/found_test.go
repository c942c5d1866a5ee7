package sim

import "testing"

// foundSeeds are seeds that found a bug, kept as regression tests. A seed
// does not replay exactly (the Go scheduler is not the seed's), so each
// is one that ran into its bug in at least one of a few runs before the
// fix; TestFoundSeeds runs each foundRuns times. Each fix also has a
// deterministic test, named here.
var foundSeeds = []foundSeed{
	{1009, "disk-full", "alignment skipped a block holding a deleted file's hole and cleared the mark (TestFullReplicaRepairsAFileBesideAFreedOne)"},
	{1018, "disk-full", "alignment skipped a block holding a deleted file's hole and cleared the mark"},
	{1002, "disk-full", "a follower cleared its marks against a store being reopened (TestListPageOfAClosedStore)"},
	{1050, "disk-full", "a follower cleared its marks against a store being reopened"},
	{5127, "crash", "two faults on one server stopped the simulated clock (the harness's process lock)"},
	{5178, "slow", "a rename's placement did not know its own earlier replace and handed the rename to the client (TestRenameOnServer, a retry of a placement over a name whose answer was lost)"},
	{1011, "", "a rename's placement did not know its own earlier replace and handed the rename to the client"},
	{2859, "", "a refused rename answered EXDEV although the resolver had rolled it forward (TestRenameOnServer, a refused Txn whose new name the resolver rolled forward)"},
}

// foundSeed is a seed that found a bug: the -faults flag it was found
// with, and the bug.
type foundSeed struct {
	seed        uint64
	faults, bug string
}

// foundRuns is how often TestFoundSeeds runs each found seed.
const foundRuns = 3

// TestFoundSeeds runs every seed of foundSeeds foundRuns times, two at a
// time, each in a process of its own as TestSeeds does, and fails on any
// anomaly or error.
func TestFoundSeeds(t *testing.T) {
	if *one != 0 {
		t.Skip("-one runs TestSeed alone")
	}
	var runs []foundSeed
	for range foundRuns {
		runs = append(runs, foundSeeds...)
	}
	twoAtATime(runs, func(f foundSeed) {
		if r := runSeedProcess(f.seed, f.faults); r.failed() {
			t.Errorf("seed %d (faults %q), which once found: %s\n  %s\n%s\nreplay: %s", f.seed, f.faults, f.bug, r.what(), r.Kept, replayCommand(f.seed, f.faults))
		}
	})
}
