package chunker

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// collect drains a Chunker, checking each chunk's fields.
func collect(t *testing.T, s *Chunker, alg Algorithm) ([]Chunk, error) {
	t.Helper()
	var out []Chunk
	for {
		ch, err := s.Next()
		if err != nil {
			return out, err
		}
		if ch.Length != len(ch.Data) || ch.Fingerprint != Sum(alg, ch.Data) {
			t.Fatalf("chunk at %d: length %d, data %d, fingerprint mismatch %v", ch.Offset, ch.Length, len(ch.Data), ch.Fingerprint != Sum(alg, ch.Data))
		}
		ch.Data = append([]byte(nil), ch.Data...)
		out = append(out, ch)
	}
}

func TestStreamMatchesCut(t *testing.T) {
	data := testData(5, 30000)
	readers := map[string]func([]byte) io.Reader{
		"plain":    func(b []byte) io.Reader { return bytes.NewReader(b) },
		"onebyte":  func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half":     func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"dataeof":  func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
		"zeroread": func(b []byte) io.Reader { return &stutterReader{r: bytes.NewReader(b)} },
	}
	for _, cfg := range []Config{smallFast, smallRabin} {
		c := mustNew(t, cfg)
		for _, size := range []int{0, 1, 64, 1023, 1024, 30000} {
			ends := c.Cut(data[:size])
			for name, mk := range readers {
				for _, readSize := range []int{0, 1, 7, 1024} {
					chunks, err := collect(t, NewChunker(mk(data[:size]), c, readSize), cfg.Algorithm)
					if err != io.EOF {
						t.Fatalf("%v %s size %d read %d: err %v", cfg, name, size, readSize, err)
					}
					if len(chunks) != len(ends) {
						t.Fatalf("%v %s size %d read %d: %d chunks, want %d", cfg, name, size, readSize, len(chunks), len(ends))
					}
					prev := 0
					for i, ch := range chunks {
						if ch.Offset != int64(prev) || !bytes.Equal(ch.Data, data[prev:ends[i]]) {
							t.Fatalf("%v %s: chunk %d at %d len %d, want [%d, %d)", cfg, name, i, ch.Offset, ch.Length, prev, ends[i])
						}
						prev = ends[i]
					}
				}
			}
		}
	}
}

// stutterReader returns (0, nil) before every real read, which io.Reader
// allows and a Chunker must tolerate.
type stutterReader struct {
	r    io.Reader
	skip bool
}

func (s *stutterReader) Read(p []byte) (int, error) {
	s.skip = !s.skip
	if s.skip {
		return 0, nil
	}
	return s.r.Read(p)
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestStreamErrors(t *testing.T) {
	c := mustNew(t, smallFast)
	data := testData(6, 10000)
	ends := c.Cut(data)
	errDisk := errors.New("disk on fire")
	for _, failAt := range []int{0, 500, 5000, 9999} {
		r := io.MultiReader(bytes.NewReader(data[:failAt]), iotest.ErrReader(errDisk))
		chunks, err := collect(t, NewChunker(r, c, 100), FastCDC1)
		if !errors.Is(err, errDisk) {
			t.Fatalf("fail at %d: err %v, want %v", failAt, err, errDisk)
		}
		// Only chunks the whole file would have, and only those that
		// could be decided from the bytes before the failure.
		for i, ch := range chunks {
			if int(ch.Offset)+ch.Length != ends[i] || ends[i] > failAt {
				t.Fatalf("fail at %d: chunk %d ends at %d, want %d within the read bytes", failAt, i, int(ch.Offset)+ch.Length, ends[i])
			}
		}
		if _, again := NewChunker(r, c, 100).Next(); again == nil {
			t.Fatalf("fail at %d: reader error not reported", failAt)
		}
	}
	s := NewChunker(zeroReader{}, c, 0)
	if _, err := s.Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("zero reader: err %v, want io.ErrNoProgress", err)
	}
	if _, err := s.Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("zero reader second call: err %v, want the same error", err)
	}
}
