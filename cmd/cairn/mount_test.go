package main

import (
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
		{in: []string{"memory_mb=16"}, wantErr: "at least 64"},
		{in: []string{"memory_mb=x"}, wantErr: "at least 64"},
		{in: []string{"op_timeout=0"}, wantErr: "more than 0 seconds"},
		{in: []string{"op_timeout"}, wantErr: "want seconds"},
		{in: []string{"attr_timeout=-1"}, wantErr: "want seconds"},
		{in: []string{"entry_timeout=4000"}, wantErr: "want seconds"},
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
