package chunker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func spansOf(ends []int) []Span {
	var out []Span
	prev := 0
	for _, e := range ends {
		out = append(out, Span{Offset: int64(prev), Length: int64(e - prev)})
		prev = e
	}
	return out
}

func applyEdit(old []byte, e Edit) []byte {
	out := append([]byte(nil), old[:e.Offset]...)
	out = append(out, e.Inserted...)
	return append(out, old[e.Offset+e.Deleted:]...)
}

// countingReaderAt records how many bytes were read and fails reads that
// start at or past failAt (when failAt >= 0).
type countingReaderAt struct {
	data   []byte
	read   int64
	failAt int64
}

var errFetch = errors.New("fetch failed")

func (r *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if r.failAt >= 0 && off+int64(len(p)) > r.failAt {
		return 0, errFetch
	}
	r.read += int64(len(p))
	return bytes.NewReader(r.data).ReadAt(p, off)
}

// TestRechunkEquivalence: for random files and random edits, the re-chunked
// list equals cutting the edited file from scratch, and only a few chunks
// around the edit are new.
func TestRechunkEquivalence(t *testing.T) {
	g := splitMix64{state: 11}
	for _, cfg := range []Config{smallFast, smallRabin} {
		c := mustNew(t, cfg)
		var smallEdits, smallNew int
		for trial := range 400 {
			old := testData(g.next(), int(g.next()%20000))
			size := int64(len(old))
			oldSpans := spansOf(c.Cut(old))
			var e Edit
			switch kind := trial % 6; {
			case size == 0 || kind == 0: // append
				e = Edit{Offset: size, Inserted: testData(g.next(), int(1+g.next()%300))}
			case kind == 1: // delete at an old boundary
				s := oldSpans[g.next()%uint64(len(oldSpans))]
				e = Edit{Offset: s.Offset, Deleted: min(s.Length*int64(1+g.next()%3), size-s.Offset)}
			case kind == 2: // truncate
				off := int64(g.next() % uint64(size))
				e = Edit{Offset: off, Deleted: size - off}
			default: // insert, delete or overwrite in the middle
				off := int64(g.next() % uint64(size+1))
				e = Edit{Offset: off, Deleted: min(int64(g.next()%200)*int64(kind-3), size-off)}
				if kind != 4 {
					e.Inserted = testData(g.next(), int(1+g.next()%100))
				}
			}
			src := &countingReaderAt{data: old, failAt: -1}
			r, err := c.Rechunk(oldSpans, e, src)
			if err != nil {
				t.Fatalf("%v trial %d: %v", cfg, trial, err)
			}
			edited := applyEdit(old, e)
			want := spansOf(c.Cut(edited))
			got := r.Spans(oldSpans)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%v trial %d edit {%d, -%d, +%d} on %d bytes:\ngot  %v\nwant %v", cfg, trial, e.Offset, e.Deleted, len(e.Inserted), size, got, want)
			}
			for _, ch := range r.New {
				if !bytes.Equal(ch.Data, edited[ch.Offset:ch.Offset+int64(ch.Length)]) || ch.Fingerprint != Sum(cfg.Algorithm, ch.Data) {
					t.Fatalf("%v trial %d: new chunk at %d has wrong data or fingerprint", cfg, trial, ch.Offset)
				}
			}
			if r.ReadBytes != src.read {
				t.Fatalf("%v trial %d: ReadBytes %d, source saw %d", cfg, trial, r.ReadBytes, src.read)
			}
			if len(e.Inserted) <= 100 && e.Deleted <= 200 {
				smallEdits++
				smallNew += len(r.New)
			}
		}
		// A small edit changes about the chunk it lands in plus the one
		// after; allow some resynchronisation chains, but a re-chunker that
		// re-cut to the end of file would average dozens here.
		if mean := float64(smallNew) / float64(smallEdits); mean > 3.5 {
			t.Errorf("%v: %.2f new chunks per small edit, want at most 3.5", cfg, mean)
		} else {
			t.Logf("%v: %.2f new chunks per small edit over %d edits", cfg, mean, smallEdits)
		}
	}
}

func TestRechunkCases(t *testing.T) {
	c := mustNew(t, smallFast)
	old := testData(12, 5000)
	spans := spansOf(c.Cut(old))
	last := len(spans) - 1
	tests := []struct {
		name           string
		e              Edit
		prefix, suffix int
		newChunks      int
	}{
		{"no-op", Edit{Offset: 100}, len(spans), len(spans), 0},
		{"delete whole chunk", Edit{Offset: spans[2].Offset, Deleted: spans[2].Length}, 2, 3, 0},
		{"truncate at boundary", Edit{Offset: spans[3].Offset, Deleted: 5000 - spans[3].Offset}, 3, len(spans), 0},
		{"append re-cuts last chunk", Edit{Offset: 5000, Inserted: []byte("x")}, last, len(spans), 1},
		{"delete everything", Edit{Offset: 0, Deleted: 5000}, 0, len(spans), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.Rechunk(spans, tt.e, bytes.NewReader(old))
			if err != nil {
				t.Fatal(err)
			}
			if r.Prefix != tt.prefix || r.Suffix != tt.suffix || len(r.New) != tt.newChunks {
				t.Fatalf("prefix %d suffix %d new %d, want %d %d %d", r.Prefix, r.Suffix, len(r.New), tt.prefix, tt.suffix, tt.newChunks)
			}
			if want := spansOf(c.Cut(applyEdit(old, tt.e))); fmt.Sprint(r.Spans(spans)) != fmt.Sprint(want) {
				t.Fatalf("spans %v, want %v", r.Spans(spans), want)
			}
		})
	}
}

func TestRechunkErrors(t *testing.T) {
	c := mustNew(t, smallFast)
	old := testData(13, 5000)
	spans := spansOf(c.Cut(old))
	gap := append([]Span(nil), spans...)
	gap[1].Offset++
	long := []Span{{0, 2000}}
	tests := []struct {
		name  string
		spans []Span
		e     Edit
		src   io.ReaderAt
		err   string
	}{
		{"gap", gap, Edit{Offset: 0, Inserted: []byte("x")}, bytes.NewReader(old), "old chunk 1"},
		{"too long", long, Edit{Offset: 0, Inserted: []byte("x")}, bytes.NewReader(old), "old chunk 0"},
		{"empty span", []Span{{0, 0}}, Edit{}, bytes.NewReader(old), "old chunk 0"},
		{"offset past end", spans, Edit{Offset: 5001}, bytes.NewReader(old), "outside file"},
		{"negative offset", spans, Edit{Offset: -1}, bytes.NewReader(old), "outside file"},
		{"delete past end", spans, Edit{Offset: 4000, Deleted: 1001}, bytes.NewReader(old), "outside file"},
		{"negative delete", spans, Edit{Offset: 4000, Deleted: -1}, bytes.NewReader(old), "outside file"},
		{"fetch fails", spans, Edit{Offset: 2500, Inserted: []byte("x")}, &countingReaderAt{data: old, failAt: 2600}, errFetch.Error()},
		{"source too short", spans, Edit{Offset: 2500, Inserted: []byte("x")}, bytes.NewReader(old[:3000]), "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Rechunk(tt.spans, tt.e, tt.src)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err %v, want one containing %q", err, tt.err)
			}
		})
	}
}

func FuzzCut(f *testing.F) {
	f.Add([]byte("hello"), uint16(64), uint8(7), uint16(100), false)
	f.Add(make([]byte, 3000), uint16(64), uint8(8), uint16(1), true)
	f.Add(testData(1, 5000), uint16(100), uint8(9), uint16(600), false)
	f.Fuzz(func(t *testing.T, data []byte, minSize uint16, avgBits uint8, extra uint16, rabin bool) {
		cfg := Config{Algorithm: FastCDC1, MinSize: int(minSize), AvgSize: 1 << (avgBits % 31), MaxSize: 1<<(avgBits%31) + int(extra)}
		if rabin {
			cfg.Algorithm = Rabin1
		}
		c, err := New(cfg)
		if err != nil {
			if cfg.Validate() == nil {
				t.Fatalf("New failed on a valid config %v: %v", cfg, err)
			}
			return
		}
		ends := c.Cut(data)
		checkBounds(t, cfg, len(data), ends)
		if n := c.Next(data); len(ends) > 0 && n != ends[0] {
			t.Fatalf("Next = %d, Cut starts with %d", n, ends[0])
		}
	})
}
