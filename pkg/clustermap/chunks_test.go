package clustermap

import (
	"errors"
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func TestChunkShard(t *testing.T) {
	v := &pb.Volume{Name: "v", ChunkIndexPartitions: []uint64{7, 8, 9}}
	counts := map[uint64]int{}
	for i := range 3000 {
		fp := chunker.Sum(chunker.FastCDC1, []byte{byte(i), byte(i >> 8)})
		mp, err := ChunkShard(v, fp[:])
		if err != nil {
			t.Fatal(err)
		}
		again, _ := ChunkShard(v, fp[:])
		if again != mp {
			t.Fatalf("shard of %v changed: %d then %d", fp, mp, again)
		}
		counts[mp]++
	}
	for _, id := range v.ChunkIndexPartitions {
		if c := counts[id]; c < 850 || c > 1150 {
			t.Errorf("partition %d holds %d of 3000 entries, want about 1000", id, c)
		}
	}
	if _, err := ChunkShard(v, []byte{1, 2, 3}); !errors.Is(err, ErrInvalid) {
		t.Errorf("short fingerprint: %v, want ErrInvalid", err)
	}
	if _, err := ChunkShard(&pb.Volume{Name: "old"}, make([]byte, chunker.FingerprintSize)); !errors.Is(err, ErrNoChunkIndex) {
		t.Errorf("volume without index: %v, want ErrNoChunkIndex", err)
	}
}
