package datanode_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/dataproto"
)

var (
	fuzzOnce    sync.Once
	fuzzCluster *datanodetest.Cluster
)

// fuzzNode is one data node hosting partition 1 alone (a chain of one, so
// a request that is accepted is applied at once), shared by every input
// of the fuzz target and stopped when the test binary exits.
func fuzzNode(f *testing.F) *datanodetest.Cluster {
	fuzzOnce.Do(func() {
		fuzzCluster = datanodetest.Start(f, datanodetest.Config{Nodes: 1, Partitions: [][]uint64{{1}}, Options: testOptions()})
	})
	return fuzzCluster
}

// FuzzRequest sends one arbitrary frame, with a valid header CRC so that
// it reaches the handlers, to a real data node with a real extent store,
// followed by a ping. The node must never fall over: it answers the frame
// or drops the connection, and then answers a ping on a new connection.
func FuzzRequest(f *testing.F) {
	c := fuzzNode(f)
	addr := c.Node(1).DataAddr
	seed := func(h dataproto.Header, payload []byte) {
		f.Add(dataproto.AppendFrame(nil, &h, payload))
	}
	seed(dataproto.Header{Op: dataproto.OpCreateExtent, Partition: 1, Epoch: 1}, nil)
	seed(dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: 1, Epoch: 1}, []byte("hello"))
	seed(dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: 1, Offset: 1 << 40, Epoch: 1}, []byte("far"))
	seed(dataproto.Header{Op: dataproto.OpAppend, Flags: dataproto.FlagForwarded | dataproto.FlagCreate, Partition: 1, Extent: 99, Epoch: 1}, []byte("x"))
	seed(dataproto.Header{Op: dataproto.OpWriteSmall, Partition: 1, Epoch: 1}, []byte("small file"))
	seed(dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: 1, Arg: 5, Size: 5, Epoch: 1}, nil)
	seed(dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: 1, Offset: 1 << 62, Arg: 1 << 40, Size: 1 << 62}, nil)
	seed(dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: 1, Offset: 2, Epoch: 1}, []byte("LL"))
	seed(dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: 1, Offset: 0, Arg: 3, Epoch: 1}, nil)
	seed(dataproto.Header{Op: dataproto.OpListExtents, Partition: 1, Flags: dataproto.FlagForwarded}, nil)
	seed(dataproto.Header{Op: dataproto.OpChecksums, Partition: 1, Extent: 1, Arg: 1 << 30}, nil)
	seed(dataproto.Header{Op: dataproto.OpWriteChunk, Partition: 1, Epoch: 1}, make([]byte, dataproto.FingerprintLen+3))
	seed(dataproto.Header{Op: dataproto.OpPing, Partition: 77}, nil)
	seed(dataproto.Header{Op: 200, Partition: 1}, []byte{1})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < dataproto.HeaderLen {
			return
		}
		frame = append([]byte(nil), frame...)
		// Keep the frame parseable: the length says what follows, and the
		// header CRC holds (a frame that fails it only ends the connection,
		// which FuzzReadFrame covers).
		n := min(len(frame)-dataproto.HeaderLen, 1<<20)
		frame = frame[:dataproto.HeaderLen+n]
		binary.LittleEndian.PutUint32(frame[12:], uint32(n))
		binary.LittleEndian.PutUint32(frame[72:], crc32.Checksum(frame[dataproto.HeaderLen:], crc32.MakeTable(crc32.Castagnoli)))
		binary.LittleEndian.PutUint32(frame[76:], crc32.Checksum(frame[:76], crc32.MakeTable(crc32.Castagnoli)))

		nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("the node stopped taking connections: %v", err)
		}
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write(frame); err == nil {
			var hdr [dataproto.HeaderLen]byte
			_, _ = io.ReadFull(nc, hdr[:]) // an answer, or the connection dropped
		}
		nc.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := dataproto.Dial(ctx, addr, dataproto.ConnOptions{})
		if err != nil {
			t.Fatalf("the node stopped taking connections after %x: %v", frame[:dataproto.HeaderLen], err)
		}
		defer conn.Close()
		if _, _, err := conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpPing}}); err != nil {
			t.Fatalf("the node stopped answering after %x: %v", frame[:dataproto.HeaderLen], err)
		}
	})
}
