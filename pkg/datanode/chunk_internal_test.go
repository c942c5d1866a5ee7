package datanode

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/dataproto"
)

func TestCheckChunk(t *testing.T) {
	data := []byte("the bytes of a chunk")
	good := chunker.Sum(chunker.FastCDC1, data)
	otherAlg := chunker.Sum(chunker.Rabin1, data)
	flipped := good
	flipped[5] ^= 1
	unknown := good
	unknown[0] = 0
	payload := func(fp chunker.Fingerprint, b []byte) []byte { return append(fp[:], b...) }
	tests := []struct {
		name    string
		payload []byte
		want    dataproto.Code
	}{
		{"matching", payload(good, data), dataproto.CodeOK},
		{"matching, other algorithm byte", payload(otherAlg, data), dataproto.CodeOK},
		{"hash bit flipped", payload(flipped, data), dataproto.CodeFingerprintMismatch},
		{"data bit flipped", payload(good, append([]byte("Xhe"), data[3:]...)), dataproto.CodeFingerprintMismatch},
		{"truncated data", payload(good, data[:len(data)-1]), dataproto.CodeFingerprintMismatch},
		{"unknown algorithm", payload(unknown, data), dataproto.CodeBadRequest},
		{"no chunk bytes", good[:], dataproto.CodeBadRequest},
		{"short fingerprint", good[:20], dataproto.CodeBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, got, code, err := checkChunk(tc.payload, true)
			if code != tc.want {
				t.Fatalf("code %v (%v), want %v", code, err, tc.want)
			}
			if (code == dataproto.CodeOK) != (err == nil) {
				t.Fatalf("code %v with error %v", code, err)
			}
			if code == dataproto.CodeOK && string(got) != string(data) {
				t.Fatalf("data %q", got)
			}
		})
	}
}
