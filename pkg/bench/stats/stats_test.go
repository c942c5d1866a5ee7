package stats

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestBucketBoundsContainValue(t *testing.T) {
	vals := []int64{0, 1, 31, 63, 64, 65, 100, 127, 128, 1000, 4095, 4096, 1 << 20, 123456789, 1 << 40, (1 << 46) - 1}
	for _, v := range vals {
		i := bucketOf(v)
		lo, hi := bucketBounds(i)
		if v < lo || v > hi {
			t.Errorf("value %d in bucket %d [%d,%d]", v, i, lo, hi)
		}
		if v >= exactBuckets && float64(hi-lo+1)/float64(lo) > 1.0/subBuckets+1e-12 {
			t.Errorf("bucket %d [%d,%d] wider than 1/%d of its lower bound", i, lo, hi, subBuckets)
		}
	}
	if got := bucketOf(math.MaxInt64); got != numBuckets-1 {
		t.Errorf("MaxInt64 in bucket %d, want last %d", got, numBuckets-1)
	}
	// Buckets tile the range without gaps or overlaps.
	for i := 1; i < numBuckets; i++ {
		_, prevHi := bucketBounds(i - 1)
		lo, _ := bucketBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("gap between bucket %d (hi %d) and %d (lo %d)", i-1, prevHi, i, lo)
		}
	}
}

func TestQuantiles(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single", []time.Duration{42}, 0.99, 42},
		{"min", []time.Duration{5, 10, 20}, 0, 5},
		{"max", []time.Duration{5, 10, 20}, 1, 20},
		{"exact small median", []time.Duration{1, 2, 3, 4, 5}, 0.5, 3},
		{"p90 of 1..10", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
		{"clamped to max", []time.Duration{time.Millisecond}, 0.5, time.Millisecond},
		{"negative clamps to zero", []time.Duration{-5}, 0.5, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			for _, v := range tc.values {
				h.Record(v)
			}
			if got := h.Quantile(tc.q); got != tc.want {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

// Quantiles of a large random sample are within the promised relative error of
// the exact order statistic.
func TestQuantileAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]int64, 100000)
	for i := range vals {
		vals[i] = int64(math.Exp(r.NormFloat64()*1.5 + 11)) // log-normal around 60 µs
		h.Record(time.Duration(vals[i]))
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := float64(vals[int(math.Ceil(q*float64(len(vals))))-1])
		got := float64(h.Quantile(q))
		if rel := math.Abs(got-exact) / exact; rel > 1.0/subBuckets {
			t.Errorf("p%v = %v, exact %v, relative error %.3f", q*100, got, exact, rel)
		}
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("count %d", h.Count())
	}
}

func TestMergeEqualsRecordingTogether(t *testing.T) {
	var a, b, all Histogram
	for i := 0; i < 1000; i++ {
		d := time.Duration(i * i)
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	if a != all {
		t.Fatalf("merged histogram differs from the one recorded at once")
	}
	var empty Histogram
	a.Merge(&empty)
	a.Merge(nil)
	if a != all {
		t.Fatalf("merging empty histograms changed the result")
	}
}

func TestHistogramJSONRoundTrip(t *testing.T) {
	var h Histogram
	for i := 1; i < 5000; i += 7 {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	b, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != h {
		t.Fatalf("round trip changed the histogram")
	}
}

func TestHistogramJSONRejectsCorruption(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"count mismatch", `{"buckets":[[1,2]],"count":3,"sum_ns":2,"min_ns":1,"max_ns":1}`, "count says 3"},
		{"bucket range", `{"buckets":[[99999,1]],"count":1,"sum_ns":2,"min_ns":1,"max_ns":1}`, "out of range"},
		{"min above max", `{"buckets":[[1,1]],"count":1,"sum_ns":2,"min_ns":5,"max_ns":1}`, "bad range"},
		{"wrong type", `"x"`, "histogram"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			err := json.Unmarshal([]byte(tc.in), &h)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestOpRecordAndMerge(t *testing.T) {
	var a, b Op
	a.Record(time.Millisecond, 4096, nil)
	a.Record(2*time.Millisecond, 100, errors.New("short write"))
	b.Record(time.Microsecond, 0, errors.New(strings.Repeat("x", 1000)))
	a.Merge(&b)
	if a.Count != 3 || a.Errors != 2 || a.Bytes != 4196 {
		t.Fatalf("count %d errors %d bytes %d", a.Count, a.Errors, a.Bytes)
	}
	if a.FirstError != "short write" {
		t.Fatalf("first error %q", a.FirstError)
	}
	if len(b.FirstError) > maxErrorText+3 {
		t.Fatalf("error text not bounded: %d bytes", len(b.FirstError))
	}
}

func TestSummarize(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name             string
		in               []float64
		n                int
		min, median, max float64
	}{
		{"odd", []float64{3, 1, 2}, 3, 1, 2, 3},
		{"even", []float64{4, 1, 3, 2}, 4, 1, 2.5, 4},
		{"one", []float64{7}, 1, 7, 7, 7},
		{"nan ignored", []float64{nan, 5, 1}, 2, 1, 3, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(tc.in)
			if s.N != tc.n || float64(s.Min) != tc.min || float64(s.Median) != tc.median || float64(s.Max) != tc.max {
				t.Fatalf("got %+v", s)
			}
		})
	}
	if s := Summarize(nil); s.N != 0 || !math.IsNaN(float64(s.Median)) {
		t.Fatalf("empty summary %+v, want N=0 and NaN", s)
	}
}

func TestFloatJSON(t *testing.T) {
	b, err := json.Marshal(Summarize(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"median":null`) {
		t.Fatalf("NaN not written as null: %s", b)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil || !math.IsNaN(float64(s.Median)) {
		t.Fatalf("null not read back as NaN: %v %+v", err, s)
	}
	b, _ = json.Marshal(Float(1.5))
	if string(b) != "1.5" {
		t.Fatalf("1.5 marshalled as %s", b)
	}
}

func TestRate(t *testing.T) {
	if r := Rate(100, 2*time.Second); r != 50 {
		t.Fatalf("rate %v", r)
	}
	if r := Rate(100, 0); !math.IsNaN(r) {
		t.Fatalf("rate over zero time %v, want NaN", r)
	}
}

func TestLive(t *testing.T) {
	var l Live
	l.Add(2, 100)
	l.Add(1, -5)
	if ops, b := l.Load(); ops != 3 || b != 100 {
		t.Fatalf("ops %d bytes %d", ops, b)
	}
	l.Reset()
	if ops, b := l.Load(); ops != 0 || b != 0 {
		t.Fatalf("after reset ops %d bytes %d", ops, b)
	}
}
