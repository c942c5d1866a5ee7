package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMountOpts(t *testing.T) {
	cases := []struct {
		in      []string
		want    mountOpts
		wantErr string
	}{
		{in: nil, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB}},
		{in: []string{"entry_timeout=0,attr_timeout=2.5"}, want: mountOpts{entryTimeout: -1, attrTimeout: 2500 * time.Millisecond, readAheadKB: defaultReadAheadKB}},
		{in: []string{"op_timeout=5", "allow_other"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, opTimeout: 5 * time.Second, allowOther: true, readAheadKB: defaultReadAheadKB}},
		{in: []string{"read_ahead_kb=0"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second}},
		{in: []string{"read_ahead_kb=-4"}, wantErr: "want KiB"},
		{in: []string{"read_ahead_kb"}, wantErr: "want KiB"},
		{in: []string{"file_cache_mb=16"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, fileCacheBytes: 16 << 20}},
		{in: []string{"file_cache_mb=0"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, fileCacheBytes: -1}},
		{in: []string{"file_cache_mb=-1"}, wantErr: "want MiB"},
		{in: []string{"file_cache_mb"}, wantErr: "want MiB"},
		{in: []string{"memory_mb=1024"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, memoryLimit: 1 << 30}},
		{in: []string{"memory_mb=0"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, memoryLimit: -1}},
		{in: []string{"memory_mb=16"}, wantErr: "at least 96"},
		{in: []string{"memory_mb=96"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, memoryLimit: 96 << 20}},
		{in: []string{"memory_mb=256,file_cache_mb=256"}, wantErr: "at least 320, or a smaller file_cache_mb"},
		{in: []string{"memory_mb=x"}, wantErr: "want MiB"},
		{in: []string{"memory_mb=-1"}, wantErr: "want MiB"},
		{in: []string{"op_timeout=0"}, wantErr: "more than 0 seconds"},
		{in: []string{"op_timeout"}, wantErr: "want seconds"},
		{in: []string{"attr_timeout=-1"}, wantErr: "want seconds"},
		{in: []string{"entry_timeout=4000"}, wantErr: "want seconds"},
		{in: []string{"cache_dir=/c,cache_size_mb=100,cache_free_ratio=0.2"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, cacheDir: "/c", cacheBytes: 100 << 20, cacheFreeRatio: 0.2}},
		{in: []string{"cache_size_mb=0,cache_free_ratio=0"}, want: mountOpts{entryTimeout: time.Second, attrTimeout: time.Second, readAheadKB: defaultReadAheadKB, cacheBytes: -1, cacheFreeRatio: -1}},
		{in: []string{"cache_dir=relative"}, wantErr: "want an absolute directory"},
		{in: []string{"cache_dir"}, wantErr: "want an absolute directory"},
		{in: []string{"cache_size_mb=-5"}, wantErr: "want MiB"},
		{in: []string{"cache_free_ratio=1.5"}, wantErr: "between 0 and 0.9"},
		{in: []string{"cache_free_ratio=x"}, wantErr: "between 0 and 0.9"},
		{in: []string{"nosuch"}, wantErr: "unknown mount option"},
	}
	for _, c := range cases {
		got, err := parseMountOpts(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// The default soft limit makes room for a file cache larger than its
// default; an explicit limit, or none, is taken as given.
func TestMountMemoryLimit(t *testing.T) {
	cases := []struct {
		in   string
		want int64
	}{
		{"", defaultMountMemoryLimit},
		{"file_cache_mb=16", defaultMountMemoryLimit},
		{"file_cache_mb=0", defaultMountMemoryLimit},
		{"file_cache_mb=512", defaultMountMemoryLimit + 480<<20},
		{"file_cache_mb=512,memory_mb=2048", 2 << 30},
		{"memory_mb=0", -1},
	}
	for _, c := range cases {
		o, err := parseMountOpts([]string{c.in})
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if got := o.memoryLimitBytes(); got != c.want {
			t.Errorf("%q: soft limit %d MiB, want %d MiB", c.in, got>>20, c.want>>20)
		}
	}
}

// Every long-running command takes --pprof, off by default; a mount's
// profiles need its --metrics address.
func TestPprofFlag(t *testing.T) {
	root := newRootCmd()
	for _, name := range []string{"master", "meta", "data", "mount", "up"} {
		c, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if f := c.Flags().Lookup("pprof"); f == nil || f.DefValue != "false" {
			t.Errorf("cairn %s: --pprof %+v, want a flag that is off by default", name, f)
		}
	}
	out, code := benchCLI(t, "mount", "--pprof", "default", t.TempDir())
	if code != exitUsage || !strings.Contains(out, "give --metrics too") {
		t.Errorf("mount --pprof without --metrics: exit %d, %q", code, out)
	}
}

// openDiskCache: off when asked; a cache in a directory of its own under
// cache_dir, removed when closed; a cache_dir that cannot hold one fails
// the mount with the option named.
func TestOpenDiskCache(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := t.TempDir()
	for _, o := range []mountOpts{{cacheBytes: -1, cacheDir: base}, {fileCacheBytes: -1, cacheDir: base}} {
		if c, err := openDiskCache(o, "v", "/mnt/x", logger); c != nil || err != nil {
			t.Fatalf("%+v: %v, %v; want no cache", o, c, err)
		}
	}
	c, err := openDiskCache(mountOpts{cacheDir: base, cacheBytes: 1 << 20}, "v", "/mnt/x", logger)
	if err != nil {
		t.Fatal(err)
	}
	es, _ := os.ReadDir(base)
	if len(es) != 1 || !strings.HasPrefix(es[0].Name(), "v-") {
		t.Fatalf("cache directories %v", es)
	}
	if c.Limit() != 1<<20 {
		t.Fatalf("limit %d", c.Limit())
	}
	c.Close()
	if es, _ := os.ReadDir(base); len(es) != 0 {
		t.Fatalf("after Close: %v", es)
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := openDiskCache(mountOpts{cacheDir: file}, "v", "/mnt/x", logger); err == nil || !strings.Contains(err.Error(), "-o cache_dir="+file) {
		t.Fatalf("a cache_dir that is a file: %v", err)
	}
}
