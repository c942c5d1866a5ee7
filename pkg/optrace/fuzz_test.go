package optrace

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRead decodes arbitrary traces: errors are fine, panics and records that
// do not survive a round trip are not.
func FuzzRead(f *testing.F) {
	f.Add(Magic + "\n0\t1\t1\tstat\t0\t0\t0\t-1\t0\t0\t/a\t\n")
	f.Add(Magic + "\n# root=/x\n5\t1\t2\trename\t0\t0\t0\t0\t0\t0\t/a%09b\t/c\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := Read(strings.NewReader(in), 1000)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, tr.Header)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tr.Events {
			w.Write(&tr.Events[i])
		}
		w.Flush()
		back, err := Read(&buf, 1000)
		if err != nil {
			t.Fatalf("re-encoded trace does not read back: %v", err)
		}
		if len(back.Events) != len(tr.Events) {
			t.Fatalf("%d records back, want %d", len(back.Events), len(tr.Events))
		}
		for i := range back.Events {
			if back.Events[i] != tr.Events[i] {
				t.Fatalf("record %d changed: %+v -> %+v", i, tr.Events[i], back.Events[i])
			}
		}
	})
}
