package dataproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{
		Op: OpAppend, Flags: FlagForwarded | FlagCreate, Kind: 2, Code: CodeOffsetMismatch,
		Length: 12, ReqID: 1<<63 + 5, Partition: 7, Extent: 1 << 40, Offset: math.MaxInt64,
		Arg: math.MaxUint64, Size: 99, Epoch: 42, PayloadCRC: 0xdeadbeef,
	}
	var b [HeaderLen]byte
	EncodeHeader(b[:], &h)
	got, err := DecodeHeader(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, h)
	}
}

// frame builds a valid header and lets a test damage it; fix recomputes the
// header CRC after the damage (so the damage itself is what is tested).
func frame(h Header, damage func(b []byte), fix bool) []byte {
	var b [HeaderLen]byte
	EncodeHeader(b[:], &h)
	if damage != nil {
		damage(b[:])
	}
	if fix {
		binary.LittleEndian.PutUint32(b[76:], crc32.Checksum(b[:76], castagnoli))
	}
	return b[:]
}

func TestDecodeHeaderRejects(t *testing.T) {
	ok := Header{Op: OpRead, Partition: 1}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", make([]byte, HeaderLen-1), ErrBadHeader},
		{"magic", frame(ok, func(b []byte) { b[0] = 'X' }, true), ErrBadMagic},
		{"header crc", frame(ok, func(b []byte) { b[30] ^= 1 }, false), ErrHeaderCRC},
		{"lying length without crc fix", frame(ok, func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 1<<31) }, false), ErrHeaderCRC},
		{"version", frame(ok, func(b []byte) { b[4] = 9 }, true), ErrBadVersion},
		{"reserved", frame(ok, func(b []byte) { b[10] = 1 }, true), ErrBadHeader},
		{"too large", frame(ok, func(b []byte) { binary.LittleEndian.PutUint32(b[12:], MaxPayload+1) }, true), ErrTooLarge},
		{"negative offset", frame(ok, func(b []byte) { binary.LittleEndian.PutUint64(b[40:], 1<<63) }, true), ErrBadHeader},
		{"negative size", frame(ok, func(b []byte) { binary.LittleEndian.PutUint64(b[56:], math.MaxUint64) }, true), ErrBadHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHeader(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadFrame(t *testing.T) {
	payload := []byte("hello, extent")
	var hdr [HeaderLen]byte
	tests := []struct {
		name    string
		stream  func() []byte
		want    error
		payload []byte
	}{
		{"ok", func() []byte { return AppendFrame(nil, &Header{Op: OpAppend}, payload) }, nil, payload},
		{"empty payload", func() []byte { return AppendFrame(nil, &Header{Op: OpPing}, nil) }, nil, nil},
		{"payload crc", func() []byte {
			b := AppendFrame(nil, &Header{Op: OpAppend}, payload)
			b[HeaderLen] ^= 0x20
			return b
		}, ErrPayloadCRC, nil},
		{"no crc flag skips the check", func() []byte {
			h := Header{Op: OpRead, Flags: FlagNoCRC | FlagResponse}
			b := AppendFrame(nil, &h, payload)
			b[HeaderLen] ^= 0x20
			return b
		}, nil, append([]byte{payload[0] ^ 0x20}, payload[1:]...)},
		{"truncated payload", func() []byte {
			b := AppendFrame(nil, &Header{Op: OpAppend}, payload)
			return b[:len(b)-3]
		}, io.ErrUnexpectedEOF, nil},
		{"truncated header", func() []byte { return AppendFrame(nil, &Header{Op: OpAppend}, payload)[:20] }, io.ErrUnexpectedEOF, nil},
		{"empty stream", func() []byte { return nil }, io.EOF, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, p, err := ReadFrame(bytes.NewReader(tc.stream()), hdr[:], make([]byte, 0, 64))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil && !bytes.Equal(p, tc.payload) {
				t.Fatalf("payload %q, want %q", p, tc.payload)
			}
		})
	}
}

// A payload CRC error consumes exactly the frame: the next frame reads fine.
func TestPayloadCRCKeepsFraming(t *testing.T) {
	bad := AppendFrame(nil, &Header{Op: OpAppend, ReqID: 1}, []byte("aaaa"))
	bad[HeaderLen+1] = 'b'
	stream := AppendFrame(bad, &Header{Op: OpAppend, ReqID: 2}, []byte("cccc"))
	r := bytes.NewReader(stream)
	var hdr [HeaderLen]byte
	if h, _, err := ReadFrame(r, hdr[:], nil); !errors.Is(err, ErrPayloadCRC) || h.ReqID != 1 {
		t.Fatalf("first frame: %+v %v", h, err)
	}
	h, p, err := ReadFrame(r, hdr[:], nil)
	if err != nil || h.ReqID != 2 || string(p) != "cccc" {
		t.Fatalf("second frame: %+v %q %v", h, p, err)
	}
}

func TestExtentEntriesRoundTrip(t *testing.T) {
	in := []ExtentEntry{{ID: 1, Kind: 1, Size: 10, Committed: 5}, {ID: math.MaxUint64, Kind: 2, Size: math.MaxInt64, Committed: 0, Punched: 3}}
	out, err := DecodeExtentEntries(AppendExtentEntries(nil, in))
	if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("%v %v", out, err)
	}
	if _, err := DecodeExtentEntries(make([]byte, ExtentEntryLen+1)); err == nil {
		t.Fatal("odd length accepted")
	}
	bad := AppendExtentEntries(nil, in[:1])
	binary.LittleEndian.PutUint64(bad[9:], math.MaxUint64)
	if _, err := DecodeExtentEntries(bad); err == nil {
		t.Fatal("size above 2^63 accepted")
	}
	crcs, err := DecodeChecksums(AppendChecksums(nil, []uint32{1, 2, 0xffffffff}))
	if err != nil || len(crcs) != 3 || crcs[2] != 0xffffffff {
		t.Fatalf("%v %v", crcs, err)
	}
	if _, err := DecodeChecksums([]byte{1, 2, 3}); err == nil {
		t.Fatal("odd checksum list accepted")
	}
}

func TestCodeOf(t *testing.T) {
	if CodeOf(nil) != CodeOK || CodeOf(io.EOF) != CodeInternal {
		t.Fatal("nil or foreign error")
	}
	e := &Error{Code: CodeNotHeld}
	if CodeOf(errors.Join(io.EOF, e)) != CodeInternal { // Join has no single Unwrap
		t.Fatal("joined")
	}
	if CodeOf(wrap{e}) != CodeNotHeld {
		t.Fatal("wrapped")
	}
	for c := CodeOK; c <= maxCode+1; c++ {
		if c.String() == "" {
			t.Fatal("empty code name")
		}
	}
	for o := Op(0); o <= maxOp+1; o++ {
		if o.String() == "" {
			t.Fatal("empty op name")
		}
	}
}

type wrap struct{ err error }

func (w wrap) Error() string { return "w: " + w.err.Error() }
func (w wrap) Unwrap() error { return w.err }
