package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/loopback"
)

// metricValue reads one un-labelled sample from a Prometheus endpoint.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, n := scrapeSum(t, addr, name, false)
	if n == 0 {
		t.Fatalf("metric %s not served by %s", name, addr)
	}
	return v
}

// scrapeSum sums the samples of metric name at a Prometheus endpoint (with
// labelled, every label set) and says how many there were.
func scrapeSum(t *testing.T, addr, name string, labelled bool) (sum float64, n int) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || (f[0] != name && !(labelled && strings.HasPrefix(f[0], name+"{"))) {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("metric %s: %v", f[0], err)
		}
		sum, n = sum+v, n+1
	}
	return sum, n
}

// diskUsage is the space the files under the data nodes' dirs take.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, u := range nodeUsage(t, dir) {
		n += u
	}
	return n
}

// chunkStatus is the part of `cairn status --json` about one volume's chunks.
type chunkStatus struct {
	Volumes []struct {
		Name   string `json:"name"`
		Layout string `json:"layout"`
		Chunks *struct {
			Entries         uint64  `json:"entries"`
			StoredBytes     uint64  `json:"stored_bytes"`
			ReferencedBytes uint64  `json:"referenced_bytes"`
			DedupRatio      float64 `json:"dedup_ratio"`
		} `json:"chunks"`
	} `json:"volumes"`
}

func volumeChunks(t *testing.T, dir, volume string) (layout string, stored, referenced uint64, ratio float64) {
	t.Helper()
	var s chunkStatus
	out := mustCairn(t, "status", "--data-dir", dir, "--json")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	for _, v := range s.Volumes {
		if v.Name == volume {
			if v.Chunks == nil {
				t.Fatalf("status shows no chunk statistics for %s:\n%s", volume, out)
			}
			return v.Layout, v.Chunks.StoredBytes, v.Chunks.ReferencedBytes, v.Chunks.DedupRatio
		}
	}
	t.Fatalf("volume %s not in status:\n%s", volume, out)
	return
}

// TestChunkedMount drives a chunked volume through a real mount: the same
// bytes under two names are stored once (disk usage and the dedup ratio
// agree), an insert in the middle of a cached file, done as a POSIX
// program must (write the new bytes and the old tail, fsync), sends under
// 2% of the file to the data nodes (the mount's byte counter), the
// contents stay exact, cairn gc finds every count right, and removing
// the files gives the space back (the collector reclaims chunks without
// references after the grace, 1 s here).
// CAIRN_LONG=1 uses 1 GiB files instead of 64 MiB; CAIRN_CHUNKED_MIB=N
// uses N MiB.
func TestChunkedMount(t *testing.T) {
	size := 64 << 20
	if os.Getenv("CAIRN_LONG") != "" {
		size = 1 << 30
	}
	if v := os.Getenv("CAIRN_CHUNKED_MIB"); v != "" {
		mib, err := strconv.Atoi(v)
		if err != nil || mib < 1 || mib > 16<<10 {
			t.Fatalf("CAIRN_CHUNKED_MIB=%q: want a size in MiB from 1 to 16384", v)
		}
		size = mib << 20
	}
	dir := filepath.Join(t.TempDir(), "cdc")
	startUp(t, dir, "--mount", "", "--chunk-grace", "1s")
	mustCairn(t, "volume", "create", "cdc", "--layout", "cdc", "--data-dir", dir)
	ports, err := loopback.FreePorts(1)
	must(t, err)
	mp := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mp, 0o755))
	startMount(t, mp, "--data-dir", dir, "--metrics", ports[0], "cdc", mp)
	sent := func() float64 { return metricValue(t, ports[0], "cairn_client_data_sent_bytes_total") }

	rng := rand.New(rand.NewPCG(11, 12))
	data := make([]byte, size)
	for i := 0; i < len(data); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	du0 := diskUsage(t, dir)
	start := time.Now()
	must(t, os.WriteFile(filepath.Join(mp, "a"), data, 0o644))
	t.Logf("wrote %d MiB in %s", size>>20, time.Since(start).Round(time.Millisecond))
	du1 := diskUsage(t, dir)
	s1 := sent()
	must(t, os.WriteFile(filepath.Join(mp, "b"), data, 0o644))
	du2 := diskUsage(t, dir)
	second := sent() - s1
	t.Logf("disk usage %d -> %d -> %d MiB; second copy sent %.0f bytes", du0>>20, du1>>20, du2>>20, second)
	if second > float64(size)/100 {
		t.Fatalf("the second copy sent %.0f bytes to the data nodes, want almost none (dedup)", second)
	}
	// Three replicas of each chunk: the first copy takes about 3x its size
	// on disk, the second next to nothing.
	if grow1, grow2 := du1-du0, du2-du1; grow2 > grow1/20 {
		t.Fatalf("disk usage grew %d MiB for the first copy and %d MiB for the second, want the second under 5%% of the first", grow1>>20, grow2>>20)
	}
	layout, stored, referenced, ratio := volumeChunks(t, dir, "cdc")
	t.Logf("status: layout %s, stored %d MiB, referenced %d MiB, dedup %.3f", layout, stored>>20, referenced>>20, ratio)
	if layout != "cdc" || ratio < 1.95 || ratio > 2.05 || stored < uint64(size) || stored > uint64(size)+uint64(size)/50 {
		t.Fatalf("status: layout %s, stored %d, dedup ratio %.3f; want cdc, about %d bytes stored, ratio 2", layout, stored, ratio, size)
	}

	// Insert 4 KiB in the middle of a, cached by reading it first.
	name := filepath.Join(mp, "a")
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	must(t, err)
	whole := make([]byte, size)
	if _, err := f.ReadAt(whole, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, data) {
		t.Fatal("a reads back other bytes than were written")
	}
	off := size/2 + 12345
	ins := bytes.Repeat([]byte("inserted"), 512)
	s2 := sent()
	start = time.Now()
	_, err = f.WriteAt(append(append([]byte(nil), ins...), whole[off:]...), int64(off))
	must(t, err)
	must(t, f.Sync())
	elapsed := time.Since(start)
	must(t, f.Close())
	insertSent := sent() - s2
	t.Logf("insert of %d bytes at %d: %.0f bytes sent (%.3f%% of the file) in %s", len(ins), off, insertSent, 100*insertSent/float64(size), elapsed.Round(time.Millisecond))
	if insertSent >= 0.02*float64(size) {
		t.Fatalf("insert sent %.0f bytes, want under 2%% of %d", insertSent, size)
	}
	want := append(append(append([]byte(nil), data[:off]...), ins...), data[off:]...)
	got, err := os.ReadFile(name)
	must(t, err)
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatal("a differs from the expected contents after the insert")
	}
	got, err = os.ReadFile(filepath.Join(mp, "b"))
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatal("b changed when a was edited")
	}

	// The insert's dropped chunks reach their shards through the meta
	// nodes' collector within a few rounds; then every count must match.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := cairn(t, "gc", "cdc", "--dry-run", "--data-dir", dir)
		if r.code == 0 && strings.Contains(r.stdout, "clean") {
			break
		}
		if r.code != 0 || time.Now().After(deadline) {
			t.Fatalf("cairn gc --dry-run (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
		}
		time.Sleep(2 * time.Second)
	}

	must(t, os.Remove(filepath.Join(mp, "a")))
	must(t, os.Remove(filepath.Join(mp, "b")))
	deadline = time.Now().Add(90 * time.Second)
	for {
		du := diskUsage(t, dir)
		_, stored, _, _ := volumeChunks(t, dir, "cdc")
		if stored == 0 && du-du0 < (du2-du0)/10 {
			t.Logf("after removing both files: disk usage %d MiB, no chunk stored", du>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after removing both files: disk usage %d MiB (started at %d, %d with the files), %d chunk bytes still indexed",
				du>>20, du0>>20, du2>>20, stored)
		}
		time.Sleep(time.Second)
	}
}
