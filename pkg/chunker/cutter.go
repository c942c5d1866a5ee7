// Package chunker cuts file contents into content-defined chunks for Cairn's
// content-defined (VarFS) volume mode and names each chunk by a strong hash.
//
// The package is pure: it reads bytes from slices, an [io.Reader] or an
// [io.ReaderAt] handed in by the caller and has no other I/O, clock or global
// mutable state. Cut points depend only on the bytes of the file and on the
// [Config], never on how the bytes were split into reads, the Go version or
// the machine.
//
// # Cut rule
//
// A cut rule looks at a buffer that starts at a chunk boundary and returns
// the length of the first chunk. Both algorithms skip the first MinSize bytes
// without hashing, so a cut never depends on bytes before the chunk's start:
// this is what lets an edit move only neighbouring chunks ([Cutter.Rechunk]).
// A chunk ends at the first position whose hash satisfies the algorithm's
// condition, at MaxSize if none does, or at the end of the file.
//
// FastCDC1 keeps a gear hash h = (h<<1) + gear[b] over the bytes from offset
// MinSize on; after 64 bytes h depends only on the last 64 bytes. With
// b = log2(AvgSize), positions before AvgSize cut when the top b+2 bits of h
// are zero (probability 2^-(b+2)) and later positions when the top b-2 bits
// are zero (2^-(b-2)): normalized chunking at level 2, which pulls chunk
// sizes towards AvgSize. The top bits are used because they mix the most
// bytes of the window.
//
// Rabin1 is the VarFS paper's rule: the Rabin fingerprint (the window's
// bytes as a polynomial over GF(2) modulo [RabinPolynomial]) of the last
// [RabinWindow] bytes, cut when its low b bits are all ones. All ones rather
// than zero so a run of zero bytes (fingerprint 0) does not cut at every
// MinSize.
//
// # Identity
//
// A chunk is named by its [Fingerprint]: the algorithm id followed by the
// SHA-256 of its bytes, so chunks cut by different algorithms never share a
// name even when their bytes are equal.
package chunker

import "fmt"

// Cutter applies one validated [Config]. It holds no mutable state, so one
// Cutter may be used by many goroutines at once.
type Cutter struct {
	cfg          Config
	maskS, maskL uint64 // FastCDC1: cut when h&mask == 0
	maskR        uint64 // Rabin1: cut when f&maskR == maskR
}

// New returns a Cutter for cfg, or the error of [Config.Validate].
func New(cfg Config) (*Cutter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := cfg.avgBits()
	c := &Cutter{cfg: cfg}
	switch cfg.Algorithm {
	case FastCDC1:
		c.maskS = ^uint64(0) << (64 - (b + 2))
		c.maskL = ^uint64(0) << (64 - (b - 2))
	case Rabin1:
		c.maskR = 1<<b - 1
	default:
		return nil, fmt.Errorf("chunker: algorithm %s has no cut rule", cfg.Algorithm)
	}
	return c, nil
}

// Config returns the configuration c was built from.
func (c *Cutter) Config() Config { return c.cfg }

// Next returns the length of the first chunk of data, which must start at a
// chunk boundary and either hold at least MaxSize bytes or end where the file
// ends. The result is in [1, MaxSize] and at least MinSize unless it is
// len(data); it is 0 only for empty data.
func (c *Cutter) Next(data []byte) int {
	if c.cfg.Algorithm == Rabin1 {
		return c.nextRabin(data)
	}
	return c.nextFastCDC(data)
}

// Cut returns the end offsets of the chunks of data, which must start at a
// chunk boundary and end where the file ends: each chunk is data[prev:end]
// with prev the previous end (or 0). The last offset is len(data); empty data
// has no chunks.
func (c *Cutter) Cut(data []byte) []int {
	var ends []int
	for off := 0; off < len(data); {
		off += c.Next(data[off:])
		ends = append(ends, off)
	}
	return ends
}

func (c *Cutter) nextFastCDC(data []byte) int {
	n := len(data)
	if n <= c.cfg.MinSize {
		return n
	}
	if n > c.cfg.MaxSize {
		n = c.cfg.MaxSize
	}
	data = data[:n]
	normal := min(c.cfg.AvgSize, n)
	var h uint64
	i := c.cfg.MinSize
	for ; i < normal; i++ {
		h = h<<1 + gear[data[i]]
		if h&c.maskS == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		h = h<<1 + gear[data[i]]
		if h&c.maskL == 0 {
			return i + 1
		}
	}
	return n
}

func (c *Cutter) nextRabin(data []byte) int {
	n := len(data)
	if n <= c.cfg.MinSize {
		return n
	}
	if n > c.cfg.MaxSize {
		n = c.cfg.MaxSize
	}
	data = data[:n]
	// The window ending at the first eligible position min-1 starts at
	// min-RabinWindow >= 16, inside the chunk.
	var f uint64
	first := c.cfg.MinSize - 1
	for _, b := range data[first+1-RabinWindow : first] {
		f = (f<<8|uint64(b))&rabinMask ^ rabinMod[f>>rabinShift]
	}
	f = (f<<8|uint64(data[first]))&rabinMask ^ rabinMod[f>>rabinShift]
	if f&c.maskR == c.maskR {
		return first + 1
	}
	for i := first + 1; i < n; i++ {
		f ^= rabinOut[data[i-RabinWindow]]
		f = (f<<8|uint64(data[i]))&rabinMask ^ rabinMod[f>>rabinShift]
		if f&c.maskR == c.maskR {
			return i + 1
		}
	}
	return n
}
