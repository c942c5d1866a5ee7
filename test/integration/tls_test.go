package integration

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/multiraft/transportpb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// TestMutualTLS: on a default `cairn up`, every process's RPC port answers
// only a client with a certificate of the cluster's CA, in both of its
// protocols (lightrpc, which Cairn's own clients speak, and gRPC), and so
// does every data node's data-path port. A plain connection, a TLS
// connection without a certificate and one with a certificate of another CA
// are each refused by every master, meta node and data node; the command
// line without an identity says what to pass.
func TestMutualTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	startUp(t, dir, "--mount", "")
	st := waitLeaders(t, dir)

	good := adminTLS(t, dir)
	otherCA := filepath.Join(t.TempDir(), "other-ca")
	must(t, pki.CreateCA(otherCA, "another cluster"))
	otherDir := filepath.Join(t.TempDir(), "other-admin")
	must(t, pki.Issue(otherCA, otherDir, pki.Request{Name: "intruder", Kind: pki.KindAdmin}))
	other, err := pki.Load(otherDir)
	must(t, err)
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	// A client identity of this cluster, revoked: refused like the others
	// once the nodes heard of it (a heartbeat; waited for below).
	revokedDir := filepath.Join(t.TempDir(), "revoked")
	mustCairn(t, "client", "create", "gone", "--data-dir", dir, "--out", revokedDir)
	mustCairn(t, "client", "revoke", "gone", "--data-dir", dir)
	revoked, err := pki.Load(revokedDir)
	must(t, err)
	// And an admin certificate revoked by its file ('cairn cert revoke').
	exAdminDir := filepath.Join(t.TempDir(), "ex-admin")
	must(t, pki.Issue(localcluster.TLSDir(dir, localcluster.CAIdentity), exAdminDir, pki.Request{Name: "ex-admin", Kind: pki.KindAdmin}))
	mustCairn(t, "cert", "revoke", "--cert", filepath.Join(exAdminDir, pki.CertFile), "--data-dir", dir)
	exAdmin, err := pki.Load(exAdminDir)
	must(t, err)

	clients := []struct {
		name string
		conf *tls.Config // nil: plain text
		ok   bool
	}{
		{"the cluster's admin identity", good, true},
		{"plain text", nil, false},
		{"TLS without a certificate", noCert, false},
		{"a certificate of another CA", other.ClientConfig(), false},
		{"a revoked client certificate", revoked.ClientConfig(), false},
		{"a revoked admin certificate", exAdmin.ClientConfig(), false},
	}
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	type port struct{ role, addr, proto string }
	var ports []port
	for _, n := range st.Nodes {
		if n.Address == "" {
			continue
		}
		ports = append(ports, port{n.Role, n.Address, "lightrpc"}, port{n.Role, n.Address, "grpc"})
	}
	for _, p := range l.Procs {
		if p.DataAddr != "" {
			ports = append(ports, port{p.Role, p.DataAddr, "data"})
		}
	}
	for _, n := range ports {
		for _, id := range []*pki.Identity{revoked, exAdmin} {
			for deadline := time.Now().Add(10 * time.Second); probe(n.addr, n.role, n.proto, id.ClientConfig()) == nil; {
				if time.Now().After(deadline) {
					t.Fatalf("%s at %s still answers certificate %q revoked 10s ago", n.role, n.addr, id.Name())
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	checked := 0
	for _, n := range ports {
		for _, c := range clients {
			err := probe(n.addr, n.role, n.proto, c.conf)
			if c.ok && err != nil {
				t.Errorf("%s at %s over %s with %s: %v", n.role, n.addr, n.proto, c.name, err)
			}
			if !c.ok && err == nil {
				t.Errorf("%s at %s over %s answered a client with %s", n.role, n.addr, n.proto, c.name)
			}
			checked++
		}
	}
	// 1 master, 3 meta and 3 data nodes with two protocols on their RPC
	// port, and 3 data ports.
	if want := (7*2 + 3) * len(clients); checked < want {
		t.Fatalf("checked %d connections, want %d: %+v", checked, want, ports)
	}

	// What a certificate may do depends on its kind: a client identity
	// reads the cluster and uses the file system, but cannot change the
	// cluster or speak Raft to a node; the admin identity can.
	clientDir := filepath.Join(t.TempDir(), "client")
	must(t, pki.Issue(localcluster.TLSDir(dir, localcluster.CAIdentity), clientDir, pki.Request{Name: "app", Kind: pki.KindClient}))
	master := masterAddr(st)
	mustCairn(t, "status", "--master", master, "--tls-dir", clientDir)
	if r := cairn(t, "volume", "create", "byclient", "--master", master, "--tls-dir", clientDir); r.code == 0 || !strings.Contains(r.stderr, `kind "client" may not call`) {
		t.Errorf("volume create with a client certificate: exit %d, %q", r.code, r.stderr)
	}
	mustCairn(t, "volume", "create", "byadmin", "--master", master, "--tls-dir", localcluster.TLSDir(dir, localcluster.AdminIdentity))
	client, err := pki.Load(clientDir)
	must(t, err)
	for _, n := range st.Nodes {
		if n.Role == "master" {
			continue
		}
		lc := lightrpc.Dial(n.Address, lightrpc.ClientOptions{TLS: client.ClientConfig(), DialTimeout: 3 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := transportpb.NewTransportClient(lc).Deliver(ctx, &transportpb.Batches{})
		cancel()
		lc.Close()
		if grpcstatus.Code(err) != codes.PermissionDenied {
			t.Errorf("Raft delivery to %s %d with a client certificate: %v, want PermissionDenied", n.Role, n.ID, err)
		}
	}

	// Nor can it send a data node what only replicas of a chain send each
	// other: a forwarded write would make the replicas disagree.
	for _, p := range l.Procs {
		if p.DataAddr == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := dataproto.Dial(ctx, p.DataAddr, dataproto.ConnOptions{TLS: client.ClientConfig()})
		if err == nil {
			_, _, err = c.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpAppend, Flags: dataproto.FlagForwarded, Partition: 1, Extent: 1}, Payload: []byte("x")})
			c.Close()
		}
		cancel()
		if dataproto.CodeOf(err) != dataproto.CodePermissionDenied {
			t.Errorf("forwarded append to data node at %s with a client certificate: %v, want permission denied", p.DataAddr, err)
		}
	}

	// Rotation without a restart: a certificate issued into the nodes'
	// identity directory is what every port presents to the next
	// connection, and the cluster goes on working.
	nodeDir := localcluster.TLSDir(dir, localcluster.NodeIdentity)
	must(t, pki.Issue(localcluster.TLSDir(dir, localcluster.CAIdentity), nodeDir, pki.Request{Name: "rotated", Kind: pki.KindNode}))
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range ports {
		for {
			name, err := servedName(n.addr, good)
			if err == nil && name == "rotated" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s at %s still presents %q (%v) after the rotation", n.role, n.addr, name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := probe(n.addr, n.role, n.proto, good); err != nil {
			t.Errorf("%s at %s over %s after the rotation: %v", n.role, n.addr, n.proto, err)
		}
	}

	// The command line: an admin command given only --master has no
	// identity and says which flag to pass; with the admin identity it works.
	addr := master
	r := cairn(t, "status", "--master", addr)
	if r.code == 0 || !strings.Contains(r.stderr, "--tls-dir") {
		t.Fatalf("status without an identity: exit %d, %q", r.code, r.stderr)
	}
	mustCairn(t, "status", "--master", addr, "--tls-dir", localcluster.TLSDir(dir, localcluster.AdminIdentity))
	r = cairn(t, "status", "--master", addr, "--tls-dir", otherDir, "--timeout", "3s")
	if r.code == 0 {
		t.Fatalf("status with another cluster's identity succeeded:\n%s", r.stdout)
	}
}

// probe makes one call to the process at addr (a master's GetMap, a node's
// health check, a data port's ping) over proto with conf (nil: plain text).
func probe(addr, role, proto string, conf *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if proto == "data" {
		c, err := dataproto.Dial(ctx, addr, dataproto.ConnOptions{TLS: conf, ReadTimeout: 3 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		_, _, err = c.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpPing}})
		return err
	}
	var cc grpc.ClientConnInterface
	creds := insecure.NewCredentials()
	if conf != nil {
		creds = credentials.NewTLS(conf)
	}
	switch proto {
	case "lightrpc":
		lc := lightrpc.Dial(addr, lightrpc.ClientOptions{TLS: conf, DialTimeout: 3 * time.Second, GRPC: func() (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		}})
		defer lc.Close()
		cc = lc
	default:
		gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer gc.Close()
		cc = gc
	}
	if role == "master" {
		_, err := pb.NewMasterClient(cc).GetMap(ctx, &pb.GetMapRequest{})
		return err
	}
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// servedName returns the common name of the certificate the server at addr
// presents to a TLS client with conf.
func servedName(addr string, conf *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return "", err
	}
	defer c.Close()
	name, _ := pki.PeerName(c.ConnectionState())
	return name, nil
}

// masterAddr is the RPC address of a master of st.
func masterAddr(st status) string {
	for _, n := range st.Nodes {
		if n.Role == "master" {
			return n.Address
		}
	}
	return ""
}
