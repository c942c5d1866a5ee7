package clustermap

import (
	"errors"
	"slices"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func regClient(now int64, name, serial string, notAfter int64) *pb.Command {
	return &pb.Command{NowUnixMs: now, Op: &pb.Command_RegisterClient{RegisterClient: &pb.RegisterClient{
		Client: &pb.Client{Name: name, Serial: serial, NotAfterUnixMs: notAfter}}}}
}

func revoke(now int64, client, serial string, notAfter int64) *pb.Command {
	return &pb.Command{NowUnixMs: now, Op: &pb.Command_Revoke{Revoke: &pb.Revoke{Client: client, Serial: serial, NotAfterUnixMs: notAfter}}}
}

// TestClientsAndRevocation walks a client's life: created, refused twice
// under one name, revoked (by name, then its serial again, which changes
// nothing), created again under the name with a new certificate; and a
// certificate revoked by serial alone, dropped from the list once it
// expires and room is needed.
func TestClientsAndRevocation(t *testing.T) {
	s := cluster(t)
	steps := []struct {
		name      string
		cmd       *pb.Command
		wantErr   error
		wantEpoch uint64
	}{
		{"create", regClient(10, "alice", "a1", 5000), nil, 8},
		{"same name", regClient(11, "alice", "a2", 5000), ErrExists, 8},
		{"no serial", regClient(11, "bob", "", 5000), ErrInvalid, 8},
		{"no name", regClient(11, "", "b1", 5000), ErrInvalid, 8},
		{"revoke unknown", revoke(12, "carol", "", 0), ErrNotFound, 8},
		{"revoke nothing", revoke(12, "", "", 0), ErrInvalid, 8},
		{"revoke by name", revoke(12, "alice", "", 0), nil, 9},
		{"revoke its serial again", revoke(13, "", "a1", 5000), nil, 9},
		{"a revoked serial cannot come back", regClient(14, "dave", "a1", 5000), ErrInvalid, 9},
		{"the name is free again", regClient(14, "alice", "a2", 6000), nil, 10},
		{"revoke a node's certificate", revoke(15, "", "n7", 100), nil, 11},
	}
	for _, st := range steps {
		_, err := s.Apply(st.cmd)
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: err %v, want %v", st.name, err, st.wantErr)
		}
		if s.Map().Epoch != st.wantEpoch {
			t.Fatalf("%s: epoch %d, want %d", st.name, s.Map().Epoch, st.wantEpoch)
		}
	}
	if got := s.RevokedSerials(); !slices.Equal(got, []string{"a1", "n7"}) {
		t.Errorf("revoked %v", got)
	}
	cl := s.Clients()
	if len(cl) != 1 || cl[0].Serial != "a2" || cl[0].RevokedUnixMs != 0 || cl[0].CreatedUnixMs != 14 {
		t.Errorf("clients %v", cl)
	}
	s.dropExpired(1000)
	if got := s.RevokedSerials(); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("after n7 expired: revoked %v", got)
	}
}
