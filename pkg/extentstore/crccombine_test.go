package extentstore

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// crcCombine agrees with the CRC of the concatenation, for empty parts,
// single bytes, block-sized parts and odd lengths.
func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, c := range []struct{ a, b int }{
		{0, 0}, {0, 1}, {1, 0}, {1, 1}, {3, 5}, {4096, 4096}, {128 << 10, 128 << 10},
		{1000, 128<<10 + 17}, {128<<10 - 1, 1}, {100 << 10, 200 << 10},
	} {
		a, b := data[:c.a], data[c.a:c.a+c.b]
		want := crc32.Checksum(data[:c.a+c.b], castagnoli)
		if got := crcCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), int64(len(b))); got != want {
			t.Errorf("combine of %d and %d bytes: %08x, want %08x", c.a, c.b, got, want)
		}
	}
}
