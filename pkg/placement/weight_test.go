package placement

import (
	"math"
	"testing"
)

const tib = 1 << 40

func TestWeightZero(t *testing.T) {
	tests := []struct {
		name string
		c    Candidate
	}{
		{"full", Candidate{ID: 1, CapacityBytes: tib, UsedBytes: tib}},
		{"overfull", Candidate{ID: 1, CapacityBytes: tib, UsedBytes: 2 * tib}},
		{"no capacity", Candidate{ID: 1}},
		{"memory exhausted", Candidate{ID: 1, CapacityBytes: tib, MemUtil: 1}},
		{"memory over 1", Candidate{ID: 1, CapacityBytes: tib, MemUtil: 1.5}},
		{"memory NaN", Candidate{ID: 1, CapacityBytes: tib, MemUtil: math.NaN()}},
		{"memory negative", Candidate{ID: 1, CapacityBytes: tib, MemUtil: -0.1}},
		{"memory +Inf", Candidate{ID: 1, CapacityBytes: tib, MemUtil: math.Inf(1)}},
		{"memory -Inf", Candidate{ID: 1, CapacityBytes: tib, MemUtil: math.Inf(-1)}},
		{"partitions negative", Candidate{ID: 1, CapacityBytes: tib, Partitions: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w := Weight(tt.c); w != 0 {
				t.Errorf("Weight(%+v) = %g, want 0", tt.c, w)
			}
		})
	}
}

func TestWeightFormula(t *testing.T) {
	tests := []struct {
		name string
		c    Candidate
		want float64
	}{
		{"empty 1 TiB", Candidate{CapacityBytes: tib}, 1024},
		{"half full 1 TiB", Candidate{CapacityBytes: tib, UsedBytes: tib / 2}, 512 * 0.5},
		{"empty, memory half used", Candidate{CapacityBytes: tib, MemUtil: 0.5}, 512},
		{"quarter full, memory 0.75", Candidate{CapacityBytes: 4 * tib, UsedBytes: tib, MemUtil: 0.75}, 3072 * 0.75 * 0.25},
		{"one byte free", Candidate{CapacityBytes: 1, UsedBytes: 0}, 1.0 / (1 << 30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Weight(tt.c); math.Abs(got-tt.want) > 1e-12*tt.want {
				t.Errorf("Weight(%+v) = %g, want %g", tt.c, got, tt.want)
			}
		})
	}
}

func TestWeightOrdering(t *testing.T) {
	// Each pair: the first candidate must weigh strictly more.
	tests := []struct {
		name           string
		heavy, lighter Candidate
	}{
		{"emptier node", Candidate{CapacityBytes: tib, UsedBytes: tib / 4}, Candidate{CapacityBytes: tib, UsedBytes: tib / 2}},
		{"almost full vs full-ish", Candidate{CapacityBytes: tib, UsedBytes: tib - 2<<30}, Candidate{CapacityBytes: tib, UsedBytes: tib - 1<<30}},
		{"lower memory utilization", Candidate{CapacityBytes: tib, MemUtil: 0.2}, Candidate{CapacityBytes: tib, MemUtil: 0.8}},
		{"memory nearly full still positive", Candidate{CapacityBytes: tib, MemUtil: 0.999}, Candidate{CapacityBytes: tib, MemUtil: 1}},
		{"more free space, same utilization", Candidate{CapacityBytes: 2 * tib, UsedBytes: tib}, Candidate{CapacityBytes: tib, UsedBytes: tib / 2}},
		{"same free space, lower utilization", Candidate{CapacityBytes: tib}, Candidate{CapacityBytes: 2 * tib, UsedBytes: tib}},
		{"tiny node beats full node", Candidate{CapacityBytes: 1}, Candidate{CapacityBytes: tib, UsedBytes: tib}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, l := Weight(tt.heavy), Weight(tt.lighter)
			if !(h > l) {
				t.Errorf("Weight(%+v) = %g, want > Weight(%+v) = %g", tt.heavy, h, tt.lighter, l)
			}
		})
	}
}

func TestWeightFiniteAndNonNegative(t *testing.T) {
	caps := []uint64{0, 1, 1 << 30, tib, math.MaxUint64}
	mems := []float64{math.NaN(), -1, 0, 0.5, math.Nextafter(1, 0), 1, 2}
	for _, c := range caps {
		for _, u := range []uint64{0, 1, c / 2, c - 1, c, math.MaxUint64} {
			for _, m := range mems {
				cand := Candidate{CapacityBytes: c, UsedBytes: u, MemUtil: m}
				w := Weight(cand)
				if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
					t.Fatalf("Weight(%+v) = %g, want finite ≥ 0", cand, w)
				}
				if valid := u < c && m >= 0 && m < 1; valid != (w > 0) {
					t.Fatalf("Weight(%+v) = %g, want positive iff node is usable (%v)", cand, w, valid)
				}
			}
		}
	}
}
