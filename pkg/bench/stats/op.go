package stats

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
)

// maxErrorText bounds the first-error message kept per operation, so a worker
// reply stays small however long an error string is.
const maxErrorText = 300

// Op accumulates one kind of operation (a block write, a file creation, a whole
// tree removal...) for one thread, or, after merging, for a whole run. Count
// includes failed operations; Bytes counts data moved by successful ones; Items
// counts the entries an operation touched when one operation covers many (a
// whole directory tree); Latency holds every operation's duration.
type Op struct {
	Count      int64     `json:"count"`
	Errors     int64     `json:"errors"`
	Bytes      int64     `json:"bytes"`
	Items      int64     `json:"items,omitempty"`
	FirstError string    `json:"first_error,omitempty"`
	Latency    Histogram `json:"latency"`
}

// Record adds one operation that took d, moved bytes and failed with err (nil
// for success). Bytes of failed operations still count when bytes > 0, since a
// short write moved data before failing.
func (o *Op) Record(d time.Duration, bytes int64, err error) {
	o.Count++
	o.Latency.Record(d)
	if bytes > 0 {
		o.Bytes += bytes
	}
	if err != nil {
		o.Errors++
		if o.FirstError == "" {
			o.FirstError = truncate(err.Error(), maxErrorText)
		}
	}
}

// Merge adds every operation of x to o.
func (o *Op) Merge(x *Op) {
	if x == nil {
		return
	}
	o.Count += x.Count
	o.Errors += x.Errors
	o.Bytes += x.Bytes
	o.Items += x.Items
	if o.FirstError == "" {
		o.FirstError = x.FirstError
	}
	o.Latency.Merge(&x.Latency)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Live is a progress counter a thread updates while it runs and a display reads
// concurrently. It is padded to a cache line so that threads updating
// neighbouring counters do not slow each other down.
type Live struct {
	ops   atomic.Int64
	bytes atomic.Int64
	_     [48]byte
}

// Add counts ops operations moving bytes bytes.
func (l *Live) Add(ops, bytes int64) {
	l.ops.Add(ops)
	if bytes > 0 {
		l.bytes.Add(bytes)
	}
}

// Load returns the operations and bytes counted so far.
func (l *Live) Load() (ops, bytes int64) { return l.ops.Load(), l.bytes.Load() }

// Reset sets both counters to zero (between phases).
func (l *Live) Reset() {
	l.ops.Store(0)
	l.bytes.Store(0)
}

// Summary is the min/median/max of one figure over repetitions.
type Summary struct {
	N      int   `json:"n"`
	Min    Float `json:"min"`
	Median Float `json:"median"`
	Max    Float `json:"max"`
	Mean   Float `json:"mean"`
}

// Float is a float64 whose JSON form is null when it is NaN or infinite, since
// JSON has no such numbers and a missing figure must stay distinguishable from 0.
type Float float64

// MarshalJSON writes null for NaN and ±Inf, the number otherwise.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON reads null as NaN.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("float %q: %w", b, err)
	}
	*f = Float(v)
	return nil
}

// Summarize computes the summary of values, ignoring NaNs. With an even number
// of values the median is the mean of the two middle ones. No values gives N=0
// and NaN for the rest, so a missing figure is never mistaken for a zero.
func Summarize(values []float64) Summary {
	vs := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		nan := Float(math.NaN())
		return Summary{Min: nan, Median: nan, Max: nan, Mean: nan}
	}
	sort.Float64s(vs)
	var sum float64
	for _, v := range vs {
		sum += v
	}
	n := len(vs)
	med := vs[n/2]
	if n%2 == 0 {
		med = (vs[n/2-1] + vs[n/2]) / 2
	}
	return Summary{N: n, Min: Float(vs[0]), Median: Float(med), Max: Float(vs[n-1]), Mean: Float(sum / float64(n))}
}

// Rate returns count per second over d, or NaN when d is not positive (a phase
// that took no measurable time has no meaningful rate).
func Rate(count float64, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return count / d.Seconds()
}
