package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// TestExtentGrants: the data nodes serve a confined client only the bytes
// of the files its meta nodes let it see. On a default 'cairn up', an
// admin writes a small and a large file with markers under /b, and files
// under /a; clients created with --path /a (one read-only, one writable)
// then speak the data protocol directly, as a client that skips Cairn's
// library would:
//   - listing the extents of any partition is refused;
//   - every extent of every partition (found by the admin's listing) reads
//     back nothing, with no grant or with a forged one;
//   - the writable client's free, overwrite and append of /b's extents are
//     refused, also after it wrote small files of its own (which may share
//     /b's small extent);
//
// and /b's files are unchanged afterwards. Through the SDK both clients
// work inside /a: the read-only one reads, the writable one writes, reads
// back, overwrites in place and reads again from a fresh client, which
// needs the meta nodes' grants.
func TestExtentGrants(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grants")
	_, mnt := startMounted(t, dir)
	st := waitLeaders(t, dir)
	master := masterAddr(st)
	must(t, os.MkdirAll(filepath.Join(mnt, "a"), 0o777))
	must(t, os.MkdirAll(filepath.Join(mnt, "b"), 0o755))
	small := append([]byte("TOPSECRET-"), bytes.Repeat([]byte{'s'}, 4086)...)
	big := bytes.Repeat([]byte("BIGSECRET-MARKER"), 400_000/16)
	must(t, os.WriteFile(filepath.Join(mnt, "b", "small"), small, 0o644))
	must(t, os.WriteFile(filepath.Join(mnt, "b", "big"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(mnt, "a", "mine"), []byte("mine"), 0o666))

	roDir, rwDir := filepath.Join(t.TempDir(), "ro"), filepath.Join(t.TempDir(), "rw")
	mustCairn(t, "client", "create", "ro-a", "--data-dir", dir, "--path", "/a", "--read-only", "--out", roDir)
	mustCairn(t, "client", "create", "rw-a", "--data-dir", dir, "--path", "/a", "--out", rwDir)
	ro, rw, admin := loadTLS(t, roDir), loadTLS(t, rwDir), adminTLS(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Inside /a, through the SDK: grants flow from the meta nodes.
	rov, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: ro})
	must(t, err)
	defer rov.Close()
	if b, err := readPath(ctx, rov, "/mine"); err != nil || string(b) != "mine" {
		t.Fatalf("read /a/mine as the read-only confined client: %q, %v", b, err)
	}
	rwv, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: rw})
	must(t, err)
	defer rwv.Close()
	for i := range 20 { // small files, some likely in /b/small's extent
		must(t, writePath(ctx, rwv, "/own-"+string(rune('a'+i)), bytes.Repeat([]byte{byte(i)}, 4096)))
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: a large extent
	must(t, writePath(ctx, rwv, "/large", large))
	must(t, overwritePath(ctx, rwv, "/large", 300_000, []byte("OVERWRITTEN")))
	copy(large[300_000:], "OVERWRITTEN")
	fresh, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: rw})
	must(t, err)
	if b, err := readPath(ctx, fresh, "/large"); err != nil || !bytes.Equal(b, large) {
		t.Errorf("a fresh writable confined client reads /large back: %d bytes, equal %v, %v", len(b), bytes.Equal(b, large), err)
	}
	fresh.Close()
	before := rwv.Stats().Data
	if before.GrantsPresented == 0 {
		t.Errorf("the writable confined client presented no grant: %+v", before)
	}
	// Every data node restarts and forgets every grant (and has no key
	// until its first heartbeat): the same client reads on, presenting
	// its grants again or fetching new ones.
	var victims []*victimProc
	for _, n := range st.Nodes {
		if n.Role == "data" {
			victims = append(victims, victim(t, dir, st, n.ID, "data"))
		}
	}
	for _, v := range victims {
		v.kill()
	}
	for _, v := range victims {
		v.restart()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := readPath(ctx, rwv, "/large")
		if err == nil && bytes.Equal(b, large) {
			break
		}
		if errors.Is(err, syscall.EACCES) || time.Now().After(deadline) {
			t.Fatalf("read /large after every data node restarted: %d bytes, equal %v, %v", len(b), bytes.Equal(b, large), err)
		}
		time.Sleep(200 * time.Millisecond) // the data nodes are still starting
	}
	if after := rwv.Stats().Data; after.GrantsPresented <= before.GrantsPresented {
		t.Errorf("no grant presented again after the data nodes restarted: %+v, before %+v", after, before)
	}
	st = waitLeaders(t, dir)

	// Every extent of every data partition, as an admin lists them.
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	vol := volumeInfo(t, master, admin, "default")
	type extent struct {
		addr     string
		pid, ext uint64
		size     int64
	}
	var all []extent
	for _, p := range l.Procs {
		if p.DataAddr == "" {
			continue
		}
		for _, pid := range vol.Volume.DataPartitions {
			for _, e := range listExtents(t, p.DataAddr, admin, pid, vol.Epoch) {
				if e.Size > 0 {
					all = append(all, extent{p.DataAddr, pid, e.ID, e.Size})
				}
			}
			// The confined clients may not list.
			for name, conf := range map[string]*tls.Config{"read-only": ro, "writable": rw} {
				err := dataCall(p.DataAddr, conf, dataproto.Header{Op: dataproto.OpListExtents, Partition: pid, Epoch: vol.Epoch})
				if dataproto.CodeOf(err) != dataproto.CodePermissionDenied {
					t.Errorf("list extents of partition %d at %s as the %s confined client: %v, want permission denied", pid, p.DataAddr, name, err)
				}
			}
		}
	}
	if len(all) == 0 {
		t.Fatal("the admin listed no extent")
	}
	forged := forgedGrant(t, all[0].pid, all[0].ext)
	for _, e := range all {
		n := min(e.size, dataproto.MaxPayload)
		for name, conf := range map[string]*tls.Config{"read-only": ro, "writable": rw} {
			for _, tok := range [][]byte{nil, forged} {
				got, err := dataRead(e.addr, conf, tok, dataproto.Header{Op: dataproto.OpRead, Partition: e.pid, Extent: e.ext, Arg: uint64(n), Size: e.size, Epoch: vol.Epoch})
				// Only what the writable client wrote itself (its large
				// file, its small files side by side) may come back.
				if err == nil && (name != "writable" || !(bytes.Equal(got, large[:len(got)]) || ownSmall(got))) {
					t.Errorf("the %s confined client read %d bytes of extent %d of partition %d at %s (forged grant: %v; a marker: %v)",
						name, len(got), e.ext, e.pid, e.addr, tok != nil, bytes.Contains(got, []byte("SECRET")))
				}
			}
		}
	}

	av, err := client.Open(ctx, []string{master}, "default", &client.Options{TLS: admin})
	must(t, err)
	defer av.Close()
	// /b's extents: the writable confined client may change none.
	bKeys := append(inodeExtents(t, st, admin, vol, av, "/b/small"), inodeExtents(t, st, admin, vol, av, "/b/big")...)
	if len(bKeys) < 2 {
		t.Fatalf("found %d extent keys of /b's files, want at least 2", len(bKeys))
	}
	for _, k := range bKeys {
		for _, p := range l.Procs {
			if p.DataAddr == "" {
				continue
			}
			for _, h := range []dataproto.Header{
				{Op: dataproto.OpFree, Partition: k.PartitionId, Extent: k.ExtentId, Offset: int64(k.ExtentOffset), Arg: k.Size, Flags: dataproto.FlagWhole},
				{Op: dataproto.OpOverwrite, Partition: k.PartitionId, Extent: k.ExtentId, Offset: int64(k.ExtentOffset)},
				{Op: dataproto.OpAppend, Partition: k.PartitionId, Extent: k.ExtentId, Offset: int64(k.ExtentOffset + k.Size)},
			} {
				h.Epoch = vol.Epoch
				var payload []byte
				if h.Op != dataproto.OpFree {
					payload = []byte("PWNED")
				}
				_, err := dataRead(p.DataAddr, rw, nil, h, payload...)
				if err == nil {
					t.Errorf("the writable confined client's %v of /b's extent %d/%d at %s succeeded", h.Op, k.PartitionId, k.ExtentId, p.DataAddr)
				}
			}
		}
	}

	// Nor record one of /b's extent keys in a file of its own, to be
	// granted it: the meta nodes take only keys of bytes it wrote.
	must(t, writePath(ctx, rwv, "/evil", []byte("x")))
	evil, err := rwv.StatPath(ctx, "/evil", client.Cred{})
	must(t, err)
	refused := 0
	for _, n := range st.Nodes {
		if n.Role != "meta" {
			continue
		}
		lc := lightrpc.Dial(n.Address, lightrpc.ClientOptions{TLS: rw, DialTimeout: 3 * time.Second})
		for _, id := range vol.Volume.MetaPartitions {
			k := bKeys[len(bKeys)-1]
			resp, err := metapb.NewMetaNodeClient(lc).Txn(ctx, &metapb.TxnRequest{PartitionId: id, Txn: &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_AppendExtents{
				AppendExtents: &metapb.AppendExtents{Ino: evil.Ino, Size: k.Size, Extents: []*metapb.ExtentKey{{PartitionId: k.PartitionId, ExtentId: k.ExtentId, ExtentOffset: k.ExtentOffset, Size: k.Size}}},
			}}}}})
			switch {
			case err != nil:
			case metapb.Errno(resp.GetResult().GetErrno()) == metapb.EACCES:
				refused++
			default:
				t.Errorf("meta partition %d at %s took /b's extent key into the confined client's file: errno %d %q", id, n.Address, resp.GetResult().GetErrno(), resp.GetResult().GetMessage())
			}
		}
		lc.Close()
	}
	if refused == 0 {
		t.Error("no meta partition refused the foreign extent key with EACCES")
	}
	if b, err := readPath(ctx, rwv, "/evil"); err != nil || string(b) != "x" {
		t.Errorf("/evil after the attempt: %d bytes (a marker of /b: %v), %v", len(b), bytes.Contains(b, []byte("SECRET")), err)
	}

	// /b's files are whole, read by an admin client that never read them
	// before (nothing cached).
	if b, err := readPath(ctx, av, "/b/small"); err != nil || !bytes.Equal(b, small) {
		t.Errorf("/b/small after the attempts: %d bytes, equal %v, %v", len(b), bytes.Equal(b, small), err)
	}
	if b, err := readPath(ctx, av, "/b/big"); err != nil || !bytes.Equal(b, big) {
		t.Errorf("/b/big after the attempts: %d bytes, equal %v, %v", len(b), bytes.Equal(b, big), err)
	}
	// A content-defined volume: a client identity writes a file, a second
	// with the same bytes (its chunks are found in the chunk index and
	// spliced in: granted read only), overwrites a piece of the second and
	// reads both back from a fresh client.
	mustCairn(t, "volume", "create", "cdc", "--layout", "cdc", "--data-dir", dir)
	cdcDir := filepath.Join(t.TempDir(), "cdc-client")
	mustCairn(t, "client", "create", "cdc-app", "--data-dir", dir, "--volume", "cdc", "--out", cdcDir)
	cv, err := client.Open(ctx, []string{master}, "cdc", &client.Options{TLS: loadTLS(t, cdcDir)})
	must(t, err)
	content := make([]byte, 3<<20)
	for i := range content {
		content[i] = byte(i * 7 / 5)
	}
	must(t, writePath(ctx, cv, "/one", content))
	must(t, writePath(ctx, cv, "/two", content))
	must(t, overwritePath(ctx, cv, "/two", 1<<20, []byte("CHANGED")))
	changed := bytes.Clone(content)
	copy(changed[1<<20:], "CHANGED")
	cv.Close()
	cv, err = client.Open(ctx, []string{master}, "cdc", &client.Options{TLS: loadTLS(t, cdcDir)})
	must(t, err)
	defer cv.Close()
	for path, want := range map[string][]byte{"/one": content, "/two": changed} {
		if b, err := readPath(ctx, cv, path); err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s of the content-defined volume through a client identity: %d bytes, equal %v, %v", path, len(b), bytes.Equal(b, want), err)
		}
	}

	// And the read-only client still cannot reach /b through the SDK.
	if _, err := readPath(ctx, rov, "/../b/small"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read /../b/small as the read-only confined client: %v, want EACCES", err)
	}
}

// ownSmall reports whether b is made of the writable confined client's
// small files: 4 KiB runs of one byte value below 20.
func ownSmall(b []byte) bool {
	if len(b) == 0 || len(b)%4096 != 0 {
		return false
	}
	for ; len(b) > 0; b = b[4096:] {
		if b[0] >= 20 || !bytes.Equal(b[:4096], bytes.Repeat(b[:1], 4096)) {
			return false
		}
	}
	return true
}

func readPath(ctx context.Context, v *client.Volume, path string) ([]byte, error) {
	f, err := v.OpenPath(ctx, path, os.O_RDONLY, 0, client.Cred{})
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	buf := make([]byte, f.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && n != len(buf) {
		return buf[:n], err
	}
	return buf[:n], nil
}

func writePath(ctx context.Context, v *client.Volume, path string, data []byte) error {
	f, err := v.OpenPath(ctx, path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644, client.Cred{})
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(data, 0)
	return errors.Join(werr, f.Close(ctx))
}

func overwritePath(ctx context.Context, v *client.Volume, path string, off int64, data []byte) error {
	f, err := v.OpenPath(ctx, path, os.O_WRONLY, 0, client.Cred{})
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(data, off)
	return errors.Join(werr, f.Fsync(ctx), f.Close(ctx))
}

// listExtents is the extents of partition pid at a data node, for conf.
func listExtents(t *testing.T, addr string, conf *tls.Config, pid, epoch uint64) []dataproto.ExtentEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dataproto.Dial(ctx, addr, dataproto.ConnOptions{TLS: conf, ReadTimeout: 5 * time.Second})
	must(t, err)
	defer c.Close()
	var out []dataproto.ExtentEntry
	var after uint64
	for {
		h, p, err := c.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpListExtents, Partition: pid, Arg: after, Epoch: epoch}})
		if dataproto.CodeOf(err) == dataproto.CodeUnknownPartition {
			return nil // not a replica of pid
		}
		must(t, err)
		es, err := dataproto.DecodeExtentEntries(p)
		must(t, err)
		out = append(out, es...)
		if h.Flags&dataproto.FlagMore == 0 || len(es) == 0 {
			return out
		}
		after = es[len(es)-1].ID
	}
}

// dataRead sends h (with payload) on a new connection, after presenting
// the grant tok if one is given, and returns the response's payload.
func dataRead(addr string, conf *tls.Config, tok []byte, h dataproto.Header, payload ...byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dataproto.Dial(ctx, addr, dataproto.ConnOptions{TLS: conf, ReadTimeout: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if tok != nil {
		_, _, gerr := c.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpGrant}, Payload: tok})
		if gerr == nil {
			return nil, errors.New("a forged grant was accepted")
		}
	}
	_, p, err := c.Do(ctx, &dataproto.Request{Header: h, Payload: payload})
	return p, err
}

// forgedGrant is a token of the cluster's first key id, signed with a
// secret the cluster never made, granting everything of an extent.
func forgedGrant(t *testing.T, pid, ext uint64) []byte {
	t.Helper()
	var kr grant.Keyring
	kr.Set([]grant.Key{{ID: 1, Secret: bytes.Repeat([]byte{0x42}, grant.SecretLen)}})
	toks, err := kr.Sign(grant.Grant{Mode: grant.Write, Ranges: []grant.Range{{Partition: pid, Extent: ext, Lo: 0, Hi: 1 << 40}}}, time.Hour, time.Now())
	must(t, err)
	return toks[0]
}

// inodeExtents is the extent keys of the file at path, read by the admin from the meta partitions' leaders.
func inodeExtents(t *testing.T, st status, admin *tls.Config, vol *pb.VolumeResponse, av *client.Volume, path string) []*metapb.ExtentKey {
	t.Helper()
	a, err := av.LstatPath(context.Background(), path, client.Cred{})
	must(t, err)
	ino := a.Ino
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range st.Nodes {
		if n.Role != "meta" {
			continue
		}
		lc := lightrpc.Dial(n.Address, lightrpc.ClientOptions{TLS: admin, DialTimeout: 3 * time.Second})
		for _, id := range vol.GetVolume().GetMetaPartitions() {
			resp, err := metapb.NewMetaNodeClient(lc).GetInode(ctx, &metapb.GetInodeRequest{PartitionId: id, Ino: ino})
			if err == nil && resp.Errno == 0 && resp.Inode != nil {
				lc.Close()
				return resp.Inode.Extents
			}
			if err != nil && !strings.Contains(err.Error(), "leader") && !strings.Contains(err.Error(), "not on this node") {
				t.Logf("get inode %d from partition %d at %s: %v", ino, id, n.Address, err)
			}
		}
		lc.Close()
	}
	t.Fatalf("no meta partition leader answered for inode %d (%s)", ino, path)
	return nil
}
