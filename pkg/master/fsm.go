package master

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// fsm adapts the pure cluster map to the multi-raft host. The host calls Apply,
// Snapshot and Restore from its processing goroutine; RPC handlers read under
// the read lock.
type fsm struct {
	mu    sync.RWMutex
	state *clustermap.State
	// onApply, if set, is called after every successful change with the new epoch
	// (outside the lock), so metrics follow the map.
	onApply func(epoch uint64)
}

func newFSM() *fsm { return &fsm{state: clustermap.New()} }

// Apply decodes and applies one command. A command that does not decode is
// reported as an error to its proposer and skipped on every replica alike, so the
// replicas stay identical.
func (f *fsm) Apply(index uint64, data []byte) (any, error) {
	var cmd pb.Command
	if err := proto.Unmarshal(data, &cmd); err != nil {
		return nil, fmt.Errorf("entry %d: decode command: %w", index, err)
	}
	f.mu.Lock()
	res, err := f.state.Apply(&cmd)
	epoch := f.state.Map().Epoch
	f.mu.Unlock()
	if err == nil && f.onApply != nil {
		f.onApply(epoch)
	}
	return res, err
}

func (f *fsm) Snapshot() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Marshal()
}

func (f *fsm) Restore(data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.Unmarshal(data)
}

// read runs fn with the map under the read lock; fn must not keep references.
func (f *fsm) read(fn func(s *clustermap.State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}
