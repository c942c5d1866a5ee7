package optrace

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.n++
	if f.n > 1 {
		return 0, syscall.ENOSPC
	}
	return len(p), nil
}

func TestRecorderConcurrentAndErrors(t *testing.T) {
	var buf bytes.Buffer
	r, err := NewRecorder(&buf, Header{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				h := r.NewHandle()
				r.Record(time.Now(), Event{Op: OpOpen, TID: int64(g), Handle: h, Path: fmt.Sprintf("/g%d/f%d", g, i)})
			}
		}()
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r.Record(time.Now(), Event{Op: OpStat, Path: "/late"}) // dropped after Close
	tr, err := Read(&buf, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Events) != 4000 {
		t.Fatalf("%d records, want 4000", len(tr.Events))
	}
	seen := map[uint64]bool{}
	for _, e := range tr.Events {
		if seen[e.Handle] {
			t.Fatalf("handle %d reused", e.Handle)
		}
		seen[e.Handle] = true
	}

	// A failing writer: Record keeps going, Close reports the first error.
	fw := &failingWriter{}
	r, err = NewRecorder(fw, Header{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 3000)
	for i := 0; i < 200; i++ {
		r.Record(time.Now(), Event{Op: OpStat, Path: "/" + long})
	}
	if err := r.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close error %v, want ENOSPC", err)
	}
}
