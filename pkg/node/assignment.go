package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
)

// The node keeps its last assignment in its data dir, so that a restarted
// node opens its partitions and reaches their replicas before it reaches a
// master.

const assignmentFile = "assignment.json"

func (n *Node) loadAssignment() error {
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, assignmentFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read assignment: %w", err)
	}
	a := &pb.HeartbeatResponse{}
	if err := protojson.Unmarshal(b, a); err != nil {
		return fmt.Errorf("data dir %s: corrupt %s: %w", n.cfg.DataDir, assignmentFile, err)
	}
	n.assignment = a
	n.setRevoked(a.Revoked)
	return nil
}

// saveAssignment records the assignment and peer addresses so that a restarted
// node opens its partitions and reaches their replicas before it reaches a
// master. The grant keys stay out of it: the file is readable by all.
func (n *Node) saveAssignment(a *pb.HeartbeatResponse) error {
	if len(a.GrantKeys) > 0 {
		a = proto.Clone(a).(*pb.HeartbeatResponse)
		a.GrantKeys = nil
	}
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(a)
	if err != nil {
		return err
	}
	return daemon.WriteFileAtomic(filepath.Join(n.cfg.DataDir, assignmentFile), append(b, '\n'))
}

// save records the assignment, noting whether a later heartbeat must try
// again.
func (n *Node) save(resp *pb.HeartbeatResponse) error {
	err := n.saveAssignment(resp)
	n.mu.Lock()
	n.unsaved = err != nil
	n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("save assignment: %w", err)
	}
	return nil
}
