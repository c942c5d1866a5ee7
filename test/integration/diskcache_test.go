package integration

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/loopback"
)

// TestMountDiskCache reads a file at random through a mount whose memory
// cache is 1 MiB and whose disk cache holds the whole file, with O_DIRECT
// so that every read reaches the mount: the blocks land in the disk cache;
// then the cache file is overwritten with zeros on disk, and every byte
// read again is still the file's (the CRCs catch the damage and the mount
// reads the data nodes instead); removing the file through the mount takes
// its cache file off the disk, and unmounting removes the cache.
func TestMountDiskCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dc")
	startUp(t, dir, "--mount", "")
	ports, err := loopback.FreePorts(1)
	must(t, err)
	mp := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mp, 0o755))
	cacheDir := filepath.Join(t.TempDir(), "cache")
	m := startMount(t, mp, "--data-dir", dir, "--metrics", ports[0], "-o",
		"file_cache_mb=1,cache_size_mb=64,cache_free_ratio=0,cache_dir="+cacheDir, "default", mp)
	metric := func(name string) float64 { return metricValue(t, ports[0], "cairn_client_disk_cache_"+name) }

	const size, piece = 8 << 20, 4096
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	name := filepath.Join(mp, "f")
	must(t, os.WriteFile(name, data, 0o644))

	// readAll reads one piece in each 128 KiB block, in random order,
	// with O_DIRECT, and checks it.
	buf, err := syscall.Mmap(-1, 0, piece, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	must(t, err)
	defer syscall.Munmap(buf)
	readAll := func(at int64) {
		t.Helper()
		fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_DIRECT, 0)
		must(t, err)
		defer syscall.Close(fd)
		for _, b := range rng.Perm(size / (128 << 10)) {
			off := int64(b)*(128<<10) + at
			n, err := syscall.Pread(fd, buf, off)
			if err != nil || n != piece {
				t.Fatalf("read %d bytes at %d: %d, %v", piece, off, n, err)
			}
			if !bytes.Equal(buf, data[off:off+piece]) {
				t.Fatalf("wrong bytes at %d", off)
			}
		}
	}
	readAll(0)
	eventually(t, 10*time.Second, func() error {
		// A read may count as the start of a sequential run, which
		// streams past the cache: most blocks, not all, are there.
		if got := metric("bytes"); got < size*7/8 {
			return fmt.Errorf("the disk cache holds %v bytes of the file's %d", got, size)
		}
		return nil
	})
	readAll(8192)
	if metric("hits_total") == 0 {
		t.Fatal("no read was served from the disk cache")
	}

	// Overwrite the cache's copy of the file with zeros.
	var files []string
	filepath.Walk(cacheDir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Name() != "LOCK" {
			files = append(files, path)
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("cache files %v: want the one file's", files)
	}
	f, err := os.OpenFile(files[0], os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(make([]byte, size), 0)
	must(t, err)
	must(t, f.Close())
	readAll(16384)
	if metric("corrupt_total") == 0 {
		t.Fatal("the damaged cache file was not noticed")
	}

	must(t, os.Remove(name))
	eventually(t, 10*time.Second, func() error {
		if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
			return fmt.Errorf("the removed file's cache file is still there (%v)", err)
		}
		return nil
	})

	must(t, m.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("cairn mount did not stop:\n%s", m.output())
	}
	if es, err := os.ReadDir(cacheDir); err != nil || len(es) != 0 {
		t.Fatalf("after unmount the cache directory holds %v (%v)", es, err)
	}
}
