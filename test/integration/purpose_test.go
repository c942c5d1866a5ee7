package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/pki"
)

// handSigned is a certificate the test signs itself with the CA key in
// caDir, for use as a server's: of kind (its organizational unit) and name,
// with the extended key usages of Cairn's certificates before they had a
// purpose: server and client use, whatever the kind.
func handSigned(t *testing.T, caDir, name string, kind pki.Kind) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(caDir, pki.CAFile), filepath.Join(caDir, pki.CAKey))
	must(t, err)
	caCert, err := x509.ParseCertificate(pair.Certificate[0])
	must(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{string(kind)}, Organization: []string{"Cairn"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, pair.PrivateKey)
	must(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	cert, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	must(t, err)
	return cert
}

// fakeServer is a TLS listener that presents a certificate of the
// cluster's CA and answers nothing: it counts the connections, the
// handshakes that completed (and the kinds of the client certificates
// they carried) and the application bytes received after them.
type fakeServer struct {
	ln   net.Listener
	addr string
	wg   sync.WaitGroup

	mu        sync.Mutex
	accepted  int
	completed map[pki.Kind]int // completed handshakes by the client's kind
	bytes     map[pki.Kind]int // application bytes received, by the client's kind
	refused   []string         // how the handshakes that failed ended
}

// startFake listens on addr (a free loopback port when empty) with cert.
func startFake(t *testing.T, addr string, cert tls.Certificate) *fakeServer {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	// The address may be one a killed process held a moment ago.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	must(t, err)
	f := &fakeServer{ln: ln, addr: ln.Addr().String(), completed: map[pki.Kind]int{}, bytes: map[pki.Kind]int{}}
	conf := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert, // whatever the client sends is recorded, nothing checked
		NextProtos:   []string{"h2"},        // as a Cairn server offers it to gRPC clients
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.accepted++
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				tc := tls.Server(c, conf)
				_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
				if err := tc.Handshake(); err != nil {
					f.mu.Lock()
					f.refused = append(f.refused, err.Error())
					f.mu.Unlock()
					return
				}
				_, kind := pki.PeerName(tc.ConnectionState())
				f.mu.Lock()
				f.completed[kind]++
				f.mu.Unlock()
				buf := make([]byte, 4096)
				for {
					n, err := tc.Read(buf)
					f.mu.Lock()
					f.bytes[kind] += n
					f.mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(f.close)
	return f
}

func (f *fakeServer) close() {
	f.ln.Close()
	f.wg.Wait()
}

// counts returns what the fake saw so far, once every connection it
// accepted has finished its handshake, one way or the other (within the
// fake's 5 s deadline).
func (f *fakeServer) counts() (accepted, completed, bytes int) {
	for deadline := time.Now().Add(6 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		f.mu.Lock()
		done := len(f.refused)
		for _, n := range f.completed {
			done += n
		}
		pending := f.accepted - done
		f.mu.Unlock()
		if pending == 0 || time.Now().After(deadline) {
			break
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.completed {
		completed += n
	}
	for _, n := range f.bytes {
		bytes += n
	}
	return f.accepted, completed, bytes
}

// reset forgets what the fake saw.
func (f *fakeServer) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accepted, f.refused = 0, nil
	clear(f.completed)
	clear(f.bytes)
}

// wantRefused checks that some client reached the fake since the last
// reset, and that no handshake completed and no byte arrived: every client
// refused the fake's certificate before sending anything.
func (f *fakeServer) wantRefused(t *testing.T, who string) {
	t.Helper()
	accepted, completed, bytes := f.counts()
	if accepted == 0 {
		t.Errorf("%s never reached the fake server", who)
	}
	if completed > 0 || bytes > 0 {
		t.Errorf("%s completed %d handshakes with the fake server and sent it %d bytes", who, completed, bytes)
	}
}

// startLogged starts cairn with args, its output in a file, and returns a
// function that reads that file so far; the process is killed at cleanup.
func startLogged(t *testing.T, logPath string, args ...string) func() string {
	t.Helper()
	logf, err := os.Create(logPath)
	must(t, err)
	cmd := exec.Command(cairnBin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	logf.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	}
}

// waitLog waits until read's text contains want.
func waitLog(t *testing.T, what string, read func() string, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(read(), want); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %v:\n%s", what, want, within, read())
		}
	}
}

// TestServerMustBeNode: only a cluster node's certificate can serve. A
// tenant's client certificate, signed by the cluster's CA the way every
// certificate used to be (serverAuth included), presented by a server that
// poses as a master, is refused at the handshake, before any request is
// sent, by the SDK, the admin commands, a mount and a node; each says that
// the server presented a client certificate.
func TestServerMustBeNode(t *testing.T) {
	tmp := t.TempDir()
	ca := filepath.Join(tmp, "ca")
	must(t, pki.CreateCA(ca, "purpose test"))
	adminDir, nodeDir := filepath.Join(tmp, "admin"), filepath.Join(tmp, "node")
	must(t, pki.Issue(ca, adminDir, pki.Request{Name: "ops", Kind: pki.KindAdmin}))
	must(t, pki.Issue(ca, nodeDir, pki.Request{Name: "meta-9", Kind: pki.KindNode}))
	admin, err := pki.Load(adminDir)
	must(t, err)
	const refusal = `the server presented a client certificate ("tenant"), not a cluster node's`
	fake := startFake(t, "", handSigned(t, ca, "tenant", pki.KindClient))

	// The SDK: the master client, and a volume opened as an application does.
	mc, err := masterclient.New([]string{fake.addr}, admin.ClientConfig(), nil)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = mc.Status(ctx)
	cancel()
	mc.Close()
	if err == nil || !strings.Contains(err.Error(), refusal) {
		t.Errorf("masterclient: %v, want %q", err, refusal)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	v, err := client.Open(ctx, []string{fake.addr}, "default", &client.Options{TLS: admin.ClientConfig()})
	cancel()
	if err == nil {
		v.Close()
	}
	if err == nil || !strings.Contains(err.Error(), refusal) {
		t.Errorf("client.Open: %v, want %q", err, refusal)
	}
	// gRPC, which the SDK falls back to, refuses it as well.
	gc, err := grpc.NewClient(fake.addr, grpc.WithTransportCredentials(credentials.NewTLS(admin.ClientConfig())))
	must(t, err)
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	_, err = pb.NewMasterClient(gc).GetMap(ctx, &pb.GetMapRequest{})
	cancel()
	gc.Close()
	if err == nil || !strings.Contains(err.Error(), "not a cluster node's") {
		t.Errorf("gRPC: %v, want a refusal", err)
	}
	fake.wantRefused(t, "the SDK")

	// The admin commands.
	fake.reset()
	r := cairn(t, "status", "--master", fake.addr, "--tls-dir", adminDir, "--timeout", "3s")
	if r.code == 0 || !strings.Contains(r.stderr, refusal) {
		t.Errorf("cairn status: exit %d, stderr %q; want a failure saying %q", r.code, r.stderr, refusal)
	}
	fake.wantRefused(t, "cairn status")

	// A mount: it fails before it mounts anything.
	fake.reset()
	mp := filepath.Join(tmp, "mnt")
	must(t, os.Mkdir(mp, 0o755))
	r = cairn(t, "mount", "default", mp, "--master", fake.addr, "--tls-dir", adminDir, "--wait", "2s", "--timeout", "3s")
	if r.code == 0 || !strings.Contains(r.stderr, refusal) {
		t.Errorf("cairn mount: exit %d, stderr %q; want a failure saying %q", r.code, r.stderr, refusal)
	}
	_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	fake.wantRefused(t, "cairn mount")

	// Nodes: they keep trying to register, and say why they cannot.
	for _, role := range []string{"meta", "data"} {
		fake.reset()
		args := []string{role, "--master", fake.addr, "--tls-dir", nodeDir, "--data-dir", filepath.Join(tmp, role),
			"--listen", freeAddr(t), "--metrics-addr", freeAddr(t)}
		if role == "data" {
			args = append(args, "--data-listen", freeAddr(t))
		}
		log := startLogged(t, filepath.Join(tmp, role+".log"), args...)
		// The log quotes the error as a string: its quotes are escaped.
		waitLog(t, "cairn "+role, log, strings.ReplaceAll(refusal, `"`, `\"`), 20*time.Second)
		fake.wantRefused(t, "cairn "+role)
	}

	// Control: the same clients do talk to a server with a node
	// certificate (the fake answers nothing, but gets their bytes).
	node := startFake(t, "", handSigned(t, ca, "meta-9", pki.KindNode))
	mc, err = masterclient.New([]string{node.addr}, admin.ClientConfig(), nil)
	must(t, err)
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	_, _ = mc.Status(ctx)
	cancel()
	mc.Close()
	if _, completed, bytes := node.counts(); completed == 0 || bytes == 0 {
		t.Errorf("a server with a node certificate: %d handshakes, %d bytes; want the client's request", completed, bytes)
	}
}

// TestNodeNameChecked: a node records, at registration, the name of the
// certificate it registered with (Node.cert_name), and its peers dial it
// expecting that name. A process that took over a node's addresses with a
// node certificate of another name (the cluster's CA, the right kind) gets
// no Raft message and no forwarded write from the other nodes: they
// refuse it at the handshake.
func TestNodeNameChecked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "names")
	startUp(t, dir, "--mount", "")
	st := waitLeaders(t, dir)

	admin := adminTLS(t, dir)
	mc, err := masterclient.New([]string{masterAddr(st)}, admin, nil)
	must(t, err)
	defer mc.Close()
	var m *pb.ClusterMap
	err = mc.Do(context.Background(), func(ctx context.Context, c pb.MasterClient, o ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := c.GetMap(ctx, &pb.GetMapRequest{}, o...)
		if err == nil {
			m = resp.Map
		}
		return err
	})
	must(t, err)
	var data *pb.Node
	for _, n := range m.Nodes {
		if n.CertName != "cairn-up-"+localcluster.NodeIdentity {
			t.Errorf("node %d registered with certificate name %q, want %q", n.Id, n.CertName, "cairn-up-"+localcluster.NodeIdentity)
		}
		if n.Role == pb.Role_ROLE_DATA && data == nil {
			data = n
		}
	}
	if data == nil {
		t.Fatalf("no data node in the map: %v", m.Nodes)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vol, err := client.Open(ctx, []string{masterAddr(st)}, "default", &client.Options{TLS: admin})
	must(t, err)
	defer vol.Close()

	// An impostor on a data node's two addresses, with a node certificate
	// of another name: the other data nodes' Raft transports dial its
	// gRPC address at once, and a chain through it dials its data path
	// for the writes below, until the master marks it down.
	ca := localcluster.TLSDir(dir, localcluster.CAIdentity)
	impostor := handSigned(t, ca, "impostor", pki.KindNode)
	victim(t, dir, st, data.Id, "data").kill()
	dataPath := startFake(t, data.DataAddr, impostor)
	dataRaft := startFake(t, data.Addr, impostor)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var nwrites atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
				if writeFile(wctx, vol, w*1_000_000+i, buf) == nil {
					nwrites.Add(1)
				}
				wcancel()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// Each fake must see the nodes try, and refuse.
	refusedBy := func(f *fakeServer) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.refused) > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !refusedBy(dataRaft) || !refusedBy(dataPath); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			accepted, completed, bytes := dataPath.counts()
			t.Fatalf("after 30s, refused handshakes: on the Raft address %v, on the data path %v (%d connections, %d handshakes, %d bytes; %d files written)",
				refusedBy(dataRaft), refusedBy(dataPath), accepted, completed, bytes, nwrites.Load())
		}
	}
	time.Sleep(2 * time.Second) // some more attempts
	for _, f := range []struct {
		name string
		f    *fakeServer
	}{{"Raft address", dataRaft}, {"data-path address", dataPath}} {
		f.f.mu.Lock()
		completed, bytes := f.f.completed[pki.KindNode], f.f.bytes[pki.KindNode]
		f.f.mu.Unlock()
		if completed > 0 || bytes > 0 {
			t.Errorf("the impostor on the %s: %d handshakes with nodes completed, %d bytes from them", f.name, completed, bytes)
		}
	}
	// Control: the name is what they refused. The same impostor named as
	// the map names the node gets their Raft messages.
	dataRaft.close()
	sameName := startFake(t, data.Addr, handSigned(t, ca, "cairn-up-"+localcluster.NodeIdentity, pki.KindNode))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		sameName.mu.Lock()
		completed, bytes := sameName.completed[pki.KindNode], sameName.bytes[pki.KindNode]
		sameName.mu.Unlock()
		if completed > 0 && bytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a node certificate of the recorded name: %d handshakes with nodes, %d bytes from them after 30s", completed, bytes)
		}
	}
}

// writeFile writes buf as file i in the volume's root.
func writeFile(ctx context.Context, v *client.Volume, i int, buf []byte) error {
	_, f, err := v.CreateFile(ctx, client.RootIno, fmt.Sprintf("f%d", i), 0o644, 0, 0, syscall.O_WRONLY)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return errors.Join(err, f.Close(ctx))
	}
	return f.Close(ctx)
}
