// Package stats holds the pure measurement types of cairn bench: a mergeable
// log-linear latency histogram, per-operation counters, live progress counters
// and min/median/max summaries. Nothing here does I/O or reads a clock, so every
// figure the reports print can be checked by table-driven tests.
package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values below 2*subBuckets are counted exactly; above that,
// every power of two is split into subBuckets equal buckets, so a bucket's width
// is at most 1/subBuckets of its lower bound (relative error ≤ 3.2%). Values at or
// above maxTracked land in the last bucket; Max still records them exactly.
const (
	subBucketBits = 5
	subBuckets    = 1 << subBucketBits // 32
	exactBuckets  = 2 * subBuckets     // 0..63 exact
	maxShift      = 40                 // largest shift: values up to 2^46 ns ≈ 19.5 h
	numBuckets    = exactBuckets + maxShift*subBuckets
)

// Histogram counts non-negative durations (nanoseconds) in log-linear buckets.
// It is mergeable (Merge adds counts), so per-thread histograms combine into
// per-worker and per-run ones without losing percentiles. The zero value is an
// empty histogram ready to use. It is not safe for concurrent use: each thread
// owns its own and the owner merges them after the threads have stopped.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    float64 // float: sums of many long durations overflow int64 ns
	min    int64
	max    int64
}

// bucketOf maps a value to its bucket index; negative values count as zero.
func bucketOf(v int64) int {
	if v < exactBuckets {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (subBucketBits + 1) // v>>shift is in [32, 63]
	if shift > maxShift {
		return numBuckets - 1
	}
	return exactBuckets + (shift-1)*subBuckets + int(v>>uint(shift)) - subBuckets
}

// bucketBounds returns the smallest and largest value counted in bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < exactBuckets {
		return int64(i), int64(i)
	}
	shift := (i-exactBuckets)/subBuckets + 1
	m := int64((i-exactBuckets)%subBuckets + subBuckets)
	return m << uint(shift), (m+1)<<uint(shift) - 1
}

// Record adds one observation of d. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every observation of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest observation (0 when empty).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest observation, exact even beyond the bucketed range.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact arithmetic mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below which a fraction q of the observations fall,
// within the bucket resolution (≤ 3.2% relative error), clamped to [Min, Max].
// q outside [0, 1] is clamped; an empty histogram returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 || math.IsNaN(q) {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			v := lo + (hi-lo)/2
			if v < h.min {
				v = h.min
			}
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// histogramJSON is the wire and report form: only non-empty buckets, as
// [index, count] pairs, so an idle histogram costs a few bytes.
type histogramJSON struct {
	Buckets [][2]uint64 `json:"buckets"`
	Count   uint64      `json:"count"`
	SumNs   float64     `json:"sum_ns"`
	MinNs   int64       `json:"min_ns"`
	MaxNs   int64       `json:"max_ns"`
}

// MarshalJSON encodes the histogram sparsely; UnmarshalJSON restores it exactly.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	out := histogramJSON{Buckets: [][2]uint64{}, Count: h.n, SumNs: h.sum, MinNs: h.min, MaxNs: h.max}
	for i, c := range h.counts {
		if c != 0 {
			out.Buckets = append(out.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes the form written by MarshalJSON and checks that the
// bucket counts add up to the total, so a corrupted worker reply is refused
// instead of producing wrong percentiles.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var in histogramJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	*h = Histogram{}
	var total uint64
	for _, bc := range in.Buckets {
		if bc[0] >= numBuckets {
			return fmt.Errorf("histogram: bucket %d out of range [0,%d)", bc[0], numBuckets)
		}
		h.counts[bc[0]] += bc[1]
		total += bc[1]
	}
	if total != in.Count {
		return fmt.Errorf("histogram: buckets hold %d observations, count says %d", total, in.Count)
	}
	if in.Count > 0 && (in.MinNs < 0 || in.MaxNs < in.MinNs) {
		return fmt.Errorf("histogram: bad range min %d max %d", in.MinNs, in.MaxNs)
	}
	h.n, h.sum, h.min, h.max = in.Count, in.SumNs, in.MinNs, in.MaxNs
	return nil
}
