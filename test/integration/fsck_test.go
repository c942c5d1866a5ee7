package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// fsckJSON is the part of `cairn fsck --json` the test reads.
type fsckJSON struct {
	Inodes   int `json:"inodes"`
	Findings []struct {
		Kind      string `json:"kind"`
		Partition uint64 `json:"partition"`
		Ino       uint64 `json:"ino"`
		Dentries  []struct {
			Parent uint64 `json:"parent"`
			Name   string `json:"name"`
			Ino    uint64 `json:"ino"`
		} `json:"dentries"`
	} `json:"findings"`
	Repairs []struct {
		Applied bool   `json:"applied"`
		Reason  string `json:"reason"`
	} `json:"repairs"`
	Clean bool `json:"clean"`
}

func runFsck(t *testing.T, dir string, wantCode int, args ...string) fsckJSON {
	t.Helper()
	r := cairn(t, append([]string{"fsck", "default", "--data-dir", dir, "--json"}, args...)...)
	if r.code != wantCode {
		t.Fatalf("cairn fsck %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, wantCode, r.stdout, r.stderr)
	}
	var out fsckJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("fsck --json: %v\n%s", err, r.stdout)
	}
	return out
}

// TestFsck builds a tree through the SDK, injects what crashed operations
// leave behind (an orphan inode, a link count one too high) and what they
// must never leave (a name of a missing inode), and checks that cairn fsck
// reports exactly those, repairs them and then finds the volume clean.
func TestFsck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fsck")
	startUp(t, dir, "--mount", "")
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if len(v.Partitions()) < 2 {
		t.Fatalf("volume has %d meta partitions, need 2", len(v.Partitions()))
	}

	// A small tree: directories, files, a hard link, a symlink.
	d, err := v.Mkdir(ctx, client.RootIno, "dir", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := v.Mkdir(ctx, d.Ino, "sub", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*client.Attr
	for _, name := range []string{"a", "b", "c", "d"} {
		f, err := v.Create(ctx, sub.Ino, name, 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if _, err := v.Link(ctx, files[0].Ino, d.Ino, "a-link"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Symlink(ctx, client.RootIno, "sym", "dir/sub/a", 0, 0); err != nil {
		t.Fatal(err)
	}
	clean := runFsck(t, dir, 0)
	if len(clean.Findings) != 0 || !clean.Clean || clean.Inodes < 8 {
		t.Fatalf("fresh tree: %+v", clean)
	}

	// Inject through the meta partitions directly.
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := masterclient.New(l.MasterAddrs(), adminTLS(t, dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	var resp *pb.GetMapResponse
	if err := mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cm := resp.GetMap()
	pool := redirect.NewPool(adminTLS(t, dir), nil)
	defer pool.Close()
	meta := metaclient.New(pool, func(node uint64) (string, bool) {
		n, ok := cm.GetNodes()[node]
		return n.GetAddr(), ok && n.GetAddr() != ""
	})
	part := func(id uint64) *pb.Partition {
		p, ok := cm.GetPartitions()[id]
		if !ok {
			t.Fatalf("partition %d not in the map", id)
		}
		return p
	}
	reqID := uint64(time.Now().UnixNano())
	txn := func(p uint64, ops ...*metapb.Op) *metapb.TxnResult {
		t.Helper()
		reqID++
		res, err := meta.Txn(ctx, part(p), &metapb.Txn{Ops: ops, RequestId: reqID})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetErrno() != 0 {
			t.Fatalf("txn on %d: errno %d: %s", p, res.GetErrno(), res.GetMessage())
		}
		return res
	}

	// 1. An inode with one link and no name: a create whose name never came.
	parts := v.Partitions()
	res := txn(parts[len(parts)-1], &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{
		Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: 0o644}}})
	orphan := res.GetResults()[0].GetInode()
	if orphan.GetNlink() != 1 {
		t.Fatalf("created inode has nlink %d", orphan.GetNlink())
	}
	// 2. A link count one too high: a link whose name never came.
	tooHigh := files[1].Ino
	txn(v.HomeOf(tooHigh), &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: tooHigh, Delta: 1}}})
	// The default grace period leaves the fresh inodes alone. (A name has no
	// time of its own; a dangling one is checked again just before repair.)
	held := runFsck(t, dir, 1, "--repair")
	if len(held.Findings) != 2 {
		t.Fatalf("after two injections: %+v", held)
	}
	for _, r := range held.Repairs {
		if r.Applied {
			t.Fatalf("repaired within the grace period: %+v", held)
		}
	}

	// 3. A name pointing at nothing. A partition refuses a name of a
	// missing inode of its own range, so the made-up inode number is in
	// another partition's range.
	ghostPart := v.RouteName(client.RootIno, "ghost")
	var ghostIno uint64
	for _, id := range parts {
		if id == ghostPart {
			continue
		}
		p := part(id)
		ghostIno = p.GetInodeStart() + 1<<20
		if end := p.GetInodeEnd(); end != 0 && ghostIno > end {
			ghostIno = end
		}
		break
	}
	txn(ghostPart, &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
		Parent: client.RootIno, Name: []byte("ghost"), Ino: ghostIno, Type: metapb.FileType_FILE_TYPE_REGULAR}}})

	found := runFsck(t, dir, 1, "--grace", "0s")
	var got []string
	for _, f := range found.Findings {
		switch f.Kind {
		case "orphan", "nlink-mismatch":
			got = append(got, f.Kind+" "+u64(f.Ino))
		case "dangling-name":
			if len(f.Dentries) != 1 {
				t.Fatalf("dangling name finding %+v", f)
			}
			got = append(got, f.Kind+" "+f.Dentries[0].Name+" "+u64(f.Dentries[0].Ino))
		default:
			got = append(got, f.Kind)
		}
	}
	slices.Sort(got)
	want := []string{"dangling-name ghost " + u64(ghostIno), "nlink-mismatch " + u64(tooHigh), "orphan " + u64(orphan.GetIno())}
	if !slices.Equal(got, want) {
		t.Fatalf("findings %q, want %q", got, want)
	}

	repaired := runFsck(t, dir, 0, "--repair", "--grace", "0s")
	if len(repaired.Repairs) != 3 || !repaired.Clean {
		t.Fatalf("repair: %+v", repaired)
	}
	for _, r := range repaired.Repairs {
		if !r.Applied {
			t.Fatalf("not applied: %s", r.Reason)
		}
	}
	after := runFsck(t, dir, 0)
	if len(after.Findings) != 0 {
		t.Fatalf("after repair: %+v", after)
	}
	if a, err := v.GetAttr(ctx, tooHigh); err != nil || a.Nlink != 1 {
		t.Fatalf("repaired file: %+v, %v", a, err)
	}
	if _, err := v.Lookup(ctx, client.RootIno, "ghost"); err == nil {
		t.Fatal("the dangling name is still there")
	}
	// The human-readable form of a clean run.
	r := cairn(t, "fsck", "default", "--data-dir", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "clean") {
		t.Fatalf("fsck: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Usage errors exit 2.
	if r := cairn(t, "fsck", "--data-dir", dir); r.code != 2 {
		t.Fatalf("fsck without a volume: exit %d", r.code)
	}
}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }
