package chunker

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// benchSize is large enough that Reference's 8 MiB maximum cuts several chunks.
const benchSize = 32 << 20

func BenchmarkCut(b *testing.B) {
	data := testData(21, benchSize)
	for _, cfg := range []Config{Default(), Reference(), {Rabin1, 64 << 10, 256 << 10, 1 << 20}, ReferenceRabin()} {
		c := mustNew(b, cfg)
		b.Run(cfg.String(), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				c.Cut(data)
			}
		})
	}
}

func BenchmarkSHA256(b *testing.B) {
	data := testData(21, benchSize)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		sha256.Sum256(data)
	}
}

func BenchmarkMemcpy(b *testing.B) {
	data := testData(21, benchSize)
	dst := make([]byte, len(data))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		copy(dst, data)
	}
}

// BenchmarkStream is the client's whole cost per byte: read, cut and
// fingerprint.
func BenchmarkStream(b *testing.B) {
	data := testData(21, benchSize)
	c := mustNew(b, Default())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s := NewChunker(bytes.NewReader(data), c, 0)
		for {
			if _, err := s.Next(); err != nil {
				break
			}
		}
	}
}

// BenchmarkInsertDedup measures what picks the default layout: a file of
// dedupFileSize random bytes gets dedupEdits independent 100-byte inserts at
// pseudo-random offsets. Reported per configuration:
//
//   - new-KiB/edit: bytes of new chunks an insert uploads (Rechunk.New)
//   - dedup-ratio: logical bytes of the original and the dedupEdits edited
//     versions over the unique bytes all of them need, (1+E)·S / (S + Σ new)
//     (65 would be perfect)
//   - chunks/GiB: chunk count of the file, scaled
//   - index-KiB/GiB: chunk-list size at 45 bytes per chunk (33-byte
//     fingerprint, 8-byte offset, 4-byte length), scaled
func BenchmarkInsertDedup(b *testing.B) {
	const dedupFileSize = 256 << 20
	const dedupEdits = 64
	data := testData(31, dedupFileSize)
	configs := []Config{
		{FastCDC1, 2 << 10, 8 << 10, 64 << 10},
		{FastCDC1, 16 << 10, 64 << 10, 256 << 10},
		{FastCDC1, 32 << 10, 128 << 10, 512 << 10},
		{FastCDC1, 64 << 10, 256 << 10, 1 << 20},
		{FastCDC1, 128 << 10, 512 << 10, 2 << 20},
		{FastCDC1, 256 << 10, 1 << 20, 4 << 20},
		Reference(),
		ReferenceRabin(),
	}
	for _, cfg := range configs {
		c := mustNew(b, cfg)
		b.Run(cfg.String(), func(b *testing.B) {
			for b.Loop() {
				spans := spansOf(c.Cut(data))
				g := splitMix64{state: 32}
				var newBytes int64
				for range dedupEdits {
					e := Edit{Offset: int64(g.next() % dedupFileSize), Inserted: testData(g.next(), 100)}
					r, err := c.Rechunk(spans, e, bytes.NewReader(data))
					if err != nil {
						b.Fatal(err)
					}
					var n int64
					for _, ch := range r.New {
						n += int64(ch.Length)
					}
					newBytes += n
				}
				perGiB := float64(1<<30) / dedupFileSize
				b.ReportMetric(float64(newBytes)/dedupEdits/1024, "new-KiB/edit")
				b.ReportMetric(float64((1+dedupEdits)*dedupFileSize)/float64(dedupFileSize+newBytes), "dedup-ratio")
				b.ReportMetric(float64(len(spans))*perGiB, "chunks/GiB")
				b.ReportMetric(float64(len(spans))*45*perGiB/1024, "index-KiB/GiB")
			}
		})
	}
}
