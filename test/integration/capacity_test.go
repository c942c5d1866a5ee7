package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

// TestMountCapacity mounts a volume created with a 64 MiB capacity: statfs
// shows the capacity and the space left, writing past the capacity fails
// with ENOSPC (within the documented slack of a soft limit), and so does a
// new extent a client identity asks a data node for directly, what was
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

	// A client that skips Cairn's library is held to the capacity by the
	// data nodes themselves: a new extent of the full volume is refused.
	clientDir := filepath.Join(t.TempDir(), "client")
	mustCairn(t, "client", "create", "raw", "--data-dir", dir, "--volume", "small", "--out", clientDir)
	st2 := waitLeaders(t, dir)
	vol := volumeInfo(t, masterAddr(st2), adminTLS(t, dir), "small")
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	var primary string
	for _, p := range vol.Partitions {
		if p.Id == vol.Volume.DataPartitions[0] {
			for _, pr := range l.Procs {
				if pr.Role == "data" && pr.ID == p.Replicas[0] {
					primary = pr.DataAddr
				}
			}
		}
	}
	if primary == "" {
		t.Fatalf("no data address for the primary of partition %d", vol.Volume.DataPartitions[0])
	}
	raw := loadTLS(t, clientDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := dataproto.Dial(ctx, primary, dataproto.ConnOptions{TLS: raw, ReadTimeout: 10 * time.Second})
	must(t, err)
	defer conn.Close()
	pid := vol.Volume.DataPartitions[0]
	h, _, err := conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpCreateExtent, Partition: pid, Epoch: vol.Epoch}})
	rawWritten := 0
	if err == nil {
		// Appends to its own extent, paced at 4 MiB/s, until the data node
		// refuses; the SDK's own check left some room. The verdict lags
		// the writes by the data nodes' usage measure (every 5 s) and two
		// heartbeats.
		packet := bytes.Repeat([]byte{'r'}, 1<<20)
		for rawWritten < 96<<20 && err == nil {
			_, _, err = conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpAppend, Partition: pid, Extent: h.Extent,
				Offset: int64(rawWritten), Epoch: vol.Epoch}, Payload: packet})
			if err == nil {
				rawWritten += len(packet)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if dataproto.CodeOf(err) != dataproto.CodeVolumeFull {
		t.Fatalf("a client writing to the full volume directly: %v after %d MiB, want volume full", err, rawWritten>>20)
	}
	t.Logf("the data node refused the client after %d MiB of its own: %v", rawWritten>>20, err)
	if written+rawWritten > capacity+48<<20 {
		t.Errorf("%d MiB through the mount and %d MiB directly in a %d MiB volume: past the capacity and its slack (about 8 s of writes)", written>>20, rawWritten>>20, capacity>>20)
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
