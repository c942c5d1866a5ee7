package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/mountinfo"
)

// node publishes volumes on this node: a FUSE mount of the volume (of its
// directory, for a subdir) at the target path. No staging step: a FUSE
// mount has nothing to share between the pods of a node.
type node struct {
	csipb.UnimplementedNodeServer
	d *Driver
}

func (s *node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: s.d.cfg.NodeID}, nil
}

func (s *node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{
		{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS}}},
	}}, nil
}

// readOnly reports whether a publish must be read-only: asked for, or an
// access mode that only reads.
func readOnly(req *csipb.NodePublishVolumeRequest) bool {
	switch req.GetVolumeCapability().GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return req.GetReadonly()
}

func (s *node) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "no target path")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "no volume capability")
	}
	if err := checkCaps([]*csipb.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	id, err := ParseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", req.GetVolumeId(), err)
	}
	target := filepath.Clean(req.GetTargetPath())
	unlock, err := s.d.lock(target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	e, mounted, err := mountinfo.Lookup(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read the mount table: %v", err)
	}
	if mounted {
		if e.Source == sourceOf(id) {
			return &csipb.NodePublishVolumeResponse{}, nil // published before
		}
		return nil, status.Errorf(codes.AlreadyExists, "%s has %s mounted, not %s", target, e.Source, id)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "create %s: %v", target, err)
	}
	if err := s.d.cfg.Mounter.Mount(ctx, id, target, readOnly(req)); err != nil {
		return nil, status.Errorf(codes.Internal, "mount %s at %s: %v", id, target, err)
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

// sourceOf is the mount source a Cairn mount of id shows in the mount
// table.
func sourceOf(id VolumeID) string { return "cairn:" + id.Volume }

func (s *node) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	target := filepath.Clean(req.GetTargetPath())
	unlock, err := s.d.lock(target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	mounted, err := mountinfo.Mounted(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read the mount table: %v", err)
	}
	if mounted {
		if err := s.d.cfg.Mounter.Unmount(ctx, target); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	// The spec asks to remove what publish made at the target path.
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the space and inodes of a published volume:
// statfs of its mount, which is the quota's for a subdir volume.
func (s *node) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "no volume path")
	}
	id, err := ParseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", req.GetVolumeId(), err)
	}
	p := filepath.Clean(req.GetVolumePath())
	e, mounted, err := mountinfo.Lookup(p)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read the mount table: %v", err)
	}
	if !mounted || e.Source != sourceOf(id) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", id, p)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", p, err)
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}
