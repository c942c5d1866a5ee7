package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// TestClientCapabilities: identities made with 'cairn client create' on a
// default 'cairn up' are held to what they were given, by the servers:
//   - a read-only client changes nothing, through its mount (mounted
//     read-only) and through the SDK, whose every change reaches the meta
//     nodes, and a raw write reaches a data node: EROFS each time;
//   - a client of one volume opens no other volume and reaches none of its
//     partitions on the meta and data nodes;
//   - a client confined to a directory reaches nothing outside it, by any
//     path or inode trick (checkSubtree);
//   - root squash and id maps hold through a mount (checkSquash);
//   - a revoked client is refused: its open mount fails within a few
//     heartbeats, and a new connection is refused at the handshake, with a
//     message that says so.
func TestClientCapabilities(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "caps")
	_, mnt := startMounted(t, dir)
	must(t, os.MkdirAll(filepath.Join(mnt, "data"), 0o755))
	must(t, os.WriteFile(filepath.Join(mnt, "data", "f"), []byte("hello"), 0o644))
	st := waitLeaders(t, dir)
	master := masterAddr(st)

	roDir := filepath.Join(t.TempDir(), "ro")
	out := mustCairn(t, "client", "create", "reader", "--data-dir", dir, "--read-only", "--out", roDir)
	if !strings.Contains(out, "read-only") {
		t.Errorf("client create says %q", out)
	}
	mustCairn(t, "volume", "create", "other", "--data-dir", dir)
	otherDir := filepath.Join(t.TempDir(), "other")
	mustCairn(t, "client", "create", "tenant", "--data-dir", dir, "--volume", "other", "--out", otherDir)
	if r := cairn(t, "client", "create", "reader", "--data-dir", dir, "--out", t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("a second client named reader: exit %d, %q", r.code, r.stderr)
	}
	list := mustCairn(t, "client", "list", "--data-dir", dir)
	for _, want := range []string{"reader", "tenant", "volume other"} {
		if !strings.Contains(list, want) {
			t.Errorf("client list lacks %q:\n%s", want, list)
		}
	}

	// The read-only client through a mount of its own.
	roMnt := filepath.Join(t.TempDir(), "romnt")
	must(t, os.Mkdir(roMnt, 0o755))
	roMount := startMount(t, roMnt, "--master", master, "--tls-dir", roDir, "default", roMnt)
	if b, err := os.ReadFile(filepath.Join(roMnt, "data", "f")); err != nil || string(b) != "hello" {
		t.Fatalf("read through the read-only mount: %q, %v", b, err)
	}
	// df works on a client identity's mount (counts of its own volume).
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(roMnt, &sfs); err != nil || sfs.Blocks == 0 || sfs.Files == 0 {
		t.Errorf("statfs of the read-only client's mount: %v, %d blocks, %d files", err, sfs.Blocks, sfs.Files)
	}
	f := filepath.Join(roMnt, "data", "f")
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(roMnt, "new"), nil, 0o644) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(roMnt, "d"), 0o755) }},
		{"write", func() error {
			fh, err := os.OpenFile(f, os.O_WRONLY, 0)
			if err == nil {
				fh.Close()
			}
			return err
		}},
		{"truncate", func() error { return os.Truncate(f, 0) }},
		{"chmod", func() error { return os.Chmod(f, 0o600) }},
		{"rename", func() error { return os.Rename(f, f+".2") }},
		{"unlink", func() error { return os.Remove(f) }},
		{"symlink", func() error { return os.Symlink("f", filepath.Join(roMnt, "l")) }},
		{"setxattr", func() error { return syscall.Setxattr(f, "user.k", []byte("v"), 0) }},
	} {
		if err := c.do(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s through the read-only mount: %v, want EROFS", c.what, err)
		}
	}

	// The same client through the SDK: nothing stops a change before the
	// servers do.
	ro := loadTLS(t, roDir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: ro})
	must(t, err)
	defer v.Close()
	root := client.Cred{}
	if _, err := v.StatPath(ctx, "/data/f", root); err != nil {
		t.Fatalf("stat through the SDK as a read-only client: %v", err)
	}
	attr, err := v.StatPath(ctx, "/data/f", root)
	must(t, err)
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"create", func() error { _, err := v.CreatePath(ctx, "/new", 0o644, root); return err }},
		{"mkdir", func() error { _, err := v.MkdirPath(ctx, "/d", 0o755, root); return err }},
		{"unlink", func() error { return v.UnlinkPath(ctx, "/data/f", root) }},
		{"rename", func() error { return v.RenamePath(ctx, "/data/f", "/data/g", root) }},
		{"link", func() error { _, err := v.LinkPath(ctx, "/data/f", "/data/h", root); return err }},
		{"chmod", func() error {
			_, err := v.Setattr(ctx, attr.Ino, client.SetattrIn{Valid: client.SetMode, Mode: 0o600})
			return err
		}},
		{"setxattr", func() error { return v.SetXattr(ctx, attr.Ino, "user.k", []byte("v"), 0) }},
		{"write", func() error {
			fh, err := v.OpenFile(ctx, attr.Ino, os.O_WRONLY)
			if err != nil {
				return err
			}
			_, werr := fh.WriteAt([]byte("changed"), 0)
			return errors.Join(werr, fh.Close(ctx))
		}},
	} {
		if err := c.do(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s through the SDK as a read-only client: %v, want EROFS", c.what, err)
		}
	}
	// A data node refuses a new extent from it, whichever partition.
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	vol := volumeInfo(t, master, adminTLS(t, dir), "default")
	dp := vol.Volume.DataPartitions[0]
	for _, p := range l.Procs {
		if p.DataAddr == "" {
			continue
		}
		err := dataCall(p.DataAddr, ro, dataproto.Header{Op: dataproto.OpCreateExtent, Partition: dp})
		if dataproto.CodeOf(err) != dataproto.CodeReadOnlyClient {
			t.Errorf("create extent at %s as a read-only client: %v, want read-only client", p.DataAddr, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "data", "f")); err != nil || string(b) != "hello" {
		t.Errorf("after the refused changes the file holds %q (%v)", b, err)
	}

	// A client of volume "other" reaches nothing of "default".
	tenant := loadTLS(t, otherDir)
	if _, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: tenant}); !errors.Is(err, syscall.EACCES) {
		t.Errorf("open volume default as a client of volume other: %v, want EACCES", err)
	}
	if r := cairn(t, "fs", "ls", "/", "--master", master, "--tls-dir", otherDir, "--volume", "default"); r.code == 0 || !strings.Contains(r.stderr, `volume "other" only`) {
		t.Errorf("fs ls of volume default as a client of volume other: exit %d, %q", r.code, r.stderr)
	}
	own, err := client.Open(ctx, []string{master}, "other", &client.Options{TLS: tenant})
	must(t, err)
	if _, err := own.MkdirPath(ctx, "/mine", 0o755, root); err != nil {
		t.Errorf("mkdir in its own volume: %v", err)
	}
	own.Close()
	// Asked directly, with the partitions of "default" named: the meta
	// nodes' leaders answer EACCES (the others send it to the leader),
	// the data nodes refuse.
	denied := 0
	for _, n := range st.Nodes {
		if n.Role != "meta" {
			continue
		}
		for _, id := range vol.Volume.MetaPartitions {
			lc := lightrpc.Dial(n.Address, lightrpc.ClientOptions{TLS: tenant, DialTimeout: 3 * time.Second})
			resp, err := metapb.NewMetaNodeClient(lc).Lookup(ctx, &metapb.LookupRequest{PartitionId: id, Parent: 1, Name: []byte("data")})
			lc.Close()
			switch {
			case err != nil:
			case metapb.Errno(resp.Errno) == metapb.EACCES:
				denied++
			default:
				t.Errorf("meta node %d answered a client of another volume about partition %d: errno %d, dentry %v", n.ID, id, resp.Errno, resp.Dentry)
			}
		}
	}
	if denied < len(vol.Volume.MetaPartitions) {
		t.Errorf("%d EACCES answers from the meta nodes, want one per partition of default (%d)", denied, len(vol.Volume.MetaPartitions))
	}
	for _, p := range l.Procs {
		if p.DataAddr == "" {
			continue
		}
		err := dataCall(p.DataAddr, tenant, dataproto.Header{Op: dataproto.OpListExtents, Partition: dp})
		if dataproto.CodeOf(err) != dataproto.CodePermissionDenied {
			t.Errorf("list extents at %s as a client of another volume: %v, want permission denied", p.DataAddr, err)
		}
	}

	checkSubtree(t, dir, master, mnt)
	checkSquash(t, dir, master, mnt)

	// Revocation: the open mount stops working, new connections are
	// refused at the handshake.
	mustCairn(t, "client", "revoke", "reader", "--data-dir", dir)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := os.Stat(filepath.Join(roMnt, "data", "f"))
		if errors.Is(err, syscall.EACCES) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked client's mount still answers stat (%v) after 15s:\n%s", err, roMount.output())
		}
		time.Sleep(200 * time.Millisecond)
		// The kernel caches attributes for a second: ask for new names.
		_, _ = os.Stat(filepath.Join(roMnt, "data", "nothing-"+time.Now().Format("150405.000")))
	}
	if r := cairn(t, "fs", "ls", "/", "--master", master, "--tls-dir", roDir, "--timeout", "5s"); r.code == 0 || !strings.Contains(r.stderr, "revoked") {
		t.Errorf("fs ls with a revoked identity: exit %d, %q", r.code, r.stderr)
	}
	for _, n := range st.Nodes {
		if n.Address == "" {
			continue
		}
		if err := probe(n.Address, n.Role, "grpc", ro); err == nil {
			t.Errorf("%s at %s answered a revoked certificate", n.Role, n.Address)
		}
	}
}

// volumeInfo is the master's answer about a volume.
func volumeInfo(t *testing.T, master string, conf *tls.Config, name string) *pb.VolumeResponse {
	t.Helper()
	mc, err := masterclient.New([]string{master}, conf, nil)
	must(t, err)
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp *pb.VolumeResponse
	must(t, mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetVolume(ctx, &pb.VolumeRequest{Name: name}, o...)
		return err
	}))
	return resp
}

func loadTLS(t *testing.T, dir string) *tls.Config {
	t.Helper()
	id, err := pki.Load(dir)
	must(t, err)
	return id.ClientConfig()
}

// dataCall sends one request with no payload to the data node at addr.
func dataCall(addr string, conf *tls.Config, h dataproto.Header) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dataproto.Dial(ctx, addr, dataproto.ConnOptions{TLS: conf, ReadTimeout: 3 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	_, _, err = c.Do(ctx, &dataproto.Request{Header: h})
	return err
}

// checkSubtree: a client created with --path /a reaches nothing outside
// /a. Its mount shows /a as its root; each trick below is tried through
// the SDK (and so against the servers) and, where a mount can express it,
// through the mount:
//  1. paths climbing out with "..", at the root and below it;
//  2. a symlink inside /a whose target climbs out;
//  3. inode numbers of things outside: the volume's root, a directory, a
//     file (stat, open, list, look up in, chmod);
//  4. a hard link made inside /a (by an admin) to a file outside;
//  5. a hard link the client tries to make inside /a to a file outside;
//  6. a rename out of /a;
//  7. a directory the client knew by inode number, moved out of /a by an
//     admin afterwards.
//
// And it works inside: create, write, list, rename, a symlink inside.
func checkSubtree(t *testing.T, dir, master, mnt string) {
	must(t, os.MkdirAll(filepath.Join(mnt, "a", "d"), 0o755))
	must(t, os.MkdirAll(filepath.Join(mnt, "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(mnt, "b", "secret"), []byte("secret"), 0o644))
	must(t, os.WriteFile(filepath.Join(mnt, "a", "mine"), []byte("mine"), 0o644))
	must(t, os.Link(filepath.Join(mnt, "b", "secret"), filepath.Join(mnt, "a", "hardlink")))
	must(t, os.Symlink("../b", filepath.Join(mnt, "a", "up")))
	must(t, os.Symlink("d", filepath.Join(mnt, "a", "down")))
	subDir := filepath.Join(t.TempDir(), "sub")
	mustCairn(t, "client", "create", "confined", "--data-dir", dir, "--path", "/a", "--out", subDir)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admin, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: adminTLS(t, dir)})
	must(t, err)
	defer admin.Close()
	root := client.Cred{}
	ino := func(path string) uint64 {
		a, err := admin.LstatPath(ctx, path, root)
		must(t, err)
		return a.Ino
	}
	secret, b, d := ino("/b/secret"), ino("/b"), ino("/a/d")

	v, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: loadTLS(t, subDir)})
	must(t, err)
	defer v.Close()
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EACCES) {
			t.Errorf("%s as a client confined to /a: %v, want EACCES", what, err)
		}
	}
	stat := func(p string) error { _, err := v.StatPath(ctx, p, root); return err }
	// 1. ".." out of the subtree.
	for _, p := range []string{"/../b/secret", "/..", "/d/../../b", "/../a/../b/secret", "/d/../../../b/secret"} {
		denied("stat "+p, stat(p))
	}
	if err := stat("/../a/mine"); err != nil { // out and back in: inside
		t.Errorf("stat /../a/mine: %v", err)
	}
	// 2. A symlink climbing out; one staying inside works.
	denied("stat /up/secret", stat("/up/secret"))
	if _, err := v.StatPath(ctx, "/down", root); err != nil {
		t.Errorf("stat through a symlink inside: %v", err)
	}
	// 3. Inode numbers from outside.
	for _, c := range []struct {
		what string
		ino  uint64
	}{{"the volume root", client.RootIno}, {"/b", b}, {"/b/secret", secret}} {
		_, err := v.GetAttr(ctx, c.ino)
		denied("getattr of "+c.what, err)
		_, err = v.OpenFile(ctx, c.ino, os.O_RDONLY)
		denied("open of "+c.what, err)
		_, _, err = v.ReadDir(ctx, c.ino, "", 100)
		denied("readdir of "+c.what, err)
		_, err = v.Lookup(ctx, c.ino, "secret")
		denied("lookup in "+c.what, err)
		_, err = v.Setattr(ctx, c.ino, client.SetattrIn{Valid: client.SetMode, Mode: 0o777})
		denied("chmod of "+c.what, err)
	}
	// 4. A hard link inside to a file outside: listed, not readable.
	denied("stat /hardlink", stat("/hardlink"))
	_, err = v.OpenPath(ctx, "/hardlink", os.O_RDONLY, 0, root)
	denied("open /hardlink", err)
	// 5. The client linking a file outside into its subtree.
	_, err = v.Link(ctx, secret, d, "stolen")
	denied("link of /b/secret into /a/d", err)
	// 6. A rename out.
	denied("rename /mine to /../b/mine", v.RenamePath(ctx, "/mine", "/../b/mine", root))
	if err := v.Rename(ctx, d, "x", b, "x", 0); !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.ENOENT) {
		t.Errorf("rename by inode into /b: %v, want EACCES (or ENOENT, refused before)", err)
	}

	// Through the mount: /a is the root; the same data, and the tricks a
	// mount can express.
	sub := filepath.Join(t.TempDir(), "submnt")
	must(t, os.Mkdir(sub, 0o755))
	startMount(t, sub, "--master", master, "--tls-dir", subDir, "default", sub)
	if b, err := os.ReadFile(filepath.Join(sub, "mine")); err != nil || string(b) != "mine" {
		t.Fatalf("read /a/mine through the confined mount: %q, %v", b, err)
	}
	names, err := os.ReadDir(sub)
	must(t, err)
	var listed []string
	for _, e := range names {
		listed = append(listed, e.Name())
	}
	if strings.Join(listed, ",") != "d,down,hardlink,mine,up" {
		t.Errorf("the confined mount's root lists %v", listed)
	}
	if _, err := os.ReadFile(filepath.Join(sub, "hardlink")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read of the hard link through the mount: %v, want EACCES", err)
	}
	if _, err := os.Stat(filepath.Join(sub, "up", "secret")); err == nil {
		t.Error("the symlink ../b led to the secret through the mount")
	}
	must(t, os.WriteFile(filepath.Join(sub, "d", "new"), []byte("new"), 0o644))
	must(t, os.Rename(filepath.Join(sub, "d", "new"), filepath.Join(sub, "renamed")))
	if b, err := os.ReadFile(filepath.Join(mnt, "a", "renamed")); err != nil || string(b) != "new" {
		t.Errorf("a file the confined client wrote reads %q (%v) at /a/renamed", b, err)
	}
	// 7. A directory moved out of /a by an admin: its inode, known to the
	// client, leads nowhere any more.
	if _, err := v.GetAttr(ctx, d); err != nil {
		t.Fatalf("getattr of /a/d before it moved: %v", err)
	}
	must(t, os.Rename(filepath.Join(mnt, "a", "d"), filepath.Join(mnt, "b", "d")))
	_, err = v.GetAttr(ctx, d)
	denied("getattr of /a/d moved to /b/d", err)
	_, _, err = v.ReadDir(ctx, d, "", 100)
	denied("readdir of /a/d moved to /b/d", err)
}

// checkSquash: through the mount of an identity created with
// --root-squash --uid-map 1000:5000:10 --gid-map 1000:5000:10, root on the
// client host is nobody to the cluster, and the host's user 1000 is the
// cluster's 5000, whichever the kernel let through: what root creates
// belongs to 65534; root cannot read, change or chown what is not its own;
// user 1000's files are 5000's on the cluster, and shown as its own
// through the mount. The same checks hold through the SDK, whose
// requests name the caller directly.
func checkSquash(t *testing.T, dir, master, mnt string) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skipf("no setpriv to run commands as another user: %v", err)
	}
	pub, priv := filepath.Join(mnt, "pub"), filepath.Join(mnt, "priv")
	must(t, os.Mkdir(pub, 0o777))
	must(t, os.Chmod(pub, 0o777))
	must(t, os.Mkdir(priv, 0o700))
	must(t, os.WriteFile(filepath.Join(priv, "s"), []byte("s"), 0o600))
	must(t, os.Chown(filepath.Join(priv, "s"), 1000, 1000))
	must(t, os.Chown(priv, 1000, 1000))
	must(t, os.WriteFile(filepath.Join(pub, "rootfile"), []byte("root"), 0o644))
	sqDir := filepath.Join(t.TempDir(), "squash")
	mustCairn(t, "client", "create", "squashed", "--data-dir", dir, "--root-squash",
		"--uid-map", "1000:5000:10", "--gid-map", "1000:5000:10", "--out", sqDir)
	// A mount point user 1000 can reach: the test's temporary directories
	// are root's alone.
	base := t.TempDir()
	must(t, os.Chmod(base, 0o755))
	must(t, os.Chmod(filepath.Dir(base), 0o755))
	sq := filepath.Join(base, "sqmnt")
	must(t, os.Mkdir(sq, 0o755))
	startMount(t, sq, "--master", master, "--tls-dir", sqDir, "-o", "allow_other", "default", sq)

	owner := func(p string) (uint32, uint32) {
		t.Helper()
		var st syscall.Stat_t
		must(t, syscall.Stat(p, &st))
		return st.Uid, st.Gid
	}
	// Root, squashed.
	if _, err := os.ReadDir(filepath.Join(sq, "priv")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root lists a 0700 directory of user 1000: %v, want EACCES", err)
	}
	if _, err := os.ReadFile(filepath.Join(sq, "priv", "s")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root reads a 0600 file of user 1000: %v, want EACCES", err)
	}
	if err := os.WriteFile(filepath.Join(sq, "pub", "rootfile"), []byte("x"), 0o644); !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root writes root's 0644 file: %v, want EACCES", err)
	}
	if err := os.Chmod(filepath.Join(sq, "pub", "rootfile"), 0o666); !errors.Is(err, syscall.EPERM) {
		t.Errorf("squashed root chmods root's file: %v, want EPERM", err)
	}
	must(t, os.WriteFile(filepath.Join(sq, "pub", "bysquashed"), []byte("x"), 0o644))
	if uid, gid := owner(filepath.Join(pub, "bysquashed")); uid != 65534 || gid != 65534 {
		t.Errorf("a file squashed root created belongs to %d:%d, want 65534:65534", uid, gid)
	}
	if err := os.Chown(filepath.Join(sq, "pub", "bysquashed"), 0, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("squashed root gives its file to root: %v, want EPERM", err)
	}
	if err := os.Remove(filepath.Join(sq, "priv", "s")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root removes from a 0700 directory of user 1000: %v, want EACCES", err)
	}
	// User 1000 of the client host is 5000 on the cluster.
	as1000 := func(script string) error {
		out, err := exec.Command("setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "sh", "-ec", script).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	mine := filepath.Join(sq, "pub", "mine")
	if err := as1000("echo mine > " + mine + "; chmod 600 " + mine + "; cat " + mine); err != nil {
		t.Fatalf("user 1000 through the mount: %v", err)
	}
	if uid, gid := owner(filepath.Join(pub, "mine")); uid != 5000 || gid != 5000 {
		t.Errorf("user 1000's file belongs to %d:%d on the cluster, want 5000:5000", uid, gid)
	}
	if uid, gid := owner(mine); uid != 1000 || gid != 1000 {
		t.Errorf("the mount shows user 1000's file as %d:%d, want 1000:1000", uid, gid)
	}
	if _, err := os.ReadFile(mine); !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root reads user 1000's 0600 file: %v, want EACCES", err)
	}
	if err := as1000("cat " + filepath.Join(sq, "priv", "s")); err == nil {
		t.Error("user 1000 of the client (5000 on the cluster) read the cluster's user 1000's 0600 file")
	}
	// Access through a supplementary group: the kernel passes none, the
	// mount reads them from /proc, the servers judge by them.
	team := filepath.Join(pub, "team")
	must(t, os.Mkdir(team, 0o770))
	must(t, os.Chmod(team, 0o770))
	must(t, os.Chown(team, 0, 3000))
	inTeam := exec.Command("setpriv", "--reuid", "1000", "--regid", "1000", "--groups", "3000", "sh", "-ec", "echo t > "+filepath.Join(sq, "pub", "team", "f"))
	if out, err := inTeam.CombinedOutput(); err != nil {
		t.Errorf("user 1000 in group 3000 creates in a 0770 directory of group 3000: %v: %s", err, out)
	}
	if err := as1000("echo t > " + filepath.Join(sq, "pub", "team", "g")); err == nil {
		t.Error("user 1000 outside group 3000 created in its 0770 directory")
	}

	// The SDK: the caller named in each request is mapped the same way.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: loadTLS(t, sqDir)})
	must(t, err)
	defer v.Close()
	root := client.Cred{}
	_, err = v.OpenPath(ctx, "/priv/s", os.O_RDONLY, 0, root)
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("the SDK as root opens a 0600 file of user 1000: %v, want EACCES", err)
	}
	if _, err := v.SetattrPath(ctx, "/pub/rootfile", client.SetattrIn{Valid: client.SetMode, Mode: 0o777}, root); !errors.Is(err, syscall.EPERM) {
		t.Errorf("the SDK as root chmods root's file: %v, want EPERM", err)
	}
	a, err := v.CreatePath(ctx, "/pub/bysdk", 0o644, root)
	must(t, err)
	if a.Uid != 65534 {
		t.Errorf("a file the SDK created as root belongs to %d, want 65534", a.Uid)
	}
}
