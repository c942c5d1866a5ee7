package clustermap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cairnfs/cairn/pkg/chunker"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// ChunkConfig returns the chunker configuration of l; nil is chunker.Default
// (volumes created before chunking was configurable). The result is not
// validated: ValidateChunkLayout does that at volume creation.
func ChunkConfig(l *pb.ChunkLayout) chunker.Config {
	if l == nil {
		return chunker.Default()
	}
	return chunker.Config{
		Algorithm: chunker.Algorithm(l.Algorithm),
		MinSize:   int(l.MinSize),
		AvgSize:   int(l.AvgSize),
		MaxSize:   int(l.MaxSize),
	}
}

// ChunkLayoutOf is the wire form of a chunker configuration.
func ChunkLayoutOf(c chunker.Config) *pb.ChunkLayout {
	return &pb.ChunkLayout{
		Algorithm: uint32(c.Algorithm), MinSize: uint32(c.MinSize),
		AvgSize: uint32(c.AvgSize), MaxSize: uint32(c.MaxSize),
	}
}

// MaxChunkSize is the largest chunk a volume may be configured for: a data
// node stores at most this much in one chunk write (dataproto.MaxChunk).
const MaxChunkSize = 1 << 20

// ValidateChunkLayout checks a volume's default layout and chunking: a
// known layout, a valid chunker configuration, chunks no larger than a data
// node stores in one write.
func ValidateChunkLayout(layout uint32, l *pb.ChunkLayout) error {
	if _, ok := metapb.FileLayout_name[int32(layout)]; !ok {
		return fmt.Errorf("%w: unknown file layout %d", ErrInvalid, layout)
	}
	cfg := ChunkConfig(l)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: chunking: %v", ErrInvalid, err)
	}
	if cfg.MaxSize > MaxChunkSize {
		return fmt.Errorf("%w: chunking: max chunk size %d exceeds %d", ErrInvalid, cfg.MaxSize, MaxChunkSize)
	}
	return nil
}

// ErrNoChunkIndex is returned by ChunkShard for a volume without chunk index
// partitions (created before chunked files existed).
var ErrNoChunkIndex = errors.New("volume has no chunk index")

// ChunkShard returns the meta partition that holds fp's chunk index entry:
// the fingerprint's SHA-256 bytes are uniform, so eight of them modulo the
// fixed partition list spread entries evenly, and the answer never changes
// for the life of the volume.
func ChunkShard(v *pb.Volume, fp []byte) (uint64, error) {
	parts := v.GetChunkIndexPartitions()
	if len(parts) == 0 {
		return 0, fmt.Errorf("volume %q: %w", v.GetName(), ErrNoChunkIndex)
	}
	if len(fp) != chunker.FingerprintSize {
		return 0, fmt.Errorf("%w: fingerprint of %d bytes, want %d", ErrInvalid, len(fp), chunker.FingerprintSize)
	}
	h := binary.BigEndian.Uint64(fp[1:9])
	return parts[h%uint64(len(parts))], nil
}

// Layout names as users write them (cairn volume create --layout, the
// user.cairn.layout directory attribute).
var layoutNames = map[string]metapb.FileLayout{
	"extent": metapb.FileLayout_FILE_LAYOUT_EXTENT,
	"cdc":    metapb.FileLayout_FILE_LAYOUT_CDC,
}

// ParseLayout reads a layout name: "extent" or "cdc".
func ParseLayout(name string) (metapb.FileLayout, error) {
	if l, ok := layoutNames[name]; ok {
		return l, nil
	}
	return 0, fmt.Errorf("%w: unknown file layout %q (want extent or cdc)", ErrInvalid, name)
}

// LayoutAttr is the directory attribute naming the layout of new regular
// files created in it ("extent" or "cdc"); new subdirectories inherit it.
const LayoutAttr = "user.cairn.layout"

// LayoutName is the user-facing name of l ("extent", "cdc").
func LayoutName(l metapb.FileLayout) string {
	for name, v := range layoutNames {
		if v == l {
			return name
		}
	}
	return fmt.Sprintf("layout(%d)", int32(l))
}
