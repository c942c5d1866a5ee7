package chunker

import (
	"errors"
	"fmt"
	"io"
)

// DefaultReadSize is the read size of a [Chunker] when none is given.
const DefaultReadSize = 256 << 10

// maxEmptyReads bounds how often a reader may return (0, nil) in a row
// before the Chunker gives up with io.ErrNoProgress.
const maxEmptyReads = 100

// Chunk is one chunk of a stream or of a re-chunked region.
type Chunk struct {
	// Offset is the chunk's position in the file.
	Offset int64
	// Length is len(Data).
	Length int
	// Fingerprint is Sum(algorithm, Data).
	Fingerprint Fingerprint
	// Data is the chunk's content. From a [Chunker] it aliases the
	// Chunker's buffer and is valid only until the next call of Next.
	Data []byte
}

// Chunker cuts the bytes of an io.Reader into the same chunks [Cutter.Cut]
// returns for the whole content, holding at most MaxSize plus one read size
// of it in memory. A Chunker is not safe for concurrent use.
type Chunker struct {
	cut      *Cutter
	r        io.Reader
	readSize int
	buf      []byte // capacity MaxSize + readSize
	start    int    // first unconsumed byte in buf
	end      int    // end of buffered bytes
	offset   int64  // file offset of buf[start]
	eof      bool
	err      error // sticky error returned after the buffered chunks
}

// NewChunker returns a Chunker reading r from its current position, which is
// taken to be file offset 0 and a chunk boundary. readSize is the size of one
// read; values <= 0 mean [DefaultReadSize].
func NewChunker(r io.Reader, c *Cutter, readSize int) *Chunker {
	if readSize <= 0 {
		readSize = DefaultReadSize
	}
	return &Chunker{cut: c, r: r, readSize: readSize}
}

// Next returns the next chunk, or io.EOF after the last one. A read error is
// returned, wrapped, after the chunks that could be cut without the missing
// bytes: chunks before it are final, nothing after it is guessed. Once Next
// returned an error it returns the same error again.
func (s *Chunker) Next() (Chunk, error) {
	maxSize := s.cut.cfg.MaxSize
	for s.end-s.start < maxSize && !s.eof && s.err == nil {
		s.fill()
	}
	if s.end-s.start < maxSize && !s.eof {
		// A read failed before a full chunk was buffered; cutting now could
		// produce a chunk the whole file would not have.
		return Chunk{}, s.err
	}
	if s.start == s.end {
		return Chunk{}, io.EOF
	}
	n := s.cut.Next(s.buf[s.start:s.end])
	data := s.buf[s.start : s.start+n : s.start+n]
	ch := Chunk{Offset: s.offset, Length: n, Fingerprint: Sum(s.cut.cfg.Algorithm, data), Data: data}
	s.start += n
	s.offset += int64(n)
	return ch, nil
}

// fill does one read into the buffer, compacting it first when the free
// tail is shorter than one read.
func (s *Chunker) fill() {
	if s.buf == nil {
		s.buf = make([]byte, s.cut.cfg.MaxSize+s.readSize)
	}
	if len(s.buf)-s.end < s.readSize {
		copy(s.buf, s.buf[s.start:s.end])
		s.end -= s.start
		s.start = 0
	}
	for range maxEmptyReads {
		p := s.buf[s.end:min(s.end+s.readSize, len(s.buf))]
		n, err := s.r.Read(p)
		if n < 0 || n > len(p) {
			s.err = fmt.Errorf("chunker: read at offset %d: invalid count %d", s.offset+int64(s.end-s.start), n)
			return
		}
		s.end += n
		if errors.Is(err, io.EOF) {
			s.eof = true
			return
		}
		if err != nil {
			s.err = fmt.Errorf("chunker: read at offset %d: %w", s.offset+int64(s.end-s.start), err)
			return
		}
		if n > 0 {
			return
		}
	}
	s.err = fmt.Errorf("chunker: read at offset %d: %w", s.offset+int64(s.end-s.start), io.ErrNoProgress)
}
