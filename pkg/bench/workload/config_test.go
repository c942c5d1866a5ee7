package workload

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"4K", 4096, ""},
		{"4KiB", 4096, ""},
		{"4kb", 4096, ""},
		{"1.5MiB", 3 << 19, ""},
		{"2G", 2 << 30, ""},
		{"1T", 1 << 40, ""},
		{" 64KiB ", 64 << 10, ""},
		{"-1", 0, "cannot be negative"},
		{"-4KiB", 0, "cannot be negative"},
		{"1.5", 0, "not a whole number"},
		{"abc", 0, "want a number"},
		{"4X", 0, "want a number"},
		{"", 0, "want a number"},
		{"99999999999T", 0, "too large"},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, n := range []int64{0, 1, 1000, 4096, 65536, 3 << 20, 1 << 30} {
		back, err := ParseSize(FormatSize(n))
		if err != nil || back != n {
			t.Errorf("FormatSize(%d) = %q does not parse back", n, FormatSize(n))
		}
	}
}

func TestParseDist(t *testing.T) {
	tests := []struct {
		in, canon, err string
		lo, hi         int64
		mean           float64
	}{
		{in: "64KiB", canon: "65536", lo: 65536, hi: 65536, mean: 65536},
		{in: "uniform(64KiB,112KiB)", canon: "uniform(65536,114688)", lo: 65536, hi: 114688, mean: 90112},
		{in: "choice(1K, 3K)", canon: "choice(1024,3072)", lo: 1024, hi: 3072, mean: 2048},
		{in: "uniform(2K,1K)", err: "minimum above maximum"},
		{in: "uniform(1K)", err: "takes 2 sizes"},
		{in: "uniform(-1,5)", err: "cannot be negative"},
		{in: "choice()", err: "want a number"},
		{in: "normal(1,2)", err: "want a number"},
	}
	for _, tc := range tests {
		d, err := ParseDist(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDist(%q) = %v, %v; want error containing %q", tc.in, d, err, tc.err)
			}
			continue
		}
		if err != nil || d.String() != tc.canon || d.Lo != tc.lo || d.Hi != tc.hi || d.Mean() != tc.mean {
			t.Errorf("ParseDist(%q) = %+v (%s), %v", tc.in, d, d, err)
		}
		r := rand.New(rand.NewPCG(1, 1))
		for i := 0; i < 1000; i++ {
			if v := d.Sample(r); v < d.Lo || v > d.Hi {
				t.Fatalf("%s sampled %d", tc.in, v)
			}
		}
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		kind string
		raw  map[string]string
		err  string
	}{
		{"metadta", nil, `unknown workload "metadta" (did you mean "metadata"?)`},
		{"seq-read", map[string]string{"blok_size": "4K"}, `unknown key "blok_size" (did you mean "block_size"?)`},
		{"seq-read", map[string]string{"zzz": "1"}, `unknown key "zzz"`},
		{"seq-read", map[string]string{"file_size": "-1"}, "file_size: size \"-1\" cannot be negative"},
		{"seq-read", map[string]string{"block_size": "-4KiB"}, "cannot be negative"},
		{"seq-read", map[string]string{"block_size": "0"}, "block_size: size must be at least 1, got 0"},
		{"seq-read", map[string]string{"threads": "0"}, "threads: value must be at least 1, got 0"},
		{"seq-read", map[string]string{"threads": "-2"}, "threads: value must be at least 1, got -2"},
		{"seq-read", map[string]string{"threads": "two"}, `threads: "two" is not an integer`},
		{"metadata", map[string]string{"processes": "0"}, "processes: value must be at least 1"},
		{"metadata", map[string]string{"files": "0"}, "files: value must be at least 1"},
		{"metadata", map[string]string{"duration": "-5s"}, "duration must be positive"},
		{"metadata", map[string]string{"duration": "forever"}, "is not a duration"},
		{"metadata", map[string]string{"shared_dir": "maybe"}, "is not true or false"},
		{"metadata", map[string]string{"phases": "FileStat"}, "phase FileStat needs phase FileCreation"},
		{"metadata", map[string]string{"phases": "FileCreation,Bogus"}, `"Bogus" is not one of`},
		{"mixed", map[string]string{"read_ratio": "1.5"}, "outside [0, 1]"},
		{"mixed", map[string]string{"read_ratio": "150%"}, "outside [0, 1]"},
		{"random-read", map[string]string{"file_size": "4KiB", "block_size": "1MiB"}, "larger than the smallest file"},
		{"replay", nil, `key "trace" is required`},
		{"replay", map[string]string{"trace": "x", "pace": "slow"}, `"slow" is not one of max, recorded`},
		{"replay", map[string]string{"trace": "x", "speed": "0"}, "not a positive number"},
		{"dl-traversal", map[string]string{"fanout": "10000", "depth": "3"}, "more than 10 million leaf directories"},
		{"insert", map[string]string{"file_size": "1KiB", "insert_size": "4KiB"}, "larger than file_size"},
		{"small-files", map[string]string{"sizes": ""}, "want 1 to 32 sizes"},
		{"seq-write", map[string]string{"file_size": "uniform(1M,2)"}, "minimum above maximum"},
	}
	for _, tc := range tests {
		_, err := Resolve(tc.kind, tc.raw)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Resolve(%s, %v) = %v\n  want an error containing %q", tc.kind, tc.raw, err, tc.err)
		}
	}
}

func TestResolveDefaultsAndCanonical(t *testing.T) {
	for _, k := range Kinds() {
		raw := map[string]string{}
		if k.Name == "replay" {
			raw["trace"] = "/x.trace"
		}
		s, err := Resolve(k.Name, raw)
		if err != nil {
			t.Errorf("defaults of %s do not resolve: %v", k.Name, err)
			continue
		}
		if err := s.Check(); err != nil {
			t.Errorf("%s: resolved spec does not check: %v", k.Name, err)
		}
		if s.Name() != k.Name || s.Threads() != 1 || s.Processes() != 1 {
			t.Errorf("%s: name %q threads %d processes %d", k.Name, s.Name(), s.Threads(), s.Processes())
		}
		if k.Doc == "" {
			t.Errorf("%s has no documentation", k.Name)
		}
		for _, key := range k.AllKeys() {
			if key.Doc == "" {
				t.Errorf("%s: key %s has no documentation", k.Name, key.Name)
			}
		}
	}
	s, err := Resolve("seq-write", map[string]string{"block_size": "64K", "file_size": "uniform(1MiB, 2MiB)", "threads": "8"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["block_size"] != "65536" || s.Values["file_size"] != "uniform(1048576,2097152)" || s.Threads() != 8 {
		t.Fatalf("values %v", s.Values)
	}
	if d := s.Describe(); !strings.Contains(d, "block_size=64KiB") {
		t.Fatalf("describe %q", d)
	}
	tampered := &Spec{Kind: s.Kind, Values: map[string]string{}}
	for k, v := range s.Values {
		tampered.Values[k] = v
	}
	tampered.Values["block_size"] = "64K"
	if err := tampered.Check(); err == nil {
		t.Fatal("a non-canonical spec passed Check")
	}
	tampered.Values["block_size"] = "-1"
	if err := tampered.Check(); err == nil {
		t.Fatal("an invalid spec passed Check")
	}
}

func TestParsePlan(t *testing.T) {
	tests := []struct {
		name, in string
		set      map[string]string
		check    func(*testing.T, *Plan)
		err      string
	}{
		{name: "single", in: "kind: seq-write\nthreads: 2\nblock_size: 4KiB\ntargets: [posix:/a, posix:/b]\nrepetitions: 3\n",
			check: func(t *testing.T, p *Plan) {
				if len(p.Workloads) != 1 || p.Workloads[0].Threads() != 2 || p.Workloads[0].Int("block_size") != 4096 ||
					len(p.Targets) != 2 || p.Repetitions != 3 {
					t.Errorf("plan %+v %v", p, p.Workloads[0].Values)
				}
			}},
		{name: "list with defaults and set", in: `
defaults:
  threads: 4
  block_size: 64KiB
workloads:
  - kind: metadata
    files: 10
  - kind: seq-read
    threads: 2
  - kind: small-files
    sizes: [1KiB, 4KiB]
sweep: {threads: [1, 2]}
`, set: map[string]string{"duration": "5s"},
			check: func(t *testing.T, p *Plan) {
				w := p.Workloads
				if len(w) != 3 || w[0].Threads() != 4 || w[1].Threads() != 2 || w[1].Int("block_size") != 65536 ||
					w[2].Values["sizes"] != "1024,4096" || w[0].Values["duration"] != "5s" {
					t.Errorf("workloads %v / %v / %v", w[0].Values, w[1].Values, w[2].Values)
				}
				if p.Sweep == nil || p.Sweep.Key != "threads" || len(p.Sweep.Values) != 2 {
					t.Errorf("sweep %+v", p.Sweep)
				}
			}},
		{name: "unknown key names its line", in: "kind: seq-read\nthreads: 2\nblok_size: 4KiB\n", err: `plan.yaml:3: workload seq-read: unknown key "blok_size" (did you mean "block_size"?)`},
		{name: "negative size names its line", in: "workloads:\n  - kind: seq-read\n    file_size: -5\n", err: `plan.yaml:3: workload seq-read: file_size: size "-5" cannot be negative`},
		{name: "zero threads", in: "kind: metadata\nthreads: 0\n", err: "plan.yaml:2: workload metadata: threads: value must be at least 1, got 0"},
		{name: "unknown top key", in: "repetitons: 3\nkind: metadata\n", err: `unknown key "repetitons"`},
		{name: "stray keys without kind", in: "repetitons: 3\n", err: `plan.yaml:1: unknown top-level key "repetitons" (did you mean "repetitions"?)`},
		{name: "unknown default", in: "defaults: {blocksize: 4K}\nworkloads: [{kind: seq-read}]\n", err: `defaults: no workload has a key "blocksize" (did you mean "block_size"?)`},
		{name: "unknown set", in: "kind: metadata\n", set: map[string]string{"block_size": "4K"}, err: `--set block_size: no workload of this run has a key "block_size"`},
		{name: "bad repetitions", in: "kind: metadata\nrepetitions: 0\n", err: "repetitions: want an integer from 1 to 1000"},
		{name: "bad sweep", in: "kind: metadata\nsweep: {files: [1]}\n", err: `key "files" cannot be swept`},
		{name: "both shapes", in: "kind: metadata\nworkloads: [{kind: seq-read}]\n", err: "use one shape"},
		{name: "no kind", in: "workloads: [{threads: 2}]\n", err: "workload without a kind"},
		{name: "not yaml", in: "kind: [\n", err: "plan.yaml"},
		{name: "empty", in: "", err: "empty workload file"},
		{name: "duplicate", in: "kind: metadata\nfiles: 1\nfiles: 2\n", err: "plan.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePlan([]byte(tc.in), "plan.yaml", tc.set)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v\nwant one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

func TestParseSweep(t *testing.T) {
	sw, err := ParseSweep("processes=1, 2,4")
	if err != nil || sw.Key != "processes" || len(sw.Values) != 3 || sw.Values[2] != 4 {
		t.Fatalf("%+v %v", sw, err)
	}
	for _, bad := range []string{"threads", "threads=0", "threads=a", "files=1,2", "threads="} {
		if _, err := ParseSweep(bad); err == nil {
			t.Errorf("ParseSweep(%q) accepted", bad)
		}
	}
}

func TestPermutationIsBijection(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 7, 16, 17, 100, 1000, 4097} {
		for _, key := range []uint64{0, 1, 99} {
			p := NewPermutation(n, key)
			seen := make([]bool, n)
			for i := uint64(0); i < n; i++ {
				v := p.At(i)
				if v >= n || seen[v] {
					t.Fatalf("n=%d key=%d: At(%d)=%d repeats or is out of range", n, key, i, v)
				}
				seen[v] = true
			}
		}
	}
	// Different keys give different orders (a real shuffle, not the identity).
	a, b := NewPermutation(1000, 1), NewPermutation(1000, 2)
	same, fixed := 0, 0
	for i := uint64(0); i < 1000; i++ {
		if a.At(i) == b.At(i) {
			same++
		}
		if a.At(i) == i {
			fixed++
		}
	}
	if same > 50 || fixed > 50 {
		t.Fatalf("permutations look too regular: %d equal positions, %d fixed points", same, fixed)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"block_size", "file_size", "files", "threads"}
	tests := map[string]string{"blocksize": "block_size", "thread": "threads", "fils": "files", "xyzzy": "", "q": ""}
	for in, want := range tests {
		if got := suggest(in, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
