package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// nodeUsage is the space the files under each data node's dir take, by
// dir (as du counts it: allocated blocks).
func nodeUsage(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	roots, _ := filepath.Glob(filepath.Join(dir, "data-*"))
	use := map[string]int64{}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if info, err := d.Info(); err == nil {
				use[filepath.Base(root)] += info.Sys().(*syscall.Stat_t).Blocks * 512
			}
			return nil
		})
	}
	return use
}

// TestDeletedFilesGiveSpaceBack writes 20,000 files of 4 KiB through the
// mount, removes them (rm -rf), and expects every data node to give back at
// least 90% of the space they took within 60 s: the extents' holes are
// punched, and the partitions' metadata logs, which carry small files'
// bytes until they are rewritten, are rewritten once idle.
func TestDeletedFilesGiveSpaceBack(t *testing.T) {
	const (
		files   = 20000
		dirs    = 20
		size    = 4 << 10
		workers = 8
		within  = 60 * time.Second
	)
	dir := t.TempDir()
	_, mnt := startMounted(t, dir)
	root := filepath.Join(mnt, "many")
	for d := range dirs {
		must(t, os.MkdirAll(filepath.Join(root, fmt.Sprint("d", d)), 0o755))
	}
	base := nodeUsage(t, dir)
	if len(base) == 0 {
		t.Fatalf("no data node dirs under %s", dir)
	}

	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += workers {
				p := filepath.Join(root, fmt.Sprint("d", i%dirs), fmt.Sprint("f", i))
				if err := os.WriteFile(p, data, 0o644); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d files of %d bytes written in %s", files, size, time.Since(start).Round(time.Millisecond))
	peak := nodeUsage(t, dir)

	start = time.Now()
	for d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := os.RemoveAll(filepath.Join(root, fmt.Sprint("d", d))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	removed := time.Now()
	t.Logf("removed in %s", removed.Sub(start).Round(time.Millisecond))

	back := func(now map[string]int64) (worst float64, who string) {
		worst = 1
		for node, p := range peak {
			took := p - base[node]
			if took <= 0 {
				t.Fatalf("%s took no space for %d files (%d bytes before, %d after)", node, files, base[node], p)
			}
			if f := float64(p-now[node]) / float64(took); f < worst {
				worst, who = f, node
			}
		}
		return worst, who
	}
	for {
		now := nodeUsage(t, dir)
		worst, who := back(now)
		if worst >= 0.9 {
			t.Logf("every data node gave back at least %.0f%% of the space the files took, %s after the removal", 100*worst, time.Since(removed).Round(time.Second))
			for node := range peak {
				t.Logf("%s: %d MB before, %d MB with the files, %d MB now", node, base[node]>>20, peak[node]>>20, now[node]>>20)
			}
			return
		}
		if time.Since(removed) > within {
			for node := range peak {
				t.Logf("%s: %d MB before, %d MB with the files, %d MB now", node, base[node]>>20, peak[node]>>20, now[node]>>20)
			}
			t.Fatalf("%s gave back %.0f%% of the space the files took within %s, want 90%%", who, 100*worst, within)
		}
		time.Sleep(2 * time.Second)
	}
}
