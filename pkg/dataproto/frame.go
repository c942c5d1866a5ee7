package dataproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Frame constants.
const (
	// Magic starts every frame: "CARN" in little-endian byte order.
	Magic uint32 = 'C' | 'A'<<8 | 'R'<<16 | 'N'<<24
	// Version is the protocol version this package speaks.
	Version uint8 = 1
	// HeaderLen is the size of a frame header in bytes.
	HeaderLen = 80
	// MaxPayload bounds the payload of any frame: one append or overwrite
	// packet, one read response, one page of a listing.
	MaxPayload = 1 << 20
	// MaxMessage bounds the text of an error response.
	MaxMessage = 1024
	// FingerprintLen is the size of a chunk fingerprint (chunker.Fingerprint:
	// an algorithm byte and the SHA-256 of the chunk), which starts every
	// OpWriteChunk request's payload.
	FingerprintLen = 33
	// MaxChunk is the largest chunk OpWriteChunk stores: the chunker's
	// default maximum chunk size, and what one OpRead returns, so a chunk
	// is always written and read in one frame.
	MaxChunk = MaxPayload
	// MaxChunkPayload bounds an OpWriteChunk request's payload: the
	// fingerprint and a chunk of at most MaxChunk bytes. It is the only
	// frame allowed above MaxPayload.
	MaxChunkPayload = FingerprintLen + MaxChunk
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of p, the payload checksum of a
// frame.
func Checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Op is a request type.
type Op uint8

// Operations. Which header fields each uses is said on it; unused fields are
// zero.
const (
	// OpPing checks that the server answers. No fields.
	OpPing Op = 1
	// OpCreateExtent creates an empty large extent on the partition's
	// primary, which picks its id, and along the chain. Request: Partition
	// (and Extent, Kind when forwarded, with the client certificate's
	// serial as payload). Response: Extent; for a client certificate, the
	// payload is its receipt for the extent (pkg/grant).
	OpCreateExtent Op = 2
	// OpAppend appends the payload at Offset, which must be the extent's
	// size on every replica. Sent by a client to the primary, which forwards
	// it along the chain (FlagForwarded); with FlagCreate a replica first
	// creates the extent (of Kind) if missing. Response: Arg = the offset
	// every replica from this one down the chain holds durably
	// (Offset+Length); Size = this replica's extent size.
	OpAppend Op = 3
	// OpWriteSmall stores the payload, a whole small file, in a shared small
	// extent on every replica. Request: Partition. Response: Extent and
	// Offset where the file is; for a client certificate, the payload is
	// its receipt for the file's range (pkg/grant).
	OpWriteSmall Op = 4
	// OpRead reads Arg bytes at Offset. Size is the extent's committed size
	// the reader knows (from the metadata); the server refuses a range past
	// it (CodeOutOfRange) and a range it does not hold (CodeNotHeld). With
	// FlagGrant the payload is an extent grant, taken first. Response: the
	// bytes.
	OpRead Op = 5
	// OpOverwrite replaces existing bytes at Offset with the payload,
	// through the partition's Raft group. Sent to any replica; a follower
	// answers CodeNotLeader with the leader's node id in Arg. Arg is the
	// overwrite's id (0: none), the same on every attempt: a replica that
	// applied an id (among its partition's last 16384 overwrites) does
	// not apply it again.
	OpOverwrite Op = 6
	// OpFree frees the data of one extent key of a deleted file (CFS
	// §2.7.3): in a small extent the Arg bytes at Offset are punched out; a
	// large extent, which holds one file from offset 0, is deleted whole by
	// the key at Offset 0 (keys further in free nothing on their own).
	// Forwarded along the chain; freeing what is already free succeeds.
	OpFree Op = 7
	// OpListExtents lists the partition's extents with ids above Arg, in id
	// order, as ExtentEntry records. Response: FlagMore if the list goes on;
	// Epoch = the epoch of the partition's replica set on the server, read
	// before the extents were.
	OpListExtents Op = 8
	// OpChecksums returns the block CRCs of Extent from block Arg on.
	// Response: Size = the extent's size, Arg = its block size, Offset =
	// the first block, payload = one uint32 per block (at most
	// MaxPayload/4; FlagMore if more follow).
	OpChecksums Op = 9
	// OpWriteChunk stores a content-addressed chunk, packed like a small
	// file into a shared small extent on every replica. Payload: the
	// chunk's FingerprintLen-byte fingerprint, then its 1..MaxChunk bytes.
	// Every replica checks the SHA-256 of the bytes against the fingerprint
	// before storing or forwarding them (CodeFingerprintMismatch: nothing
	// stored). Request: Partition; forwarded down the chain with Extent,
	// Offset, Kind and FlagCreate as an append. Response: Extent and Offset
	// where the chunk is, Arg = Offset + chunk size, Size = the extent's
	// size on the primary; for a client certificate, the payload is its
	// receipt for the chunk's range (pkg/grant).
	OpWriteChunk Op = 10
	// OpGrant presents an extent grant (pkg/grant): the payload is the
	// token. The data node verifies it and from then on serves the ranges
	// it names to the connection's certificate, on any of its connections
	// to this node, until the token expires. The server handles it before
	// it reads the next request, so a client sends it and the read it is
	// for back to back, without waiting. Response: CodeOK, or
	// CodePermissionDenied with the reason (a bad signature, another
	// certificate's token) or CodeNoGrant (expired, or signed with a key
	// this node does not know yet).
	OpGrant Op = 11
	maxOp      = OpGrant
)

var opNames = [...]string{"", "ping", "create", "append", "write_small", "read", "overwrite", "free", "list", "checksums", "write_chunk", "grant"}

// String names the op.
func (o Op) String() string {
	if o >= 1 && o <= maxOp {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Valid reports whether o is a known op.
func (o Op) Valid() bool { return o >= 1 && o <= maxOp }

// Flags modify a frame.
type Flags uint8

// Flag bits.
const (
	// FlagResponse marks a response.
	FlagResponse Flags = 1 << 0
	// FlagForwarded marks a request sent by a data node: along the
	// replication chain or for maintenance (alignment, repair).
	FlagForwarded Flags = 1 << 1
	// FlagCreate asks a replica to create the extent (of the frame's Kind)
	// before appending, if it does not exist.
	FlagCreate Flags = 1 << 2
	// FlagNoCRC says the payload carries no CRC (sendfile read responses).
	FlagNoCRC Flags = 1 << 3
	// FlagMore says a listing continues.
	FlagMore Flags = 1 << 4
	// FlagWhole, on a free, says the sender checked that no key of the file
	// refers to the extent any more: a large extent is then deleted whole
	// whatever the offset (a small file's range is punched as always).
	FlagWhole Flags = 1 << 5
	// FlagVerify, on a read, asks the replica to read and check every
	// block of the range against its CRCs before answering (CodeCorrupt
	// if one fails, and the replica repairs it) instead of leaving the
	// check of the blocks the range covers whole to the reader. A client
	// sets it when a response failed its payload CRC; data nodes set it on
	// their own reads from a peer (alignment, repair), so that a source
	// with a bad block says so and repairs it.
	FlagVerify Flags = 1 << 6
	// FlagGrant, on a read, says its payload is an extent grant to take
	// before the read (as OpGrant would, without a frame and an answer of
	// its own): a client presents a token with the first read that needs
	// it on a node.
	FlagGrant Flags = 1 << 7
)

// Code is a response's result.
type Code uint16

// Result codes. Errors a client can act on have their own code; the rest are
// CodeInternal with a message.
const (
	CodeOK Code = iota
	// CodeBadRequest: the request is malformed or its arguments invalid.
	CodeBadRequest
	// CodeBadCRC: the payload did not match its CRC; nothing was done.
	CodeBadCRC
	// CodeUnknownPartition: the partition is not hosted here.
	CodeUnknownPartition
	// CodeStaleEpoch: the request's epoch predates the partition's replica
	// set on this node (the response's Epoch); refresh the map and retry.
	CodeStaleEpoch
	// CodeNotPrimary: a client write reached a replica other than the
	// partition's first.
	CodeNotPrimary
	// CodeNotFound: no such extent.
	CodeNotFound
	// CodeOffsetMismatch: an append's offset is not the extent's size on
	// this replica (the response's Size).
	CodeOffsetMismatch
	// CodeNotHeld: this replica does not hold the range (it is behind, or
	// the extent awaits repair); read it from another replica.
	CodeNotHeld
	// CodeOutOfRange: the range lies past the committed bytes the request
	// names, or past the extent's committed size.
	CodeOutOfRange
	// CodeReplicaFailed: a replica down the chain failed or did not answer
	// in time; the write is not acknowledged. Write elsewhere. Arg names
	// the node that did not answer (0: a replica answered, with an error).
	CodeReplicaFailed
	// CodeReadOnly: the partition refuses new data (a disk filled up).
	CodeReadOnly
	// CodeFailed: the replica's store failed (I/O error); it is being
	// repaired.
	CodeFailed
	// CodeCorrupt: the stored bytes failed their checksum here.
	CodeCorrupt
	// CodeNotLeader: an overwrite reached a Raft follower; Arg names the
	// leader's node id (0 if none is known).
	CodeNotLeader
	// CodeBusy: the server is overloaded or timed out; retry later.
	CodeBusy
	// CodeTooLarge: the write exceeds a size limit.
	CodeTooLarge
	// CodeExtentFull: the extent reached its size limit.
	CodeExtentFull
	// CodeWrongKind: the operation does not apply to this extent kind.
	CodeWrongKind
	// CodeInternal: anything else; see the message.
	CodeInternal
	// CodeFingerprintMismatch: a chunk's bytes do not hash to the
	// fingerprint the request names; nothing was stored. It is the
	// sender's error (or corruption before the frame CRC was computed):
	// writing the same request elsewhere cannot succeed.
	CodeFingerprintMismatch
	// CodeDegraded: the partition takes no writes because too few of its
	// replicas are alive (its write chain is below the write quorum, or no
	// replica that holds every acknowledged write heads it); reads still
	// work. Write elsewhere; it heals when replicas return.
	CodeDegraded
	// CodePermissionDenied: the certificate the connection was
	// authenticated with does not allow the request (a forwarded write from
	// anything but a cluster node).
	CodePermissionDenied
	// CodeReadOnlyClient: the certificate the connection was authenticated
	// with is a read-only client's (pkg/capability): no write is allowed
	// on any partition.
	CodeReadOnlyClient
	// CodeNoGrant: the connection's certificate is a client's, and no
	// grant it presented (OpGrant) names the range: present the token, or
	// fetch the file's inode again for a new one, and retry.
	CodeNoGrant
	// CodeVolumeFull: the volume's data reached its capacity; no new data
	// is taken from clients (ENOSPC).
	CodeVolumeFull
	maxCode = CodeVolumeFull
)

// Denied reports whether c refuses the connection's identity rather than
// the request's partition: writing elsewhere cannot succeed either.
func (c Code) Denied() bool { return c == CodePermissionDenied || c == CodeReadOnlyClient }

var codeNames = [...]string{"ok", "bad request", "bad crc", "unknown partition", "stale epoch", "not primary",
	"extent not found", "offset mismatch", "range not held", "out of range", "replica failed", "read-only",
	"replica failed its store", "corrupt", "not leader", "busy", "too large", "extent full", "wrong extent kind", "internal",
	"fingerprint mismatch", "degraded", "permission denied", "read-only client", "no grant", "volume full"}

// String names the code.
func (c Code) String() string {
	if c <= maxCode {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint16(c))
}

// Header is a frame header. Offset and Size are below 2^63.
type Header struct {
	Op        Op
	Flags     Flags
	Kind      uint8
	Code      Code
	Length    uint32 // payload bytes
	ReqID     uint64
	Partition uint64
	Extent    uint64
	Offset    int64
	Arg       uint64
	Size      int64
	Epoch     uint64
	// PayloadCRC is the CRC32C of the payload (see FlagNoCRC).
	PayloadCRC uint32
}

// Framing errors. ErrPayloadCRC leaves the stream usable; the others do not.
var (
	ErrBadMagic   = errors.New("dataproto: bad magic (not a Cairn data-path peer?)")
	ErrBadVersion = errors.New("dataproto: unsupported protocol version")
	ErrHeaderCRC  = errors.New("dataproto: header checksum mismatch")
	ErrBadHeader  = errors.New("dataproto: malformed header")
	ErrTooLarge   = errors.New("dataproto: payload larger than its op allows (MaxPayload, MaxChunkPayload)")
	ErrPayloadCRC = errors.New("dataproto: payload checksum mismatch")
)

// EncodeHeader writes h into b (at least HeaderLen bytes) with the magic,
// version and header CRC. It does not compute the payload CRC: set
// h.PayloadCRC (Checksum) first.
func EncodeHeader(b []byte, h *Header) {
	_ = b[HeaderLen-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	b[4] = Version
	b[5] = byte(h.Op)
	b[6] = byte(h.Flags)
	b[7] = h.Kind
	le.PutUint16(b[8:], uint16(h.Code))
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], h.Length)
	le.PutUint64(b[16:], h.ReqID)
	le.PutUint64(b[24:], h.Partition)
	le.PutUint64(b[32:], h.Extent)
	le.PutUint64(b[40:], uint64(h.Offset))
	le.PutUint64(b[48:], h.Arg)
	le.PutUint64(b[56:], uint64(h.Size))
	le.PutUint64(b[64:], h.Epoch)
	le.PutUint32(b[72:], h.PayloadCRC)
	le.PutUint32(b[76:], crc32.Checksum(b[:76], castagnoli))
}

// PayloadLimit is the largest payload a frame of op with flags may carry:
// MaxChunkPayload for an OpWriteChunk request, MaxPayload for every other
// frame.
func PayloadLimit(op Op, flags Flags) int {
	if op == OpWriteChunk && flags&FlagResponse == 0 {
		return MaxChunkPayload
	}
	return MaxPayload
}

// DecodeHeader parses and checks a header: magic, version, header CRC,
// reserved bytes, Length at most PayloadLimit, Offset and Size below 2^63. It
// never trusts a field before the header CRC has been checked.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrBadHeader, len(b))
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != Magic {
		return Header{}, ErrBadMagic
	}
	if got, want := crc32.Checksum(b[:76], castagnoli), le.Uint32(b[76:]); got != want {
		return Header{}, fmt.Errorf("%w: %08x, want %08x", ErrHeaderCRC, got, want)
	}
	if b[4] != Version {
		return Header{}, fmt.Errorf("%w: %d (this side speaks %d)", ErrBadVersion, b[4], Version)
	}
	if le.Uint16(b[10:]) != 0 {
		return Header{}, fmt.Errorf("%w: reserved bytes set", ErrBadHeader)
	}
	h := Header{
		Op:         Op(b[5]),
		Flags:      Flags(b[6]),
		Kind:       b[7],
		Code:       Code(le.Uint16(b[8:])),
		Length:     le.Uint32(b[12:]),
		ReqID:      le.Uint64(b[16:]),
		Partition:  le.Uint64(b[24:]),
		Extent:     le.Uint64(b[32:]),
		Arg:        le.Uint64(b[48:]),
		Epoch:      le.Uint64(b[64:]),
		PayloadCRC: le.Uint32(b[72:]),
	}
	off, size := le.Uint64(b[40:]), le.Uint64(b[56:])
	if off > math.MaxInt64 || size > math.MaxInt64 {
		return Header{}, fmt.Errorf("%w: offset %d or size %d above 2^63", ErrBadHeader, off, size)
	}
	h.Offset, h.Size = int64(off), int64(size)
	if int64(h.Length) > int64(PayloadLimit(h.Op, h.Flags)) {
		return Header{}, fmt.Errorf("%w: %v frame of %d bytes", ErrTooLarge, h.Op, h.Length)
	}
	return h, nil
}

// ReadFrame reads one frame from r: the header into hdr (a scratch buffer of
// HeaderLen bytes), then the payload into buf if it fits (else a new slice
// of exactly Length bytes, at most PayloadLimit). It returns the payload and
// checks its CRC unless FlagNoCRC is set: on a mismatch the frame has been
// consumed and ReadFrame returns the header, the payload and an error
// wrapping ErrPayloadCRC. Any other error leaves r unframed.
func ReadFrame(r io.Reader, hdr []byte, buf []byte) (Header, []byte, error) {
	if _, err := io.ReadFull(r, hdr[:HeaderLen]); err != nil {
		return Header{}, nil, err
	}
	h, err := DecodeHeader(hdr)
	if err != nil {
		return Header{}, nil, err
	}
	p, err := ReadPayload(r, &h, buf)
	return h, p, err
}

// ReadPayload reads h's payload from r into buf if it fits, else into a new
// slice, and checks its CRC as ReadFrame does. h must come from
// DecodeHeader (so Length is bounded).
func ReadPayload(r io.Reader, h *Header, buf []byte) ([]byte, error) {
	if h.Length == 0 {
		return nil, nil
	}
	var p []byte
	if int(h.Length) <= cap(buf) {
		p = buf[:h.Length]
	} else {
		p = make([]byte, h.Length)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if h.Flags&FlagNoCRC == 0 {
		if got := Checksum(p); got != h.PayloadCRC {
			return p, fmt.Errorf("%w: op %v request %d: crc32c %08x, header says %08x", ErrPayloadCRC, h.Op, h.ReqID, got, h.PayloadCRC)
		}
	}
	return p, nil
}

// AppendFrame appends the frame of h and payload to dst, setting h.Length
// and, unless FlagNoCRC, h.PayloadCRC. It is for tests and small messages;
// connections write header and payload without copying.
func AppendFrame(dst []byte, h *Header, payload []byte) []byte {
	h.Length = uint32(len(payload))
	if h.Flags&FlagNoCRC == 0 {
		h.PayloadCRC = Checksum(payload)
	}
	var b [HeaderLen]byte
	EncodeHeader(b[:], h)
	return append(append(dst, b[:]...), payload...)
}
