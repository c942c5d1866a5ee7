package workload

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/stats"
)

// BenchmarkMeasurementPerOp is what the framework adds to every measured
// operation: the loop bound check, two reads of the monotonic clock, the
// histogram and counters, the live progress counter. Divide it by an
// operation's duration for the framework's share of a measurement (the
// overhead command measures that share end to end).
func BenchmarkMeasurementPerOp(b *testing.B) {
	t := &Thread{ctx: context.Background(), ops: map[string]*stats.Op{}, live: &stats.Live{},
		Rand: rand.New(rand.NewPCG(1, 1))}
	t.deadline = t.Clock() + time.Hour
	m := t.Op("read")
	b.ResetTimer()
	for i := int64(0); t.More(i, int64(b.N)); i++ {
		s := t.Clock()
		m.Done(s, 4096, nil)
	}
	if m.op.Count != int64(b.N) {
		b.Fatalf("counted %d of %d", m.op.Count, b.N)
	}
}
