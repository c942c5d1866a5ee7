package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMountCapacity mounts a volume created with a 64 MiB capacity: statfs
// shows the capacity and the space left, writing past the capacity fails
// with ENOSPC (within the documented slack of a soft limit), what was
// written before stays intact, and removing files makes room again.
func TestMountCapacity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	startUp(t, dir, "--mount", "")
	const capacity = 64 << 20
	mustCairn(t, "volume", "create", "small", "--capacity", fmt.Sprint(capacity), "--data-dir", dir)
	mp := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mp, 0o755))
	startMount(t, mp, "--data-dir", dir, "small", mp)

	var st syscall.Statfs_t
	must(t, syscall.Statfs(mp, &st))
	if total := st.Blocks * uint64(st.Bsize); total != capacity {
		t.Fatalf("statfs: %d bytes in total, want the capacity %d", total, capacity)
	}
	freeBefore := st.Bavail * uint64(st.Bsize)

	chunk := bytes.Repeat([]byte("0123456789abcdef"), (4<<20)/16)
	var written int
	var files []string
	var enospc error
	for i := 0; i < 40 && enospc == nil; i++ {
		name := filepath.Join(mp, fmt.Sprintf("f%02d", i))
		err := os.WriteFile(name, chunk, 0o644)
		switch {
		case errors.Is(err, syscall.ENOSPC):
			enospc = err
		case err != nil:
			t.Fatalf("write %s: %v", name, err)
		default:
			written += len(chunk)
			files = append(files, name)
		}
		// Usage reaches the master with the data nodes' heartbeats; pace
		// the writes like a slow writer so the soft limit can act.
		time.Sleep(300 * time.Millisecond)
	}
	if enospc == nil {
		t.Fatalf("wrote %d MiB into a %d MiB volume without ENOSPC", written>>20, capacity>>20)
	}
	t.Logf("ENOSPC after %d MiB: %v", written>>20, enospc)
	if written > capacity+16<<20 {
		t.Fatalf("wrote %d MiB before ENOSPC, more than the capacity (%d MiB) and its slack", written>>20, capacity>>20)
	}
	must(t, syscall.Statfs(mp, &st))
	if free := st.Bavail * uint64(st.Bsize); free >= freeBefore {
		t.Fatalf("statfs free space did not drop: %d before, %d after %d MiB", freeBefore, free, written>>20)
	}
	for _, name := range files {
		got, err := os.ReadFile(name)
		must(t, err)
		if !bytes.Equal(got, chunk) {
			t.Fatalf("%s changed after ENOSPC", name)
		}
	}

	// Removing files gives the space back (the deletion collector frees the
	// extents, the data nodes report it).
	for _, name := range files {
		must(t, os.Remove(name))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := os.WriteFile(filepath.Join(mp, "again"), chunk, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENOSPC) || time.Now().After(deadline) {
			t.Fatalf("write after removing everything: %v", err)
		}
		time.Sleep(time.Second)
	}
}
