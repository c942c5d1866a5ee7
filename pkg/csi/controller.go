package csi

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// controller creates, expands and deletes volumes. No attach step:
// ControllerPublish is not offered (a Cairn volume is reachable from
// every node).
type controller struct {
	csipb.UnimplementedControllerServer
	d *Driver
}

func (s *controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCaps refuses volume capabilities the driver cannot give: raw block
// volumes (Cairn is a file system). Every access mode is fine.
func checkCaps(caps []*csipb.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return status.Error(codes.InvalidArgument, "block volumes are not supported: Cairn volumes are file systems")
		}
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "a volume capability needs an access type (mount)")
		}
		if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_UNKNOWN {
			return status.Error(codes.InvalidArgument, "a volume capability needs an access mode")
		}
	}
	return nil
}

// capacity returns the size to give a volume for r: the required bytes,
// or the limit when only that is set; 0 means no limit.
func capacity(r *csipb.CapacityRange) (uint64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, status.Error(codes.InvalidArgument, "negative capacity")
	case lim > 0 && req > lim:
		return 0, status.Errorf(codes.OutOfRange, "required %d bytes is more than the limit %d", req, lim)
	case req > 0:
		return uint64(req), nil
	}
	return uint64(lim), nil
}

// grpcErr turns an SDK or master error into a status for the CO.
func grpcErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch client.ErrnoOf(err) {
	case syscall.ENOENT:
		code = codes.NotFound
	case syscall.EEXIST:
		code = codes.AlreadyExists
	case syscall.EACCES, syscall.EPERM:
		code = codes.PermissionDenied
	case syscall.ETIMEDOUT, syscall.EAGAIN, syscall.EIO:
		code = codes.Unavailable
	case syscall.ENOSPC, syscall.EDQUOT:
		code = codes.ResourceExhausted
	}
	return status.Errorf(code, "%s: %v", what, err)
}

func (s *controller) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume name")
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volumes from snapshots or clones are not supported")
	}
	size, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	id, err := newVolumeID(req.GetName(), req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	unlock, err := s.d.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if id.Kind == KindVolume {
		err = s.createVolume(ctx, id, size, req.GetParameters())
	} else {
		err = s.createSubdir(ctx, id, size)
	}
	if err != nil {
		return nil, err
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{
		VolumeId: id.String(), CapacityBytes: int64(size),
		VolumeContext: map[string]string{ParamKind: string(id.Kind), ParamVolume: id.Volume, "path": id.Path},
	}}, nil
}

// createSubdir makes the directory and its quota. A directory that exists
// already is this volume made before (a retry): it is refused only when
// its quota says another size.
func (s *controller) createSubdir(ctx context.Context, id VolumeID, size uint64) error {
	v, err := s.d.volume(ctx, id.Volume)
	if err != nil {
		return grpcErr("open volume "+id.Volume, err)
	}
	if err := mkdirAll(ctx, v, path.Dir(id.Path)); err != nil {
		return grpcErr("create "+path.Dir(id.Path), err)
	}
	a, err := v.MkdirPath(ctx, id.Path, 0o777, client.Cred{})
	if client.ErrnoOf(err) == syscall.EEXIST {
		if a, err = v.StatPath(ctx, id.Path, client.Cred{}); err == nil && !a.IsDir() {
			return status.Errorf(codes.AlreadyExists, "%s exists and is not a directory", id.Path)
		}
		if err == nil {
			q, qerr := v.QuotaOf(ctx, a.Ino)
			if qerr != nil {
				return grpcErr("read quotas", qerr)
			}
			if q != nil && q.Quota.MaxBytes != size {
				return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, not %d", id, q.Quota.MaxBytes, size)
			}
			if q != nil {
				return nil
			}
		}
	}
	if err != nil {
		return grpcErr("create "+id.Path, err)
	}
	// A new, empty directory: its quota needs no recount.
	if _, err := v.SetQuota(ctx, a.Ino, id.Path, size, 0); err != nil {
		return grpcErr("set the quota of "+id.Path, err)
	}
	return nil
}

// mkdirAll makes directory p and its parents.
func mkdirAll(ctx context.Context, v *client.Volume, p string) error {
	if p == "/" {
		return nil
	}
	if a, err := v.StatPath(ctx, p, client.Cred{}); err == nil {
		if !a.IsDir() {
			return fmt.Errorf("%s is not a directory", p)
		}
		return nil
	}
	if err := mkdirAll(ctx, v, path.Dir(p)); err != nil {
		return err
	}
	if _, err := v.MkdirPath(ctx, p, 0o755, client.Cred{}); err != nil && client.ErrnoOf(err) != syscall.EEXIST {
		return err
	}
	return nil
}

// createVolume creates a whole Cairn volume; one that exists with the
// same capacity is this volume made before.
func (s *controller) createVolume(ctx context.Context, id VolumeID, size uint64, params map[string]string) error {
	var replicas int32
	if r := params[ParamReplicas]; r != "" {
		n, err := strconv.ParseInt(r, 10, 32)
		if err != nil || n < 1 || n > 7 {
			return status.Errorf(codes.InvalidArgument, "parameter replicas %q: want 1 to 7", r)
		}
		replicas = int32(n)
	}
	err := s.d.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: id.Volume, CapacityBytes: size, Replicas: replicas}, o...)
		return err
	})
	if status.Code(err) != codes.AlreadyExists {
		return grpcErr("create volume "+id.Volume, err)
	}
	vol, err := s.getVolume(ctx, id.Volume)
	if err != nil {
		return err
	}
	if vol.GetVolume().GetCapacityBytes() != size {
		return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, not %d", id, vol.GetVolume().GetCapacityBytes(), size)
	}
	return nil
}

func (s *controller) getVolume(ctx context.Context, name string) (*pb.VolumeResponse, error) {
	var resp *pb.VolumeResponse
	err := s.d.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetVolume(ctx, &pb.VolumeRequest{Name: name}, o...)
		return err
	})
	return resp, grpcErr("volume "+name, err)
}

func (s *controller) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	id, err := ParseVolumeID(req.GetVolumeId())
	if err != nil {
		return &csipb.DeleteVolumeResponse{}, nil // never made here: gone
	}
	unlock, err := s.d.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if id.Kind == KindVolume {
		err := s.d.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
			_, err := m.DeleteVolume(ctx, &pb.VolumeRequest{Name: id.Volume}, o...)
			return err
		})
		if status.Code(err) == codes.NotFound {
			err = nil
		}
		s.d.forget(id.Volume)
		return &csipb.DeleteVolumeResponse{}, grpcErr("delete volume "+id.Volume, err)
	}
	v, err := s.d.volume(ctx, id.Volume)
	if status.Code(err) == codes.NotFound || client.ErrnoOf(err) == syscall.ENOENT {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, grpcErr("open volume "+id.Volume, err)
	}
	a, err := v.StatPath(ctx, id.Path, client.Cred{})
	if client.ErrnoOf(err) == syscall.ENOENT {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, grpcErr("stat "+id.Path, err)
	}
	parent, err := v.StatPath(ctx, path.Dir(id.Path), client.Cred{})
	if err != nil {
		return nil, grpcErr("stat "+path.Dir(id.Path), err)
	}
	if err := v.RemoveTree(ctx, parent.Ino, path.Base(id.Path), a.Ino); err != nil && client.ErrnoOf(err) != syscall.ENOENT {
		return nil, grpcErr("remove "+id.Path, err)
	}
	// The quota last: a retry after a failed removal still finds it.
	if err := v.RemoveQuota(ctx, a.Ino); err != nil && client.ErrnoOf(err) != syscall.ENOENT {
		return nil, grpcErr("remove the quota of "+id.Path, err)
	}
	return &csipb.DeleteVolumeResponse{}, nil
}

// exists reports whether the volume id names exists: NotFound otherwise.
// It returns the subdir's inode (0 for a whole volume) and its capacity.
func (s *controller) exists(ctx context.Context, raw string) (VolumeID, *client.Volume, uint64, uint64, error) {
	id, err := ParseVolumeID(raw)
	if err != nil {
		return id, nil, 0, 0, status.Errorf(codes.NotFound, "volume %q: %v", raw, err)
	}
	if id.Kind == KindVolume {
		vol, err := s.getVolume(ctx, id.Volume)
		if err != nil {
			return id, nil, 0, 0, err
		}
		return id, nil, 0, vol.GetVolume().GetCapacityBytes(), nil
	}
	v, err := s.d.volume(ctx, id.Volume)
	if err != nil {
		if status.Code(err) == codes.NotFound || client.ErrnoOf(err) == syscall.ENOENT {
			return id, nil, 0, 0, status.Errorf(codes.NotFound, "volume %s: %v", id, err)
		}
		return id, nil, 0, 0, grpcErr("open volume "+id.Volume, err)
	}
	a, err := v.StatPath(ctx, id.Path, client.Cred{})
	if err != nil {
		return id, nil, 0, 0, grpcErr("volume "+id.String(), err)
	}
	q, err := v.QuotaOf(ctx, a.Ino)
	if err != nil {
		return id, nil, 0, 0, grpcErr("read quotas", err)
	}
	return id, v, a.Ino, q.GetQuota().GetMaxBytes(), nil
}

func (s *controller) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	if _, _, _, _, err := s.exists(ctx, req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// GetCapacity reports the space left for new volumes: the free space of
// the Cairn volume the parameters name (its capacity left, or the data
// nodes' free space divided by the replica count).
func (s *controller) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if caps := req.GetVolumeCapabilities(); len(caps) > 0 {
		if err := checkCaps(caps); err != nil {
			return &csipb.GetCapacityResponse{}, nil
		}
	}
	params := req.GetParameters()
	name := params[ParamVolume]
	if name == "" {
		name = "default"
	}
	if Kind(params[ParamKind]) == KindVolume {
		// New volumes share the data nodes' disks.
		var resp *pb.ListVolumesResponse
		err := s.d.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
			resp, err = m.ListVolumes(ctx, &pb.ListVolumesRequest{}, o...)
			return err
		})
		if err != nil {
			return nil, grpcErr("list volumes", err)
		}
		if len(resp.GetVolumes()) == 0 {
			return &csipb.GetCapacityResponse{}, nil
		}
		name = resp.Volumes[0].Name
	}
	v, err := s.d.volume(ctx, name)
	if err != nil {
		return nil, grpcErr("open volume "+name, err)
	}
	st, err := v.StatFS(ctx)
	if err != nil {
		return nil, grpcErr("statfs "+name, err)
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: int64(st.BlocksAvail * uint64(st.BlockSize))}, nil
}

// ControllerExpandVolume raises a subdir volume's quota. A whole volume's
// capacity is fixed at creation.
func (s *controller) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "no capacity range")
	}
	size, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	unlock, err := s.d.lock(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	id, v, ino, current, err := s.exists(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if id.Kind == KindVolume {
		if size <= current || current == 0 {
			return &csipb.ControllerExpandVolumeResponse{CapacityBytes: int64(current)}, nil
		}
		return nil, status.Errorf(codes.FailedPrecondition, "the capacity of a whole Cairn volume (%s) is fixed at creation; use kind subdir to expand", id)
	}
	switch {
	case current == 0:
		// No limit: any size fits.
		current = size
	case size > current:
		if _, err := v.SetQuota(ctx, ino, id.Path, size, 0); err != nil {
			return nil, grpcErr("set the quota of "+id.Path, err)
		}
		current = size
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: int64(current), NodeExpansionRequired: false}, nil
}
