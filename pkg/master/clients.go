package master

import (
	"context"
	"maps"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/pki"
)

// CreateClient records a client identity 'cairn client create' issued.
func (v *service) CreateClient(ctx context.Context, req *pb.CreateClientRequest) (*pb.CreateClientResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	if _, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_RegisterClient{RegisterClient: &pb.RegisterClient{Client: req.Client}}}); err != nil {
		return nil, toStatus(err)
	}
	v.s.log.Info("client created", "client", req.GetClient().GetName(), "serial", req.GetClient().GetSerial())
	return &pb.CreateClientResponse{Epoch: v.epoch()}, nil
}

// ListClients lists the recorded client identities.
func (v *service) ListClients(ctx context.Context, _ *pb.ListClientsRequest) (*pb.ListClientsResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	resp := &pb.ListClientsResponse{}
	v.s.fsm.read(func(st *clustermap.State) {
		for _, c := range st.Clients() {
			resp.Clients = append(resp.Clients, proto.Clone(c).(*pb.Client))
		}
	})
	return resp, nil
}

// Revoke revokes a client's certificate, or any certificate by serial.
// Servers refuse it from their next heartbeat on (the master's own at
// once).
func (v *service) Revoke(ctx context.Context, req *pb.RevokeRequest) (*pb.RevokeResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	res, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_Revoke{Revoke: &pb.Revoke{
		Client: req.Client, Serial: req.Serial, NotAfterUnixMs: req.NotAfterUnixMs}}})
	if err != nil {
		return nil, toStatus(err)
	}
	serial, _ := res.(string)
	v.s.log.Info("certificate revoked", "client", req.Client, "serial", serial)
	return &pb.RevokeResponse{Epoch: v.epoch(), Serial: serial}, nil
}

// revoked reports whether serial is on the cluster's revocation list, as
// this master has applied it.
func (s *Server) revoked(serial string) bool {
	var ok bool
	s.fsm.read(func(st *clustermap.State) { _, ok = st.Map().Revoked[serial] })
	return ok
}

// scopeMap trims a copy of the map for the caller of ctx: nobody sees the
// grant keys (whoever holds one can grant itself any extent; nodes get them
// with their heartbeats, and the console shows the map on plain HTTP), a
// client sees no identity records, and a client bound to a volume sees
// only that volume and its partitions.
func scopeMap(ctx context.Context, m *pb.ClusterMap) {
	m.GrantKeys = nil
	if daemon.PeerKind(ctx) != pki.KindClient {
		return
	}
	m.Clients, m.Revoked = nil, nil
	c := capability.FromContext(ctx)
	if c.VolumeID == 0 {
		return
	}
	maps.DeleteFunc(m.Volumes, func(id uint64, _ *pb.Volume) bool { return id != c.VolumeID })
	maps.DeleteFunc(m.Partitions, func(_ uint64, p *pb.Partition) bool { return p.VolumeId != c.VolumeID })
}

// allowVolume is PERMISSION_DENIED when the caller's capabilities exclude
// the volume named name (which then is not said to exist or not).
func allowVolume(ctx context.Context, st *clustermap.State, name string) error {
	c := capability.FromContext(ctx)
	if c.VolumeID == 0 {
		return nil
	}
	if vol := st.VolumeByName(name); vol == nil || vol.Id != c.VolumeID {
		return status.Errorf(codes.PermissionDenied, "volume %q: this client may use volume %q only", name, c.Volume)
	}
	return nil
}
