package lightrpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Preface opens every connection, from the client, and the server echoes it
// before anything else. It is not the start of an HTTP/2 client preface
// ("PRI * HTTP/2.0"), so one port serves both protocols; the last byte is the
// protocol version.
var Preface = [5]byte{'C', 'R', 'P', 'C', 1}

// Frame kinds.
const (
	kindRequest  byte = 1 // client -> server: a unary call
	kindCancel   byte = 2 // client -> server: the caller gave up on call id
	kindResponse byte = 3 // server -> client: the answer to call id
	// kindNotify is a one-way call, client -> server: a request body, no
	// answer, handled before the next frame of its connection is read.
	kindNotify byte = 4
)

// headerBytes is the fixed part of every frame: length (of what follows it,
// u32), kind (u8) and call id (u64), little-endian.
const headerBytes = 4 + 1 + 8

// Bounds of the variable fields: a method name, a status message and a
// trailer are small by nature; a peer that sends more is broken or hostile.
const (
	maxMethodBytes   = 1 << 10
	maxMessageBytes  = 64 << 10
	maxTrailerPairs  = 64
	maxTrailerString = 4 << 10
)

// DefaultMaxFrameBytes bounds one frame when the caller sets no bound; it
// matches the largest gRPC message Cairn's servers accept.
const DefaultMaxFrameBytes = 512 << 20

// errMalformed marks a frame that breaks the format: the connection cannot
// be trusted further and is closed.
var errMalformed = errors.New("malformed frame")

// frame is one decoded frame. Slices point into the frame's own buffer.
type frame struct {
	kind byte
	id   uint64
	body []byte
}

// readFrame reads one frame of at most maxBytes (after the length field).
func readFrame(r *bufio.Reader, maxBytes int) (frame, error) {
	var h [headerBytes]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	if n < 1+8 || uint64(n) > uint64(maxBytes) {
		return frame{}, fmt.Errorf("%w: length %d (bound %d)", errMalformed, n, maxBytes)
	}
	f := frame{kind: h[4], id: binary.LittleEndian.Uint64(h[5:13])}
	size := int(n) - (1 + 8)
	if size <= eagerBodyBytes {
		f.body = make([]byte, size)
		if _, err := io.ReadFull(r, f.body); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return frame{}, err
		}
		return f, nil
	}
	// A large frame's buffer grows with the bytes that arrive, so that a
	// length alone (a peer that then sends nothing) costs no memory.
	body, err := io.ReadAll(io.LimitReader(r, int64(size)))
	if err == nil && len(body) < size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return frame{}, err
	}
	f.body = body
	return f, nil
}

// eagerBodyBytes is the largest frame body allocated whole before it
// arrives.
const eagerBodyBytes = 1 << 20

// appendHeader appends a frame header whose length is patched by
// finishFrame once the body is appended; it returns the header's offset.
func appendHeader(b []byte, kind byte, id uint64) ([]byte, int) {
	at := len(b)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint64(b, id)
	return b, at
}

// finishFrame writes the length of the frame that starts at at.
func finishFrame(b []byte, at int) {
	binary.LittleEndian.PutUint32(b[at:at+4], uint32(len(b)-at-4))
}

// request is a decoded request body.
type request struct {
	timeout time.Duration // 0: none
	method  string
	payload []byte
}

func appendRequest(b []byte, id uint64, timeout time.Duration, method string, marshal func([]byte) ([]byte, error)) ([]byte, error) {
	return appendCall(b, kindRequest, id, timeout, method, marshal)
}

// appendCall appends a frame with a request body: a unary call
// (kindRequest) or a one-way one (kindNotify).
func appendCall(b []byte, kind byte, id uint64, timeout time.Duration, method string, marshal func([]byte) ([]byte, error)) ([]byte, error) {
	b, at := appendHeader(b, kind, id)
	us := uint64(0)
	if timeout > 0 {
		us = max(uint64(timeout/time.Microsecond), 1)
	}
	b = binary.LittleEndian.AppendUint64(b, us)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(method)))
	b = append(b, method...)
	b, err := marshal(b)
	if err != nil {
		return nil, err
	}
	finishFrame(b, at)
	return b, nil
}

func decodeRequest(body []byte) (request, error) {
	if len(body) < 8+2 {
		return request{}, fmt.Errorf("%w: request of %d bytes", errMalformed, len(body))
	}
	us := binary.LittleEndian.Uint64(body[0:8])
	ml := int(binary.LittleEndian.Uint16(body[8:10]))
	if ml > maxMethodBytes || len(body) < 10+ml {
		return request{}, fmt.Errorf("%w: method name of %d bytes", errMalformed, ml)
	}
	r := request{method: string(body[10 : 10+ml]), payload: body[10+ml:]}
	if us > 0 {
		// Bounded so that the conversion cannot overflow: a year is
		// longer than any call.
		r.timeout = time.Duration(min(us, uint64(365*24*time.Hour/time.Microsecond))) * time.Microsecond
	}
	return r, nil
}

// response is a decoded response body.
type response struct {
	code    uint32
	message string
	trailer []string // key, value, key, value...
	payload []byte
}

func appendResponse(b []byte, id uint64, code uint32, message string, trailer []string, payload func([]byte) ([]byte, error)) ([]byte, error) {
	b, at := appendHeader(b, kindResponse, id)
	if len(message) > maxMessageBytes {
		message = message[:maxMessageBytes]
	}
	b = binary.LittleEndian.AppendUint32(b, code)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(message)))
	b = append(b, message...)
	pairs := min(len(trailer)/2, maxTrailerPairs)
	b = binary.LittleEndian.AppendUint16(b, uint16(pairs))
	for _, s := range trailer[:2*pairs] {
		if len(s) > maxTrailerString {
			s = s[:maxTrailerString]
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	if payload != nil {
		var err error
		if b, err = payload(b); err != nil {
			return nil, err
		}
	}
	finishFrame(b, at)
	return b, nil
}

func decodeResponse(body []byte) (response, error) {
	var r response
	if len(body) < 4+4 {
		return r, fmt.Errorf("%w: response of %d bytes", errMalformed, len(body))
	}
	r.code = binary.LittleEndian.Uint32(body[0:4])
	ml := binary.LittleEndian.Uint32(body[4:8])
	body = body[8:]
	if ml > maxMessageBytes || uint64(len(body)) < uint64(ml)+2 {
		return r, fmt.Errorf("%w: status message of %d bytes", errMalformed, ml)
	}
	r.message = string(body[:ml])
	body = body[ml:]
	pairs := int(binary.LittleEndian.Uint16(body[0:2]))
	body = body[2:]
	if pairs > maxTrailerPairs {
		return r, fmt.Errorf("%w: %d trailer pairs", errMalformed, pairs)
	}
	if pairs > 0 {
		r.trailer = make([]string, 0, 2*pairs)
	}
	for range 2 * pairs {
		if len(body) < 2 {
			return r, fmt.Errorf("%w: trailer cut short", errMalformed)
		}
		n := int(binary.LittleEndian.Uint16(body[0:2]))
		if n > maxTrailerString || len(body) < 2+n {
			return r, fmt.Errorf("%w: trailer string of %d bytes", errMalformed, n)
		}
		r.trailer = append(r.trailer, string(body[2:2+n]))
		body = body[2+n:]
	}
	r.payload = body
	return r, nil
}

func appendCancel(b []byte, id uint64) []byte {
	b, at := appendHeader(b, kindCancel, id)
	finishFrame(b, at)
	return b
}
