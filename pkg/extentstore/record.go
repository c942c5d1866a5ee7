package extentstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// The metadata log (file META) is a sequence of framed records:
//
//	crc (4, little endian) | length (4, little endian) | body (length bytes)
//
// crc is CRC32C over the 4 length bytes and the body, so a torn or rotten
// frame is detected whatever part of it is damaged. Bodies start with a
// record type:
//
//	recHeader      magic "CAIRNEXT" | version | block size | reserved ids
//	recExtent      extent id | ops, each at most once, in this order:
//	  opCreate     kind (1 byte)
//	  opState      size | run count | runs: first block, count, count x crc (4, LE)
//	  opPunch      range count | ranges: offset, length
//	  opOverwrite  offset | length | data
//	  opDelete
//	recReserve     reserved ids: every id below it may have been handed out
//	recSnapshotEnd extent count | reserved ids
//
// Numbers are unsigned varints unless said otherwise. A log starts with a
// snapshot: recHeader, one recExtent per live extent (create, full state,
// all punched ranges), recSnapshotEnd; then come the deltas of each commit
// round. A record is the unit of atomicity: the records of one extent in one
// round are one recExtent, so a torn tail never leaves an extent half
// updated.
const (
	recHeader      byte = 1
	recExtent      byte = 2
	recReserve     byte = 3
	recSnapshotEnd byte = 4
)

const (
	opCreate    byte = 1
	opState     byte = 2
	opPunch     byte = 3
	opOverwrite byte = 4
	opDelete    byte = 5
)

const (
	metaMagic     = "CAIRNEXT"
	formatVersion = 1
	frameHeader   = 8
	// maxRecordBytes bounds one record so that a corrupt length cannot make
	// replay allocate without limit. Real records are far smaller: an
	// extent's state is 4 bytes per block, an overwrite at most
	// Options.MaxWriteBytes.
	maxRecordBytes = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errTorn marks the end of the valid prefix of the log: a frame cut short or
// failing its CRC. Replay stops there; it is the expected result of a crash
// during a log write.
var errTorn = errors.New("torn record")

// appendFrame appends body framed as a record to dst.
func appendFrame(dst, body []byte) []byte {
	var hdr [frameHeader]byte
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(body)))
	c := crc32.Update(0, castagnoli, hdr[4:8])
	c = crc32.Update(c, castagnoli, body)
	binary.LittleEndian.PutUint32(hdr[:4], c)
	dst = append(dst, hdr[:]...)
	return append(dst, body...)
}

// decodeFrame returns the body of the frame at the start of b and the
// frame's total length, or errTorn if b does not start with a whole, valid
// frame.
func decodeFrame(b []byte) (body []byte, n int, err error) {
	if len(b) < frameHeader {
		return nil, 0, errTorn
	}
	length := binary.LittleEndian.Uint32(b[4:8])
	if length > maxRecordBytes || uint64(len(b)-frameHeader) < uint64(length) {
		return nil, 0, errTorn
	}
	body = b[frameHeader : frameHeader+int(length)]
	c := crc32.Update(0, castagnoli, b[4:8])
	c = crc32.Update(c, castagnoli, body)
	if c != binary.LittleEndian.Uint32(b[:4]) {
		return nil, 0, errTorn
	}
	return body, frameHeader + int(length), nil
}

// logReader reads frames from a file one at a time, so that replay memory
// is bounded by the largest record, not the log.
type logReader struct {
	f    diskfs.File
	off  int64
	size int64
	buf  []byte
}

// next returns the next record body (valid until the following call), io.EOF
// at the clean end of the log, or errTorn at a torn or corrupt frame.
func (r *logReader) next() ([]byte, error) {
	if r.off == r.size {
		return nil, io.EOF
	}
	if r.size-r.off < frameHeader {
		return nil, errTorn
	}
	var hdr [frameHeader]byte
	if _, err := r.f.ReadAt(hdr[:], r.off); err != nil {
		return nil, fmt.Errorf("read log at %d: %w", r.off, classify(err))
	}
	length := int64(binary.LittleEndian.Uint32(hdr[4:8]))
	if length > maxRecordBytes || r.size-r.off-frameHeader < length {
		return nil, errTorn
	}
	total := int(frameHeader + length)
	if cap(r.buf) < total {
		r.buf = make([]byte, total)
	}
	r.buf = r.buf[:total]
	if _, err := r.f.ReadAt(r.buf, r.off); err != nil {
		return nil, fmt.Errorf("read log at %d: %w", r.off, classify(err))
	}
	body, n, err := decodeFrame(r.buf)
	if err != nil {
		return nil, err
	}
	r.off += int64(n)
	return body, nil
}

// span is the byte range [off, end).
type span struct{ off, end int64 }

// crcRun is the CRCs of consecutive blocks starting at first.
type crcRun struct {
	first int64
	crcs  []uint32
}

// extentRecord is a decoded recExtent.
type extentRecord struct {
	id         uint64
	create     bool
	kind       Kind
	hasState   bool
	size       int64
	runs       []crcRun
	punches    []span
	overwrites []*overwriteOp // in the order they were made
	delete     bool
}

type overwriteOp struct {
	off     int64
	data    []byte
	bodyOff int // where data starts in the decoded body
}

// encodeExtentRecord appends the body of r to dst.
func encodeExtentRecord(dst []byte, r *extentRecord) []byte {
	dst = append(dst, recExtent)
	dst = binary.AppendUvarint(dst, r.id)
	if r.create {
		dst = append(dst, opCreate, byte(r.kind))
	}
	if r.hasState {
		dst = append(dst, opState)
		dst = binary.AppendUvarint(dst, uint64(r.size))
		dst = binary.AppendUvarint(dst, uint64(len(r.runs)))
		for _, run := range r.runs {
			dst = binary.AppendUvarint(dst, uint64(run.first))
			dst = binary.AppendUvarint(dst, uint64(len(run.crcs)))
			for _, c := range run.crcs {
				dst = binary.LittleEndian.AppendUint32(dst, c)
			}
		}
	}
	if len(r.punches) > 0 {
		dst = append(dst, opPunch)
		dst = binary.AppendUvarint(dst, uint64(len(r.punches)))
		for _, sp := range r.punches {
			dst = binary.AppendUvarint(dst, uint64(sp.off))
			dst = binary.AppendUvarint(dst, uint64(sp.end-sp.off))
		}
	}
	for _, w := range r.overwrites {
		dst = append(dst, opOverwrite)
		dst = binary.AppendUvarint(dst, uint64(w.off))
		dst = binary.AppendUvarint(dst, uint64(len(w.data)))
		dst = append(dst, w.data...)
	}
	if r.delete {
		dst = append(dst, opDelete)
	}
	return dst
}

// decoder reads varints and bytes from a body, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("record truncated")

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int63 reads a varint that must fit an int64 and be at most limit.
func (d *decoder) int63(what string, limit int64) int64 {
	v := d.uvarint()
	if d.err == nil && v > uint64(limit) {
		d.fail(fmt.Errorf("%s %d exceeds %d", what, v, limit))
		return 0
	}
	return int64(v)
}

func (d *decoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(errShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bytes(n int64) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || int64(len(d.b)) < n {
		d.fail(errShort)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// Decoding limits: no size, offset or count may exceed these, whatever the
// record says, so a record that passes its CRC but was written by a buggy or
// foreign writer cannot make replay allocate or loop without bound.
const (
	maxSizeLimit = 1 << 50
	maxBlocks    = maxSizeLimit / 512
)

// decodeExtentRecord decodes a recExtent body (type byte included). It never
// panics and allocates at most in proportion to len(body). The data of an
// overwrite aliases body.
func decodeExtentRecord(body []byte) (*extentRecord, error) {
	d := &decoder{b: body}
	if d.byte1() != recExtent {
		return nil, errors.New("not an extent record")
	}
	r := &extentRecord{id: d.uvarint()}
	if d.err == nil && r.id == 0 {
		return nil, errors.New("extent id 0")
	}
	last := byte(0)
	for d.err == nil && len(d.b) > 0 {
		op := d.byte1()
		// Ops come in increasing order, each once, except overwrites: a
		// record carries every overwrite of its extent in a batch.
		if (op <= last && !(op == opOverwrite && last == opOverwrite)) || op > opDelete {
			return nil, fmt.Errorf("extent %d: op %d out of order or unknown", r.id, op)
		}
		last = op
		switch op {
		case opCreate:
			r.create = true
			r.kind = Kind(d.byte1())
			if d.err == nil && r.kind != KindLarge && r.kind != KindSmall {
				return nil, fmt.Errorf("extent %d: unknown kind %d", r.id, r.kind)
			}
		case opState:
			r.hasState = true
			r.size = d.int63("size", maxSizeLimit)
			nruns := d.uvarint()
			// Every run takes at least 2 bytes: a bound on the count that
			// keeps the allocation proportional to the body.
			if d.err == nil && nruns > uint64(len(d.b))/2 {
				return nil, fmt.Errorf("extent %d: %d crc runs in %d bytes", r.id, nruns, len(d.b))
			}
			r.runs = make([]crcRun, 0, nruns)
			for i := uint64(0); i < nruns && d.err == nil; i++ {
				first := d.int63("block", maxBlocks)
				n := d.int63("run length", maxBlocks)
				raw := d.bytes(n * 4)
				if d.err != nil {
					break
				}
				crcs := make([]uint32, n)
				for j := range crcs {
					crcs[j] = binary.LittleEndian.Uint32(raw[4*j:])
				}
				r.runs = append(r.runs, crcRun{first: first, crcs: crcs})
			}
		case opPunch:
			n := d.uvarint()
			if d.err == nil && n > uint64(len(d.b))/2 {
				return nil, fmt.Errorf("extent %d: %d punched ranges in %d bytes", r.id, n, len(d.b))
			}
			r.punches = make([]span, 0, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				off := d.int63("punch offset", maxSizeLimit)
				length := d.int63("punch length", maxSizeLimit)
				if d.err == nil && length == 0 {
					return nil, fmt.Errorf("extent %d: empty punched range", r.id)
				}
				r.punches = append(r.punches, span{off, off + length})
			}
		case opOverwrite:
			off := d.int63("overwrite offset", maxSizeLimit)
			length := d.int63("overwrite length", maxRecordBytes)
			at := len(body) - len(d.b)
			data := d.bytes(length)
			if d.err == nil {
				r.overwrites = append(r.overwrites, &overwriteOp{off: off, data: data, bodyOff: at})
			}
		case opDelete:
			r.delete = true
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("extent record: %w", d.err)
	}
	return r, nil
}

// header is a decoded recHeader.
type header struct {
	version   uint64
	blockSize int64
	reserved  uint64
}

func encodeHeader(h header) []byte {
	b := []byte{recHeader}
	b = append(b, metaMagic...)
	b = binary.AppendUvarint(b, h.version)
	b = binary.AppendUvarint(b, uint64(h.blockSize))
	return binary.AppendUvarint(b, h.reserved)
}

func decodeHeader(body []byte) (header, error) {
	d := &decoder{b: body}
	if d.byte1() != recHeader || string(d.bytes(int64(len(metaMagic)))) != metaMagic {
		return header{}, errors.New("not a metadata log (bad magic)")
	}
	h := header{version: d.uvarint(), blockSize: d.int63("block size", maxBlockSize), reserved: d.uvarint()}
	if d.err != nil {
		return header{}, fmt.Errorf("header: %w", d.err)
	}
	if h.version != formatVersion {
		return header{}, fmt.Errorf("format version %d, want %d", h.version, formatVersion)
	}
	if h.blockSize < minBlockSize || h.blockSize%minBlockSize != 0 {
		return header{}, fmt.Errorf("block size %d invalid", h.blockSize)
	}
	return h, nil
}

func encodeReserve(reserved uint64) []byte {
	return binary.AppendUvarint([]byte{recReserve}, reserved)
}

func encodeSnapshotEnd(count int, reserved uint64) []byte {
	b := binary.AppendUvarint([]byte{recSnapshotEnd}, uint64(count))
	return binary.AppendUvarint(b, reserved)
}

// decodeUvarints decodes a body of the given type made of n varints.
func decodeUvarints(body []byte, typ byte, n int) ([]uint64, error) {
	d := &decoder{b: body}
	if t := d.byte1(); d.err != nil || t != typ {
		return nil, fmt.Errorf("record type %d, want %d", t, typ)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = d.uvarint()
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(errors.New("trailing bytes"))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}
