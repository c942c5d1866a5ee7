package multiraft

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/multiraft/transportpb"
)

func memDB(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func ents(term uint64, lo, hi uint64) []*raftpb.Entry {
	var es []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		es = append(es, &raftpb.Entry{Term: proto.Uint64(term), Index: proto.Uint64(i), Type: raftpb.EntryNormal.Enum(), Data: []byte{byte(i)}})
	}
	return es
}

// stage runs fn against a fresh batch and commits it like a round does.
func stage(t *testing.T, db *pebble.DB, st *storage, fn func(b *pebble.Batch) error) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	if err := fn(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	st.commitStaged()
}

// The storage's view always equals what a fresh load of the DB sees; appends
// overwrite conflicting tails; snapshots truncate; keys stay under the prefix
// and other groups are untouched.
func TestStorageLogLifecycle(t *testing.T) {
	db := memDB(t)
	if err := db.Set([]byte("other-app-key"), []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	st, exists, err := loadStorage(db, 7)
	if err != nil || exists {
		t.Fatalf("empty group: exists %v err %v", exists, err)
	}
	if fi, _ := st.FirstIndex(); fi != 1 {
		t.Fatalf("first index %d", fi)
	}
	// Bootstrap-like snapshot at 1, then entries 2..10 at term 2.
	meta := &raftpb.SnapshotMetadata{Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}
	stage(t, db, st, func(b *pebble.Batch) error { return st.stageSnapshot(b, meta, []byte("snap1"), true) })
	stage(t, db, st, func(b *pebble.Batch) error { return st.stageEntries(b, ents(2, 2, 10)) })
	stage(t, db, st, func(b *pebble.Batch) error {
		return st.stageHardState(b, &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(6)})
	})
	// A conflicting tail from index 8 at term 3, shorter than before.
	stage(t, db, st, func(b *pebble.Batch) error { return st.stageEntries(b, ents(3, 8, 8)) })
	check := func(s *storage, first, last, lastTerm uint64) {
		t.Helper()
		if fi, _ := s.FirstIndex(); fi != first {
			t.Fatalf("first %d want %d", fi, first)
		}
		if li, _ := s.LastIndex(); li != last {
			t.Fatalf("last %d want %d", li, last)
		}
		if tm, _ := s.Term(last); tm != lastTerm {
			t.Fatalf("term(%d) %d want %d", last, tm, lastTerm)
		}
		es, err := s.Entries(first, last+1, 1<<30)
		if err != nil || uint64(len(es)) != last-first+1 {
			t.Fatalf("entries: %d, %v", len(es), err)
		}
		for i, e := range es {
			if e.GetIndex() != first+uint64(i) {
				t.Fatalf("entry %d has index %d", i, e.GetIndex())
			}
		}
		if _, err := s.Entries(first-1, last, 1<<30); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("entries below first: %v", err)
		}
		if _, err := s.Term(first - 2); first >= 2 && !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("term below snapshot: %v", err)
		}
		if _, err := s.Term(last + 1); !errors.Is(err, raft.ErrUnavailable) {
			t.Fatalf("term past last: %v", err)
		}
		// maxSize returns at least one entry, then stops.
		if es, _ := s.Entries(first, last+1, 1); len(es) != 1 {
			t.Fatalf("size-limited entries: %d", len(es))
		}
	}
	check(st, 2, 8, 3)
	if tm, _ := st.Term(7); tm != 2 {
		t.Fatalf("term(7) %d", tm)
	}
	re, exists, err := loadStorage(db, 7)
	if err != nil || !exists {
		t.Fatalf("reload: %v %v", exists, err)
	}
	check(re, 2, 8, 3)
	hs, cs, _ := re.InitialState()
	if hs.GetCommit() != 6 || hs.GetVote() != 1 || len(cs.GetVoters()) != 2 {
		t.Fatalf("initial state %v %v", hs, cs)
	}

	// A local snapshot at 5 truncates entries 2..5 only.
	meta5 := &raftpb.SnapshotMetadata{Index: proto.Uint64(5), Term: proto.Uint64(2), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}
	stage(t, db, st, func(b *pebble.Batch) error { return st.stageSnapshot(b, meta5, []byte("snap5"), false) })
	check(st, 6, 8, 3)
	re, _, _ = loadStorage(db, 7)
	check(re, 6, 8, 3)
	snap, err := re.Snapshot()
	if err != nil || !bytes.Equal(snap.GetData(), []byte("snap5")) || snap.GetMetadata().GetIndex() != 5 {
		t.Fatalf("snapshot %v %v", snap, err)
	}
	// A stored snapshot older than the latest membership is refused and a
	// fresh one requested.
	re.latestConf = func() *raftpb.ConfState { return &raftpb.ConfState{Voters: []uint64{1, 2, 3}} }
	if _, err := re.Snapshot(); !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) || !re.freshWanted {
		t.Fatalf("stale-membership snapshot: %v, fresh wanted %v", err, re.freshWanted)
	}
	// A received snapshot past the log replaces it entirely.
	meta20 := &raftpb.SnapshotMetadata{Index: proto.Uint64(20), Term: proto.Uint64(4), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}
	stage(t, db, st, func(b *pebble.Batch) error {
		if err := st.stageSnapshot(b, meta20, []byte("snap20"), true); err != nil {
			return err
		}
		return st.stageHardState(b, &raftpb.HardState{Term: proto.Uint64(4), Commit: proto.Uint64(20)})
	})
	if fi, _ := st.FirstIndex(); fi != 21 {
		t.Fatalf("first after received snapshot: %d", fi)
	}
	if li, _ := st.LastIndex(); li != 20 {
		t.Fatalf("last after received snapshot: %d", li)
	}
	re, _, err = loadStorage(db, 7)
	if err != nil {
		t.Fatal(err)
	}
	if li, _ := re.LastIndex(); li != 20 {
		t.Fatalf("reloaded last %d", li)
	}
	// Appends that do not fit are refused before anything is staged.
	if err := st.checkReady(&raft.Ready{Entries: ents(4, 23, 24)}); err == nil {
		t.Fatal("gap in the log accepted")
	}
	if err := st.checkReady(&raft.Ready{Entries: ents(4, 20, 21)}); err == nil {
		t.Fatal("append below the snapshot accepted")
	}
	// Destroy removes the group and only it.
	if err := destroyGroup(db, 7); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := loadStorage(db, 7); exists {
		t.Fatal("group still exists after destroy")
	}
	if v, c, err := db.Get([]byte("other-app-key")); err != nil || string(v) != "x" {
		t.Fatalf("other key: %q %v", v, err)
	} else {
		c.Close()
	}
}

// Corrupt stored state is reported, not panicked on.
func TestStorageRejectsCorruptState(t *testing.T) {
	db := memDB(t)
	if err := db.Set(entryKey(3, 5), []byte{9, 9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadStorage(db, 3); err == nil {
		t.Fatal("log starting at 5 with no snapshot accepted")
	}
	if err := db.Set(kindKey(4, kindHard), []byte{0xff, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadStorage(db, 4); err == nil {
		t.Fatal("garbage hard state accepted")
	}
	if _, err := decodeEntry(1, []byte{entryFormatV1, 0, 0, 0, 0, 0, 0, 0, 1, 99}); err == nil {
		t.Fatal("unknown entry type accepted")
	}
	if _, err := decodeEntryTerm(1, []byte{2}); err == nil {
		t.Fatal("short entry accepted")
	}
}

func TestKeyLayout(t *testing.T) {
	k := entryKey(0x0102, 0x0a0b)
	want := append([]byte(KeyPrefix), 0, 0, 0, 0, 0, 0, 1, 2, 'e', 0, 0, 0, 0, 0, 0, 0x0a, 0x0b)
	if !bytes.Equal(k, want) {
		t.Fatalf("entry key %q, want %q", k, want)
	}
	if entryIndexOf(k) != 0x0a0b {
		t.Fatal("entryIndexOf")
	}
	// Every key of a group sorts inside its span, and spans do not overlap.
	start, end := groupSpan(0x0102)
	for _, key := range [][]byte{k, kindKey(0x0102, kindHard), kindKey(0x0102, kindSnapMeta), kindKey(0x0102, kindSnapData), entryKey(0x0102, ^uint64(0))} {
		if bytes.Compare(key, start) < 0 || bytes.Compare(key, end) >= 0 {
			t.Fatalf("key %q outside the group span", key)
		}
	}
	next, _ := groupSpan(0x0103)
	if bytes.Compare(end, next) > 0 {
		t.Fatal("group spans overlap")
	}
}

// Batches survive the wire encoding; a malformed raft message is dropped
// alone.
func TestBatchCodec(t *testing.T) {
	b := &Batch{
		From: 1, To: 2, Incarnation: 77,
		Messages: []GroupMessage{{Group: 9, Message: &raftpb.Message{
			Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3),
			Entries: ents(3, 4, 5),
		}}},
		Heartbeats: []Heartbeat{
			{Group: 9, Term: 3, Commit: 5},
			{Group: 10, Term: 4, Response: true},
			{Group: 11, Term: 5, Commit: 6, Quiesce: true, Index: 6, LogTerm: 5},
		},
	}
	got := wireRoundTrip(b)
	if got.From != 1 || got.To != 2 || got.Incarnation != 77 || len(got.Messages) != 1 || len(got.Heartbeats) != 3 {
		t.Fatalf("round trip: %+v", got)
	}
	if !proto.Equal(got.Messages[0].Message, b.Messages[0].Message) || got.Messages[0].Group != 9 {
		t.Fatalf("message changed: %v", got.Messages[0])
	}
	for i := range b.Heartbeats {
		if got.Heartbeats[i] != b.Heartbeats[i] {
			t.Fatalf("heartbeat %d: %+v want %+v", i, got.Heartbeats[i], b.Heartbeats[i])
		}
	}
	pb, _ := encodeBatch(b)
	pb.Messages = append(pb.Messages, &transportpb.GroupMessage{Group: 9, Message: []byte{0xff, 0xff, 0xff}})
	dec, bad := decodeBatch(pb)
	if bad != 1 || len(dec.Messages) != 1 {
		t.Fatalf("malformed message: bad %d, kept %d", bad, len(dec.Messages))
	}
	// Heartbeat expansion gives back raft's message.
	m := b.Heartbeats[0].toMessage(1, 2)
	if m.GetType() != raftpb.MsgHeartbeat || m.GetCommit() != 5 || m.GetTerm() != 3 || m.GetFrom() != 1 || m.GetTo() != 2 {
		t.Fatalf("expanded heartbeat %v", m)
	}
	if r := b.Heartbeats[1].toMessage(2, 1); r.GetType() != raftpb.MsgHeartbeatResp {
		t.Fatalf("expanded response %v", r)
	}
	// Heartbeats with a context (ReadIndex) are not coalesced.
	if coalescible(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), Context: []byte("r")}) {
		t.Fatal("heartbeat with context coalesced")
	}
}

// FuzzDecodeBatch: arbitrary bytes never panic the decoder or the host.
func FuzzDecodeBatch(f *testing.F) {
	pb, _ := encodeBatch(&Batch{From: 2, To: 1, Heartbeats: []Heartbeat{{Group: 1, Term: 1}},
		Messages: []GroupMessage{{Group: 1, Message: &raftpb.Message{Type: raftpb.MsgVote.Enum(), From: proto.Uint64(2), To: proto.Uint64(1), Term: proto.Uint64(9)}}}})
	seed, _ := proto.Marshal(pb)
	f.Add(seed)
	c := newCluster(f, 1, 1, nil)
	c.addGroup(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		var pb transportpb.Batch
		if proto.Unmarshal(data, &pb) != nil {
			return
		}
		b, _ := decodeBatch(&pb)
		c.hosts[1].Deliver(b)
		c.hosts[1].processRound(false)
	})
}
