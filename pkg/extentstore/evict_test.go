package extentstore

import (
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

func resident(t *testing.T, path string) int {
	t.Helper()
	n, _, err := diskfs.Resident(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEvict checks that Evict drops a large extent's fsynced bytes from the
// page cache and leaves alone what it must: a small extent's pages, and
// bytes not yet committed.
func TestEvict(t *testing.T) {
	dir := t.TempDir()
	if !diskfs.CachesPages(dir) {
		t.Skip("the page cache of tmpfs is its storage: nothing to evict")
	}
	s, err := Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	const n = 1 << 20
	large, err := s.NewExtent(KindLarge)
	if err != nil {
		t.Fatal(err)
	}
	small, err := s.NewExtent(KindSmall)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, large, randBytes(rng, n))
	mustAppend(t, s, small, randBytes(rng, 64<<10)) // past the journal's bound: fsynced
	// Not committed yet: nothing goes.
	s.Evict(large, 0, n)
	before := resident(t, s.extPath(large))
	if before < n/4096/2 {
		t.Fatalf("only %d pages of a fresh 1 MiB write are cached", before)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.Evict(small, 0, 64<<10)
	if got := resident(t, s.extPath(small)); got < 8 {
		t.Fatalf("a small extent's pages were evicted: %d resident", got)
	}
	s.Evict(large, 0, n)
	if got := resident(t, s.extPath(large)); got > 1 {
		t.Fatalf("after Evict of a committed large extent: %d of %d pages still cached", got, before)
	}
	// The bytes read back from the disk, checked against their CRCs.
	if got := readAll(t, s, large, 64<<10); len(got) != n {
		t.Fatalf("read %d bytes back", len(got))
	}
}
