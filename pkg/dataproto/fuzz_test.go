package dataproto

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// countingReader records the largest buffer a decoder read into, to catch
// a lying length turning into a large allocation. (A short stream makes
// the decoder ask again for the rest of the same buffer: the sum of what
// it asks is no measure.)
type countingReader struct {
	r   *bytes.Reader
	max int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.max = max(c.max, len(p))
	return c.r.Read(p)
}

// FuzzReadFrame feeds arbitrary streams to the frame decoder: it must never
// panic, never accept a header whose CRC does not hold, never read into a
// buffer larger than MaxChunkPayload (MaxPayload but for a chunk write),
// and round-trip what it accepts.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, &Header{Op: OpAppend, Partition: 3, Extent: 9, Offset: 128}, []byte("payload")))
	f.Add(AppendFrame(nil, &Header{Op: OpRead, Flags: FlagNoCRC | FlagResponse}, bytes.Repeat([]byte{7}, 300)))
	f.Add(AppendFrame(nil, &Header{Op: OpPing}, nil))
	lying := AppendFrame(nil, &Header{Op: OpAppend}, []byte("x"))
	lying[12] = 0xff
	lying[13] = 0xff
	lying[14] = 0xff
	f.Add(lying)
	f.Add([]byte("CARN"))
	// Chunk writes: a small one, a forwarded one, a full-size one (the
	// only frame above MaxPayload) and one whose length lies one byte past
	// the chunk limit.
	var fp [FingerprintLen]byte
	fp[0] = 1
	f.Add(AppendFrame(nil, &Header{Op: OpWriteChunk, Partition: 2, Epoch: 1}, append(fp[:], "chunk"...)))
	f.Add(AppendFrame(nil, &Header{Op: OpWriteChunk, Flags: FlagForwarded | FlagCreate, Kind: 2, Partition: 2, Extent: 5, Offset: 77}, append(fp[:], 1, 2, 3)))
	f.Add(AppendFrame(nil, &Header{Op: OpWriteChunk}, make([]byte, MaxChunkPayload)))
	over := AppendFrame(nil, &Header{Op: OpWriteChunk}, append(fp[:], 'x'))
	binary.LittleEndian.PutUint32(over[12:], MaxChunkPayload+1)
	binary.LittleEndian.PutUint32(over[76:], crc32.Checksum(over[:76], castagnoli))
	f.Add(over)
	f.Add(AppendFrame(nil, &Header{Op: OpWriteChunk, Flags: FlagResponse, Code: CodeFingerprintMismatch}, []byte("chunk hashes to something else")))
	f.Fuzz(func(t *testing.T, data []byte) {
		cr := &countingReader{r: bytes.NewReader(data)}
		var hdr [HeaderLen]byte
		for range 4 {
			h, p, err := ReadFrame(cr, hdr[:], nil)
			if cr.max > MaxChunkPayload {
				t.Fatalf("decoder read into a buffer of %d bytes", cr.max)
			}
			if err != nil {
				return
			}
			if int(h.Length) > PayloadLimit(h.Op, h.Flags) || int(h.Length) != len(p) || h.Offset < 0 || h.Size < 0 {
				t.Fatalf("accepted a bad frame: %+v (%d payload bytes)", h, len(p))
			}
			// What was accepted re-encodes to the same header bytes.
			var again [HeaderLen]byte
			EncodeHeader(again[:], &h)
			if !bytes.Equal(again[:], hdr[:]) {
				t.Fatalf("header does not round-trip:\n%x\n%x", again, hdr)
			}
		}
	})
}

// FuzzDecodeListings: the payload decoders (listings, checksums, chunk
// payloads) never panic and reject bad lengths.
func FuzzDecodeListings(f *testing.F) {
	f.Add(AppendExtentEntries(nil, []ExtentEntry{{ID: 1, Kind: 1, Size: 3}}))
	f.Add([]byte{1, 2, 3, 4, 5})
	f.Add(append(make([]byte, FingerprintLen), 'c'))
	f.Fuzz(func(t *testing.T, b []byte) {
		if fp, data, err := SplitChunk(b); err == nil && (len(data) == 0 || len(data) > MaxChunk || !bytes.Equal(append(fp[:], data...), b)) {
			t.Fatal("chunk split does not reassemble")
		}
		if es, err := DecodeExtentEntries(b); err == nil && len(es)*ExtentEntryLen != len(b) {
			t.Fatal("length mismatch")
		}
		if cs, err := DecodeChecksums(b); err == nil && len(cs)*4 != len(b) {
			t.Fatal("length mismatch")
		}
	})
}
