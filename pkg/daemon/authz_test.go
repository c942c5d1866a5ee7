package daemon

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

func TestAuthorize(t *testing.T) {
	const (
		node, client, admin = pki.KindNode, pki.KindClient, pki.KindAdmin
		none                = pki.Kind("")
	)
	tests := []struct {
		method string
		kind   pki.Kind
		ok     bool
	}{
		{pb.Master_Register_FullMethodName, node, true},
		{pb.Master_Register_FullMethodName, client, false}, // a client cannot pose as a node
		{pb.Master_Heartbeat_FullMethodName, admin, false},
		{pb.Master_CreateVolume_FullMethodName, admin, true},
		{pb.Master_CreateVolume_FullMethodName, client, false},
		{pb.Master_DeleteVolume_FullMethodName, node, false},
		{pb.Master_DecommissionNode_FullMethodName, client, false},
		{pb.Master_GetMap_FullMethodName, client, true}, // by the service's entry
		{pb.Master_ReportFailure_FullMethodName, client, true},
		{metapb.MetaNode_Txn_FullMethodName, client, true},
		{metapb.MetaNode_Path_FullMethodName, node, true},
		{metapb.MetaNode_Scan_FullMethodName, client, false},
		{metapb.MetaNode_Scan_FullMethodName, admin, true},
		{metapb.MetaNode_PartitionStats_FullMethodName, node, true},
		{"/cairn.multiraft.Transport/Deliver", node, true},
		{"/cairn.multiraft.Transport/Stream", client, false},
		{"/cairn.multiraft.Transport/Stream", admin, false},
		{"/grpc.health.v1.Health/Check", client, true},
		{"/cairn.new.Service/Method", client, false}, // unlisted: internal only
		{"/cairn.new.Service/Method", node, true},
		{pb.Master_GetMap_FullMethodName, none, false}, // a certificate without a kind
		{"garbage", admin, true},
		{"garbage", client, false},
	}
	for _, tc := range tests {
		err := Authorize(tc.method, tc.kind)
		if (err == nil) != tc.ok {
			t.Errorf("Authorize(%s, %q) = %v, want allowed %v", tc.method, tc.kind, err, tc.ok)
		}
		if err != nil && status.Code(err) != codes.PermissionDenied {
			t.Errorf("Authorize(%s, %q): code %v, want PermissionDenied", tc.method, tc.kind, status.Code(err))
		}
	}
}
