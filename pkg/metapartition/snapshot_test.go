package metapartition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// richState builds a partition that uses every part of the snapshot format.
func richState(t testing.TB) *Partition {
	t.Helper()
	p := world(t)
	mustRun(t, p, 20, createInode(reg, 0o600), createDentry(1, "big", 0, reg),
		appendExtents(0, 1<<20, ek(0, 1, 0, 4096), ek(8192, 2, 0, 4096), ek(1<<19, 3, 100, 1<<19)),
		setXattr(0, "user.x", "xv", 0), setXattr(0, "security.selinux", "ctx", 0))
	mustRun(t, p, 21, &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: chr, Mode: 0o600, Rdev: 0x0801}}},
		createDentry(3, "dev", 0, chr))
	mustRun(t, p, 22, truncate(5, 10000))                                     // frees extent parts
	mustRun(t, p, 23, deleteDentry(1, "f", 2, reg), link(2, -1))              // an orphan
	mustRun(t, p, 24, fence(3, 11), fence(77, 12), touchDir(3, 1, 5))         // fences, history
	mustRun(t, p, 25, setRange(1<<20), createDentry(1, "remote", 1<<40, dir)) // cut range, remote inode
	// A chunked file (inode 7) of three 10-byte chunks, its index entries,
	// a chunk drop by a truncate, a drop applied (a watermark), a dead entry
	// and a live one without references.
	c1, c2, c3, c4, c5 := chunkAt(1, 10, 100), chunkAt(2, 10, 110), chunkAt(3, 10, 120), chunkAt(4, 7, 130), chunkAt(5, 9, 140)
	mustRun(t, p, 26, createCDC(0o644), createDentry(1, "cdc", 0, reg),
		chunkRefs(0, ref(c1, 1, 0), ref(c2, 1, 0), ref(c3, 2, 0), ref(c4, 1, 0)), splice(0, 0, 0, 0, 0, c1, c2, c3))
	mustRun(t, p, 27, truncate(7, 15), chunkRefs(0, ref(c4, -1, 0)))
	mustRun(t, p, 28, chunkRefs(9, ref(c3, -1, 5)), chunkRefs(0, ref(c5, 1, 0), ref(c5, -1, 0)))
	mustRun(t, p, 29, chunkCollect(27, c4))
	return p
}

// queries collects every query's answer, for comparing two partitions.
func queries(p *Partition) string {
	var b strings.Builder
	s, e := p.Range()
	fmt.Fprintf(&b, "range %d %d max %d\n", s, e, p.MaxIno())
	for ino := uint64(1); ino <= p.MaxIno()+1; ino++ {
		in, errno := p.GetInode(ino)
		fmt.Fprintf(&b, "inode %d %v %v\n", ino, errno, prototextOrNil(in))
		xs, _ := p.ListXattr(ino)
		fmt.Fprintf(&b, "xattrs %v\n", xs)
		for _, d := range p.ReadDir(ino, "", 1<<20) {
			_, in, errno := p.Lookup(d.Parent, string(d.Name))
			fmt.Fprintf(&b, "dentry %v %v %v\n", prototextOrNil(d), errno, prototextOrNil(in))
		}
		fmt.Fprintf(&b, "children %d %v\n", p.CountChildren(ino), p.HasChildren(ino))
	}
	fmt.Fprintf(&b, "orphans %v\nfree %v\nfences %v\nstats %+v\n", p.Orphans(), p.FreeList(), p.Fences(), p.Stats(20))
	chunks, more := p.ScanChunks(chunker.Fingerprint{}, 1<<20)
	for _, c := range chunks {
		fmt.Fprintf(&b, "chunk %s\n", prototextOrNil(c))
	}
	for _, c := range p.CollectCandidates(math.MaxInt64, 1<<20) {
		fmt.Fprintf(&b, "candidate %s\n", prototextOrNil(c))
	}
	for _, c := range p.DeadChunks(1 << 20) {
		fmt.Fprintf(&b, "dead %s\n", prototextOrNil(c))
	}
	fmt.Fprintf(&b, "more %v chunk stats %+v watermark 9: %d\n", more, p.ChunkStats(), p.ChunkWatermark(9))
	return b.String()
}

func prototextOrNil(m proto.Message) string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return "nil"
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return fmt.Sprintf("%x", b)
}

func TestSnapshotRoundTrip(t *testing.T) {
	p := richState(t)
	data := snap(t, p)
	q := world(t) // a different state, to be replaced
	mustRun(t, q, 99, createInode(reg, 0), createDentry(1, "zzz", 0, reg))
	if err := q.Restore(data); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if !sameBytes(snap(t, q), data) {
		t.Error("snapshot of the restored partition differs")
	}
	if a, b := queries(p), queries(q); a != b {
		t.Errorf("queries differ after restore:\n%s\nvs\n%s", a, b)
	}
	// Both continue identically.
	for _, x := range []*Partition{p, q} {
		mustRun(t, x, 30, createInode(reg, 0o644), createDentry(1, "after", 0, reg), touchDir(3, 1, 5), evict(2))
	}
	if !sameBytes(snap(t, p), snap(t, q)) {
		t.Error("original and restored diverged")
	}
	if len(p.FreeList()) == 0 || len(p.Fences()) != 2 || p.MaxIno() != 8 {
		t.Errorf("rich state is not rich: free %v fences %v max %d", p.FreeList(), p.Fences(), p.MaxIno())
	}
}

// TestSnapshotDeterministic: equal states give equal bytes however they
// were reached (batching, insertion order, hence tree shape).
func TestSnapshotDeterministic(t *testing.T) {
	names := make([]string, 2000)
	for i := range names {
		names[i] = fmt.Sprintf("n%05d", (i*7919)%2000)
	}
	build := func(order []string, batched bool) []byte {
		p, err := New(1, 100)
		if err != nil {
			t.Fatal(err)
		}
		mustRun(t, p, 1, createInode(dir, 0o755))
		var txns []*metapb.Txn
		for i, n := range order {
			// Remote inodes, so that inode numbers do not depend on order.
			txns = append(txns, tx(createDentry(1, n, 1<<40+uint64(n[len(n)-1]), reg)))
			if !batched || len(txns) == 64 || i == len(order)-1 {
				for _, r := range applyBatch(t, p, 1, &metapb.Batch{NowNs: 5, Txns: txns}) {
					if r.Errno != 0 {
						t.Fatalf("create: %s", r.Message)
					}
				}
				txns = nil
			}
		}
		if p.Stats(0).Dentries != len(order) {
			t.Fatalf("%d dentries, want %d", p.Stats(0).Dentries, len(order))
		}
		return snap(t, p)
	}
	a := build(names, false)
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	b := build(reversed, true)
	if !sameBytes(a, b) {
		t.Error("equal states, different snapshots")
	}
}

func TestRestoreRejectsDamage(t *testing.T) {
	p := richState(t)
	data := snap(t, p)
	q := world(t)
	before := snap(t, q)
	check := func(what string, bad []byte) {
		t.Helper()
		err := q.Restore(bad)
		if err == nil {
			t.Fatalf("%s: Restore succeeded", what)
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: error %v does not wrap ErrCorrupt", what, err)
		}
		if !sameBytes(before, snap(t, q)) {
			t.Fatalf("%s: failed Restore changed the partition", what)
		}
	}
	for n := range len(data) {
		check(fmt.Sprintf("truncated to %d", n), data[:n])
	}
	for i := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := slices.Clone(data)
			bad[i] ^= bit
			check(fmt.Sprintf("bit %#x of byte %d flipped", bit, i), bad)
		}
	}
	check("appended byte", append(slices.Clone(data), 0))
}

// snapBuilder writes snapshots by hand, to craft ones that pass the
// checksum but break an invariant.
type snapBuilder struct {
	b  []byte
	v2 bool // version 2: inodes carry a parent pointer
}

func (s *snapBuilder) fp(n byte) *snapBuilder {
	f := testFP(n)
	s.b = append(s.b, f[:]...)
	return s
}

func (s *snapBuilder) raw(b ...byte) *snapBuilder {
	s.b = append(s.b, b...)
	return s
}

func (s *snapBuilder) u(vs ...uint64) *snapBuilder {
	for _, v := range vs {
		s.b = binary.AppendUvarint(s.b, v)
	}
	return s
}

func (s *snapBuilder) str(v string) *snapBuilder {
	s.u(uint64(len(v)))
	s.b = append(s.b, v...)
	return s
}

func (s *snapBuilder) bytes() []byte {
	return binary.LittleEndian.AppendUint32(slices.Clone(s.b), crc32.Checksum(s.b, castagnoli))
}

func header(version, start, end, maxIno, freeSeq uint64) *snapBuilder {
	s := &snapBuilder{b: []byte(snapMagic), v2: version >= 2}
	return s.u(version, start, end, maxIno, freeSeq)
}

// inodeRec appends a regular-file inode record: no times, no extras.
func (s *snapBuilder) inodeRec(ino uint64, typ metapb.FileType, perm, nlink, size uint64) *snapBuilder {
	s.u(ino, uint64(typ), perm, 0, 0, nlink, size, 0, 0, 0, 0, 0) // ... rdev 0
	if s.v2 {
		s.u(0) // parent
	}
	s.str("") // target
	return s
}

func TestRestoreValidates(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"valid minimal", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).bytes(), true},
		{"valid with records", header(3, 1, 0, 2, 1).
			u(2).inodeRec(1, dir, 0o755, 2, 0).u(0, 0).inodeRec(2, reg, 0o644, 0, 10).u(1, 0, 7, 1, 0, 10).u(0).
			u(1, 1).str("a").u(2, uint64(reg)).
			u(1, 1, 9).
			u(1, 0, 2, 7, 1, 0, 5).
			u(1, 1, 3).u(0).u(0).bytes(), true},
		// routing: self 7, not sealed, v2 with slots [7 8] and an override of
		// "x" to 8, no previous.
		{"valid routing", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 2, 2, 7, 8, 1).str("x").u(2, 8).u(0).bytes(), true},
		{"valid routing change", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 1, 2, 1, 7, 0).u(1, 1, 1, 8, 0).bytes(), true},
		{"routing flag 2", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(2).bytes(), false},
		{"routing self 0", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 0, 0, 1, 1, 7, 0, 0).bytes(), false},
		{"routing version 0", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 0, 1, 7, 0, 0).bytes(), false},
		{"routing without slots", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 0, 0, 0).bytes(), false},
		{"routing slot owner 0", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 1, 0, 0, 0).bytes(), false},
		{"routing sealed without previous", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 1, 1, 1, 7, 0, 0).bytes(), false},
		{"routing previous not older", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 1, 7, 0, 1, 1, 1, 7, 0).bytes(), false},
		{"routing bad kind", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 1, 7, 1).str("x").u(3, 0).u(0).bytes(), false},
		{"routing override outside", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 1, 7, 1).str("x").u(2, 9).u(0).bytes(), false},
		{"routing exceptions out of order", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 1, 7, 2).str("y").u(1, 0).str("x").u(1, 0).u(0).bytes(), false},
		{"routing exception repeated", header(3, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).u(1, 7, 0, 1, 1, 7, 2).str("x").u(1, 0).str("x").u(1, 0).u(0).bytes(), false},
		// version 4: chunk index, chunk drops, chunked inodes.
		{"valid v4 minimal", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0, 0, 0).bytes(), true},
		// inode 1: a chunked file of size 15 with chunks of 10 and 10 bytes
		// (the second straddles the size), generation 3; a chunk drop at seq
		// 1; the index with two entries (one dead), a watermark.
		{"valid v4 chunks", header(4, 1, 0, 1, 2).
			u(1).inodeRec(1, reg, 0o644, 1, 15).u(0, 0).u(1, 3, 2).fp(1).u(10, 7, 1, 0).fp(2).u(10, 7, 1, 10).
			u(0, 0).u(1, 1, 1, 7, 1, 20, 10, 1).fp(3).u(0, 0).u(0).
			u(2).fp(1).u(10, 7, 1, 0, 1, 0).u(zz(5)).fp(4).u(9, 7, 2, 0, 0, 1).u(zz(6)).
			u(1, 9, 4).bytes(), true},
		{"v4 chunk starts at size", header(4, 1, 0, 1, 0).
			u(1).inodeRec(1, reg, 0o644, 1, 10).u(0, 0).u(1, 0, 2).fp(1).u(10, 7, 1, 0).fp(2).u(10, 7, 1, 10).
			u(0, 0, 0, 0, 0, 0, 0, 0).bytes(), false},
		{"v4 chunked directory", header(4, 1, 0, 1, 0).
			u(1).inodeRec(1, dir, 0o755, 2, 10).u(0, 0).u(1, 0, 1).fp(1).u(10, 7, 1, 0).
			u(0, 0, 0, 0, 0, 0, 0, 0).bytes(), false},
		{"v4 unknown layout", header(4, 1, 0, 1, 0).u(1).inodeRec(1, reg, 0o644, 1, 0).u(0, 0).u(2).u(0, 0, 0, 0, 0, 0, 0, 0).bytes(), false},
		{"v4 chunk size 0", header(4, 1, 0, 1, 0).
			u(1).inodeRec(1, reg, 0o644, 1, 10).u(0, 0).u(1, 0, 1).fp(1).u(0, 7, 1, 0).
			u(0, 0, 0, 0, 0, 0, 0, 0).bytes(), false},
		{"v4 chunk without location", header(4, 1, 0, 1, 0).
			u(1).inodeRec(1, reg, 0o644, 1, 10).u(0, 0).u(1, 0, 1).fp(1).u(10, 0, 1, 0).
			u(0, 0, 0, 0, 0, 0, 0, 0).bytes(), false},
		{"v4 fingerprint algorithm 0", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).
			u(1).raw(make([]byte, chunker.FingerprintSize)...).u(10, 7, 1, 0, 1, 0, 0).u(0).bytes(), false},
		{"v4 chunk drop flag 2", header(4, 1, 0, 0, 2).u(0, 0, 0).u(1, 1, 1, 7, 1, 0, 5, 2).u(0, 0, 0, 0, 0).bytes(), false},
		{"v4 chunk drop partition 0", header(4, 1, 0, 0, 2).u(0, 0, 0).u(1, 1, 1, 0, 1, 0, 5, 1).fp(1).u(0, 0, 0, 0, 0).bytes(), false},
		{"v4 chunk drop at seq 0", header(4, 1, 0, 0, 1).u(0, 0, 0).u(1, 0, 1, 7, 1, 0, 5, 1).fp(1).u(0, 0, 0, 0, 0).bytes(), false},
		{"v4 extent at seq 0", header(4, 1, 0, 0, 1).u(0, 0, 0).u(1, 0, 1, 7, 1, 0, 5, 0).u(0, 0, 0, 0, 0).bytes(), true},
		{"v4 dead entry with references", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).
			u(1).fp(1).u(10, 7, 1, 0, 1, 1, 0).u(0).bytes(), false},
		{"v4 entries out of order", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).
			u(2).fp(2).u(10, 7, 1, 0, 1, 0, 0).fp(1).u(10, 7, 1, 0, 1, 0, 0).u(0).bytes(), false},
		{"v4 entries repeated", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).
			u(2).fp(1).u(10, 7, 1, 0, 1, 0, 0).fp(1).u(10, 7, 1, 0, 1, 0, 0).u(0).bytes(), false},
		{"v4 dead flag 2", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).u(1).fp(1).u(10, 7, 1, 0, 0, 2, 0).u(0).bytes(), false},
		{"v4 watermark source 0", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0, 0).u(1, 0, 5).bytes(), false},
		{"v4 watermark seq 0", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0, 0).u(1, 3, 0).bytes(), false},
		{"v4 watermarks out of order", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0, 0).u(2, 3, 1, 2, 1).bytes(), false},
		{"v4 fingerprint cut short", header(4, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).u(1).raw(1, 2, 3).bytes(), false},
		{"version 5", header(5, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0, 0).bytes(), false},
		{"inode its own parent", header(2, 1, 0, 1, 0).u(1).u(1, uint64(reg), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1).str("").u(0, 0).u(0, 0, 0, 0, 0).bytes(), false},
		{"parent pointer on a file", header(2, 1, 0, 1, 0).u(1).u(1, uint64(reg), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7).str("").u(0, 0).u(0, 0, 0, 0, 0).bytes(), true},
		{"request id 0", header(2, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 1, 0).str("").bytes(), false},
		{"request repeated", header(2, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 2, 5).str("").u(5).str("").bytes(), false},
		{"request result garbage", header(2, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 1, 5).str("\xff").bytes(), false},
		{"range start 0", header(1, 0, 0, 0, 0).u(0, 0, 0, 0, 0).bytes(), false},
		{"empty range", header(1, 10, 5, 9, 0).u(0, 0, 0, 0, 0).bytes(), false},
		{"max inode beyond end", header(1, 1, 5, 6, 0).u(0, 0, 0, 0, 0).bytes(), false},
		{"inode beyond max", header(1, 1, 0, 1, 0).u(1).inodeRec(2, reg, 0, 1, 0).u(0, 0).u(0, 0, 0, 0).bytes(), false},
		{"inodes out of order", header(1, 1, 0, 3, 0).u(2).inodeRec(3, reg, 0, 1, 0).u(0, 0).inodeRec(2, reg, 0, 1, 0).u(0, 0).u(0, 0, 0, 0).bytes(), false},
		{"bad type", header(1, 1, 0, 1, 0).u(1).inodeRec(1, 9, 0, 1, 0).u(0, 0).u(0, 0, 0, 0).bytes(), false},
		{"mode with type bits", header(1, 1, 0, 1, 0).u(1).inodeRec(1, reg, 0o100644, 1, 0).u(0, 0).u(0, 0, 0, 0).bytes(), false},
		{"extent beyond size", header(1, 1, 0, 1, 0).u(1).inodeRec(1, reg, 0, 1, 5).u(1, 0, 7, 1, 0, 10).u(0).u(0, 0, 0, 0).bytes(), false},
		{"overlapping extents", header(1, 1, 0, 1, 0).u(1).inodeRec(1, reg, 0, 1, 50).u(2, 0, 7, 1, 0, 10, 5, 7, 2, 0, 10).u(0).u(0, 0, 0, 0).bytes(), false},
		{"empty extent", header(1, 1, 0, 1, 0).u(1).inodeRec(1, reg, 0, 1, 50).u(1, 0, 7, 1, 0, 0).u(0).u(0, 0, 0, 0).bytes(), false},
		{"extents on a directory", header(1, 1, 0, 1, 0).u(1).inodeRec(1, dir, 0, 2, 50).u(1, 0, 7, 1, 0, 10).u(0).u(0, 0, 0, 0).bytes(), false},
		{"xattrs out of order", header(1, 1, 0, 1, 0).u(1).inodeRec(1, reg, 0, 1, 0).u(0, 2).str("b").str("1").str("a").str("1").u(0, 0, 0, 0).bytes(), false},
		{"symlink without target", header(1, 1, 0, 1, 0).u(1).inodeRec(1, lnk, 0, 1, 0).u(0, 0).u(0, 0, 0, 0).bytes(), false},
		{"dentry with slash", header(1, 1, 0, 0, 0).u(0, 1, 1).str("a/b").u(5, uint64(reg)).u(0, 0, 0).bytes(), false},
		{"dentry to itself", header(1, 1, 0, 0, 0).u(0, 1, 1).str("a").u(1, uint64(dir)).u(0, 0, 0).bytes(), false},
		{"dentries out of order", header(1, 1, 0, 0, 0).u(0, 2, 1).str("b").u(5, uint64(reg)).u(1).str("a").u(5, uint64(reg)).u(0, 0, 0).bytes(), false},
		{"fence token 0", header(1, 1, 0, 0, 0).u(0, 0, 1, 5, 0, 0, 0).bytes(), false},
		{"free seq beyond counter", header(1, 1, 0, 0, 1).u(0, 0, 0, 1, 1, 0, 7, 1, 0, 5, 0).bytes(), false},
		{"touched op id 0", header(1, 1, 0, 0, 0).u(0, 0, 0, 0, 1, 1, 0).bytes(), false},
		{"touched repeated", header(1, 1, 0, 0, 0).u(0, 0, 0, 0, 2, 1, 3, 1, 3).bytes(), false},
		{"huge count", header(1, 1, 0, 0, 0).u(1 << 60).bytes(), false},
		{"trailing bytes", header(1, 1, 0, 0, 0).u(0, 0, 0, 0, 0, 0).bytes(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := world(t)
			before := snap(t, p)
			err := p.Restore(tc.data)
			if tc.ok {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				again := snap(t, p)
				if tc.data[len(snapMagic)] == snapVersion && !sameBytes(again, tc.data) {
					t.Errorf("re-snapshot differs from the hand-made snapshot")
				}
				// An older version is written in the current one, which
				// restores to the same state.
				q := world(t)
				if err := q.Restore(again); err != nil || !sameBytes(snap(t, q), again) || queries(p) != queries(q) {
					t.Errorf("re-snapshot does not restore to the same state: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Restore = %v, want an ErrCorrupt", err)
			}
			if !sameBytes(before, snap(t, p)) {
				t.Errorf("failed Restore changed the partition")
			}
		})
	}
}

// TestCloneIsolation: a Frozen does not see changes made after Clone.
func TestCloneIsolation(t *testing.T) {
	p := richState(t)
	want := snap(t, p)
	f := p.Clone()
	mutate(t, p, "m", 3000)
	var got bytes.Buffer
	n, err := f.WriteTo(&got)
	if err != nil || n != int64(got.Len()) {
		t.Fatalf("WriteTo = %d, %v (wrote %d)", n, err, got.Len())
	}
	if !sameBytes(got.Bytes(), want) {
		t.Fatal("the frozen copy changed with the live partition")
	}
	if sameBytes(snap(t, p), want) {
		t.Fatal("the live partition did not change")
	}
}

// mutate applies n files' worth of changes touching existing records too:
// creates (splitting tree nodes), setattrs, extents, xattrs, unlinks,
// evictions, fences and TouchDirs.
func mutate(t testing.TB, p *Partition, prefix string, n int) {
	t.Helper()
	for i := range n {
		now := int64(100 + i)
		name := fmt.Sprintf("%s%06d", prefix, i)
		ops := []*metapb.Op{
			createInode(reg, 0o644), createDentry(1, name, 0, reg),
			appendExtents(0, 10, ek(0, uint64(i), 0, 10)),
			touchDir(3, 0, uint64(i+1)),
		}
		switch i % 5 {
		case 0:
			ops = append(ops, setXattr(5, "user.i", name, 0), truncate(5, uint64(i)))
		case 1:
			ops = append(ops, fence(uint64(1_000_000+i), 1))
		case 2:
			ops = append(ops, deleteDentry(1, fmt.Sprintf("%s%06d", prefix, i-1), 0, reg), link(p.MaxIno(), -1), evict(p.MaxIno()))
		}
		if r := run(t, p, now, ops...); r.Errno != 0 {
			t.Fatalf("mutate %d: %s", i, r.Message)
		}
	}
}

// TestWriteToDuringApply runs WriteTo in another goroutine while the
// partition applies; run under -race it checks that the frozen copy shares
// nothing that Apply writes.
func TestWriteToDuringApply(t *testing.T) {
	p := richState(t)
	mutate(t, p, "a", 500)
	want := snap(t, p)
	f := p.Clone()
	var wg sync.WaitGroup
	results := make([][]byte, 3)
	for g := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b bytes.Buffer
			if _, err := f.WriteTo(&b); err != nil {
				t.Errorf("WriteTo: %v", err)
			}
			results[g] = b.Bytes()
		}()
	}
	mutate(t, p, "b", 1000)
	wg.Wait()
	for g, got := range results {
		if !sameBytes(got, want) {
			t.Errorf("writer %d: snapshot taken during Apply differs", g)
		}
	}
}

type failingWriter struct{ left int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if len(b) > w.left {
		n := w.left
		w.left = 0
		return n, io.ErrClosedPipe
	}
	w.left -= len(b)
	return len(b), nil
}

func TestWriteToReportsErrors(t *testing.T) {
	p := richState(t)
	mutate(t, p, "m", 2000) // more than one buffer's worth
	size := len(snap(t, p))
	for _, at := range []int{0, 10, snapFlushAt + 5, size - 2} {
		n, err := p.Clone().WriteTo(&failingWriter{left: at})
		if !errors.Is(err, io.ErrClosedPipe) || n != int64(at) {
			t.Errorf("failing at %d: WriteTo = %d, %v", at, n, err)
		}
	}
}
