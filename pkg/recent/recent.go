// Package recent remembers the last keys added to it, each with a value,
// up to a bound: the ids of requests and operations a server keeps so that
// a retry is recognised, the files a client fetched. Adding a key beyond
// the bound forgets the oldest, so the memory it takes is fixed however
// long the process runs.
//
// A Map is pure and deterministic (its order is the order of first Put);
// it is not safe for concurrent use: its owner locks.
package recent

// Map holds at most Limit keys with a value each. The zero value with
// Limit set is ready to use; a Map whose Limit is 0 or less keeps nothing.
type Map[K comparable, V any] struct {
	Limit int

	keys []K // in order of first Put; circular once full, next the oldest
	next int
	vals map[K]V
}

// Get returns k's value and whether k is remembered.
func (m *Map[K, V]) Get(k K) (V, bool) {
	v, ok := m.vals[k]
	return v, ok
}

// Has reports whether k is remembered.
func (m *Map[K, V]) Has(k K) bool {
	_, ok := m.vals[k]
	return ok
}

// Put sets k's value. A key remembered already keeps its place in the
// order; a new one is the newest, and the oldest is forgotten when the Map
// holds Limit keys.
func (m *Map[K, V]) Put(k K, v V) {
	if m.Limit <= 0 {
		return
	}
	if m.vals == nil {
		m.vals = make(map[K]V)
	}
	if _, ok := m.vals[k]; ok {
		m.vals[k] = v
		return
	}
	if len(m.keys) < m.Limit {
		m.keys = append(m.keys, k)
	} else {
		delete(m.vals, m.keys[m.next])
		m.keys[m.next] = k
		m.next = (m.next + 1) % len(m.keys)
	}
	m.vals[k] = v
}

// Len returns how many keys are remembered.
func (m *Map[K, V]) Len() int { return len(m.keys) }

// Oldest returns the remembered keys, oldest first, in a new slice.
func (m *Map[K, V]) Oldest() []K {
	out := make([]K, 0, len(m.keys))
	out = append(out, m.keys[m.next:]...)
	return append(out, m.keys[:m.next]...)
}
