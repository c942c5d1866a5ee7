package dataproto

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
)

// chunkFrame is an OpWriteChunk request carrying fingerprint fp and data.
func chunkFrame(fp [FingerprintLen]byte, data []byte) []byte {
	return AppendFrame(nil, &Header{Op: OpWriteChunk, Partition: 4, Epoch: 2}, append(fp[:], data...))
}

// Only an OpWriteChunk request may exceed MaxPayload, by exactly the
// fingerprint; a chunk of MaxChunk bytes round-trips in one frame.
func TestChunkFrameLimits(t *testing.T) {
	fp := [FingerprintLen]byte{1, 2, 3}
	full := bytes.Repeat([]byte{0xa5}, MaxChunk)
	var hdr [HeaderLen]byte
	h, p, err := ReadFrame(bytes.NewReader(chunkFrame(fp, full)), hdr[:], nil)
	if err != nil || h.Op != OpWriteChunk || int(h.Length) != MaxChunkPayload {
		t.Fatalf("full chunk frame: %+v, %v", h, err)
	}
	gotFP, data, err := SplitChunk(p)
	if err != nil || gotFP != fp || !bytes.Equal(data, full) {
		t.Fatalf("split: fingerprint %x, %d bytes, %v", gotFP, len(data), err)
	}

	length := func(op Op, flags Flags, n uint32) []byte {
		return frame(Header{Op: op, Flags: flags}, func(b []byte) { binary.LittleEndian.PutUint32(b[12:], n) }, true)
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"chunk request at the limit", length(OpWriteChunk, 0, MaxChunkPayload), nil},
		{"forwarded chunk at the limit", length(OpWriteChunk, FlagForwarded|FlagCreate, MaxChunkPayload), nil},
		{"chunk request one byte over", length(OpWriteChunk, 0, MaxChunkPayload+1), ErrTooLarge},
		{"chunk response above MaxPayload", length(OpWriteChunk, FlagResponse, MaxPayload+1), ErrTooLarge},
		{"append above MaxPayload", length(OpAppend, 0, MaxPayload+1), ErrTooLarge},
		{"small write above MaxPayload", length(OpWriteSmall, 0, MaxPayload+1), ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeHeader(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSplitChunk(t *testing.T) {
	fp := [FingerprintLen]byte{9}
	tests := []struct {
		name    string
		payload []byte
		want    int // chunk bytes, or -1 for an error
	}{
		{"one byte", append(fp[:], 'x'), 1},
		{"fingerprint only", fp[:], -1},
		{"short fingerprint", fp[:10], -1},
		{"empty", nil, -1},
		{"over MaxChunk", make([]byte, MaxChunkPayload+1), -1},
		{"at MaxChunk", make([]byte, MaxChunkPayload), MaxChunk},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, data, err := SplitChunk(tc.payload)
			switch {
			case tc.want < 0 && !errors.Is(err, ErrBadChunk):
				t.Fatalf("got %v, want ErrBadChunk", err)
			case tc.want >= 0 && (err != nil || len(data) != tc.want):
				t.Fatalf("got %d bytes, %v; want %d", len(data), err, tc.want)
			}
		})
	}
}

// A request's Prefix is sent as the start of its payload, under one CRC,
// and the size limit applies to prefix and payload together.
func TestRequestPrefix(t *testing.T) {
	got := make(chan []byte, 1)
	_, addr := serve(t, ServerOptions{}, func(in *Inbound) {
		got <- append([]byte(nil), in.Payload...)
		in.Respond(Header{}, nil, nil)
	})
	c := dial(t, addr, ConnOptions{})
	fp := bytes.Repeat([]byte{7}, FingerprintLen)
	data := bytes.Repeat([]byte{3}, MaxChunk)
	if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpWriteChunk}, Prefix: fp, Payload: data}); err != nil {
		t.Fatal(err)
	}
	if p := <-got; !bytes.Equal(p, append(fp, data...)) {
		t.Fatalf("server got %d bytes, not prefix+payload", len(p))
	}
	_, err := c.Start(context.Background(), &Request{Header: Header{Op: OpWriteChunk}, Prefix: fp, Payload: append(data, 0)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("chunk over MaxChunk: %v, want ErrTooLarge", err)
	}
	_, err = c.Start(context.Background(), &Request{Header: Header{Op: OpAppend}, Prefix: fp, Payload: data})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("append over MaxPayload: %v, want ErrTooLarge", err)
	}
	// The connection is still good.
	if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpPing}}); err != nil {
		t.Fatal(err)
	}
}

// Pooled buffers: every size up to MaxChunkPayload maps to a class that
// holds it, and a class's buffers go back to it.
func TestBufferClasses(t *testing.T) {
	for _, n := range []int{1, 4 << 10, 4<<10 + 1, 512 << 10, MaxPayload, MaxPayload + 1, MaxChunkPayload} {
		b := getBuf(n)
		if cap(b) < n {
			t.Fatalf("getBuf(%d) has capacity %d", n, cap(b))
		}
		if c := sizeClass(cap(b)); c == numClasses || classCap(c) != cap(b) {
			t.Fatalf("getBuf(%d): capacity %d is no class", n, cap(b))
		}
		putBuf(b)
	}
	if b := getBuf(MaxChunkPayload + 1); cap(b) < MaxChunkPayload+1 {
		t.Fatalf("oversized buffer of %d", cap(b))
	}
}
