package recent

import (
	"slices"
	"testing"
)

func TestMap(t *testing.T) {
	type step struct {
		put    int
		val    string
		oldest []int // after the put
	}
	for _, tc := range []struct {
		name  string
		limit int
		steps []step
	}{
		{"fills in order", 3, []step{{1, "a", []int{1}}, {2, "b", []int{1, 2}}, {3, "c", []int{1, 2, 3}}}},
		{"forgets the oldest", 2, []step{{1, "a", []int{1}}, {2, "b", []int{1, 2}}, {3, "c", []int{2, 3}}, {4, "d", []int{3, 4}}, {5, "e", []int{4, 5}}}},
		{"a Put of a remembered key keeps its place", 2, []step{{1, "a", []int{1}}, {2, "b", []int{1, 2}}, {1, "z", []int{1, 2}}, {3, "c", []int{2, 3}}}},
		{"limit 0 keeps nothing", 0, []step{{1, "a", []int{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Map[int, string]{Limit: tc.limit}
			want := map[int]string{}
			for _, s := range tc.steps {
				m.Put(s.put, s.val)
				if tc.limit > 0 {
					want[s.put] = s.val
				}
				if got := m.Oldest(); !slices.Equal(got, s.oldest) {
					t.Fatalf("after Put(%d): oldest first %v, want %v", s.put, got, s.oldest)
				}
				if m.Len() != len(s.oldest) {
					t.Fatalf("Len %d, want %d", m.Len(), len(s.oldest))
				}
				for k, v := range want {
					got, ok := m.Get(k)
					if ok != slices.Contains(s.oldest, k) || ok != m.Has(k) {
						t.Fatalf("key %d remembered: %v, want %v", k, ok, !ok)
					}
					if ok && got != v {
						t.Fatalf("key %d: %q, want %q", k, got, v)
					}
				}
			}
		})
	}
}
