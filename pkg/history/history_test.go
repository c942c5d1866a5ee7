package history

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
)

func TestValidate(t *testing.T) {
	good := Op{Process: 1, Host: "c1", Kind: Write, Key: "r/1", Value: 5, Start: 10, End: 20, Outcome: OK}
	for _, tc := range []struct {
		name string
		edit func(*Op)
		want string // "" for valid
	}{
		{"valid write", func(*Op) {}, ""},
		{"valid unknown ending early", func(op *Op) { op.Outcome = Unknown; op.End = 0 }, ""},
		{"valid rename", func(op *Op) { op.Kind = Rename; op.Value = 0; op.Name = "a"; op.To = "b" }, ""},
		{"valid list", func(op *Op) { op.Kind = List; op.Value = 0; op.Names = []string{"a"}; op.Final = true }, ""},
		{"valid corrupt read", func(op *Op) { op.Kind = Read; op.Value = 0; op.Corrupt = true }, ""},
		{"unknown kind", func(op *Op) { op.Kind = "truncate" }, "unknown kind"},
		{"unknown outcome", func(op *Op) { op.Outcome = "info" }, "unknown outcome"},
		{"no key", func(op *Op) { op.Key = "" }, "no key"},
		{"negative process", func(op *Op) { op.Process = -1 }, "negative process"},
		{"negative start", func(op *Op) { op.Start = -1 }, "negative start"},
		{"end before start", func(op *Op) { op.End = 9 }, "end 9 before start 10"},
		{"failed, end before start", func(op *Op) { op.Outcome = Fail; op.End = 9 }, "before start"},
		{"create without name", func(op *Op) { op.Kind = Create; op.Value = 0 }, "no entry name"},
		{"rename without target", func(op *Op) { op.Kind = Rename; op.Value = 0; op.Name = "a" }, "no target"},
		{"name on a write", func(op *Op) { op.Name = "a" }, "entry name"},
		{"target on a create", func(op *Op) { op.Kind = Create; op.Value = 0; op.Name = "a"; op.To = "b" }, "rename target"},
		{"values on a read", func(op *Op) { op.Kind = Read; op.Values = []uint64{1} }, "values on"},
		{"names on a stat", func(op *Op) { op.Kind = Stat; op.Value = 0; op.Name = "a"; op.Names = []string{} }, "names on"},
		{"corrupt write", func(op *Op) { op.Corrupt = true }, "corrupt on"},
		{"final write", func(op *Op) { op.Final = true }, "final on"},
		{"stat value 2", func(op *Op) { op.Kind = Stat; op.Name = "a"; op.Value = 2 }, "stat value 2"},
		{"value on an unlink", func(op *Op) { op.Kind = Unlink; op.Name = "a" }, "value 5"},
	} {
		op := good.Clone()
		tc.edit(&op)
		err := op.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestRecordAndReadRoundTrip(t *testing.T) {
	ops := []Op{
		{Process: 2, Host: "c2", Kind: Read, Key: "r/1", Value: 7, Start: 30, End: 40, Outcome: OK, Final: true},
		{Process: 1, Host: "c1", Kind: Write, Key: "r/1", Value: 7, Start: 10, End: 20, Outcome: OK},
		{Process: 0, Host: "c1", Kind: Append, Key: "a/0", Value: 3, Start: 10, End: 1 << 40, Outcome: Unknown, Errno: "ETIMEDOUT"},
		{Process: 0, Host: "c1", Kind: ReadAppends, Key: "a/0", Values: []uint64{3, 4}, Start: 50, End: 60, Outcome: OK},
		{Process: 3, Host: "c2", Kind: Create, Key: "d", Name: "x <&>", Start: 5, End: 6, Outcome: Fail, Errno: "EEXIST"},
		{Process: 3, Host: "c2", Kind: Rename, Key: "d", Name: "x", To: "y", Start: 7, End: 8, Outcome: OK},
		{Process: 3, Host: "c2", Kind: List, Key: "d", Names: []string{"y"}, Start: 9, End: 9, Outcome: OK},
		{Process: 3, Host: "c2", Kind: Read, Key: "r/2", Corrupt: true, Start: 11, End: 12, Outcome: OK},
	}
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	for _, op := range ops {
		if err := r.Record(op); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(ops) {
		t.Fatalf("%d lines, want %d", n, len(ops))
	}
	got, err := ReadOps(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Errorf("ReadOps returned\n%v\nwant (file order)\n%v", got, ops)
	}
	sorted := r.Ops()
	for i := 1; i < len(sorted); i++ {
		a, b := sorted[i-1], sorted[i]
		if a.Start > b.Start || a.Start == b.Start && a.Process > b.Process {
			t.Errorf("Ops not sorted by start then process at %d: %v then %v", i, a, b)
		}
	}
	sorted[3].Values = append(sorted[3].Values, 99) // a copy: the Recorder must not see it
	for _, op := range r.Ops() {
		if op.Kind == ReadAppends && len(op.Values) != 2 {
			t.Errorf("Ops shares slices with the Recorder: %v", op)
		}
	}
	if err := r.Record(ops[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close: %v, want ErrClosed", err)
	}
}

// TestRecorderConcurrent records from many goroutines at once (run with
// -race): every op is in memory once and on its own whole line.
func TestRecorderConcurrent(t *testing.T) {
	var buf bytes.Buffer
	bw := bufio.NewWriterSize(&buf, 256) // small, so that lines straddle flushes
	r := NewRecorder(bw)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for p := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				op := Op{Process: p, Host: fmt.Sprintf("c%d", p%2), Kind: Append, Key: fmt.Sprintf("a/%d", p),
					Value: uint64(p*each + i + 1), Start: int64(i * 10), End: int64(i*10 + 5), Outcome: OK}
				if err := r.Record(op); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					_ = r.Ops() // readers race with writers
				}
			}
		}()
	}
	wg.Wait()
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	read, err := ReadOps(&buf)
	if err != nil {
		t.Fatal(err)
	}
	mem := r.Ops()
	if len(read) != workers*each || len(mem) != workers*each {
		t.Fatalf("read %d ops, %d in memory, want %d", len(read), len(mem), workers*each)
	}
	seen := map[uint64]bool{}
	for _, op := range read {
		if seen[op.Value] {
			t.Errorf("value %d recorded twice", op.Value)
		}
		seen[op.Value] = true
	}
	sort.Slice(read, func(i, j int) bool { return read[i].Value < read[j].Value })
	sort.Slice(mem, func(i, j int) bool { return mem[i].Value < mem[j].Value })
	if !reflect.DeepEqual(read, mem) {
		t.Error("the file and memory hold different ops")
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

func TestRecorderErrors(t *testing.T) {
	op := Op{Process: 1, Kind: Write, Key: "r", Value: 1, Start: 1, End: 2, Outcome: OK}
	r := NewRecorder(&failingWriter{n: 1})
	if err := r.Record(op); err != nil {
		t.Fatal(err)
	}
	if err := r.Record(op); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("second Record: %v, want the write error", err)
	}
	if err := r.Record(op); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Record after a write error: %v, want it again", err)
	}
	if err := r.Close(); err == nil {
		t.Error("Close after a write error: nil")
	}
	if n := len(r.Ops()); n != 3 {
		t.Errorf("%d ops in memory, want 3 (memory keeps recording)", n)
	}

	bad := op
	bad.End = 0
	m := NewRecorder(nil)
	if err := m.Record(bad); err == nil || !strings.Contains(err.Error(), "before start") {
		t.Errorf("Record of a malformed op: %v", err)
	}
	if len(m.Ops()) != 0 {
		t.Error("a malformed op was kept")
	}
}

func TestReadErrors(t *testing.T) {
	ok := `{"process":1,"host":"c1","kind":"write","key":"r","value":3,"start":1,"end":2,"outcome":"ok"}`
	for _, tc := range []struct {
		name, in, want string
	}{
		{"malformed json", ok + "\n{\"process\":1,\n", "line 2"},
		{"not an object", ok + "\n\n[1,2]\n", "line 3"},
		{"unknown kind", strings.Replace(ok, `"write"`, `"truncate"`, 1), `line 1: unknown kind "truncate"`},
		{"unknown outcome", ok + "\n" + strings.Replace(ok, `"ok"`, `"info"`, 1), `line 2: write: unknown outcome "info"`},
		{"end before start", strings.Replace(ok, `"end":2`, `"end":0`, 1), "line 1: write r: end 0 before start 1"},
		{"unknown field", strings.Replace(ok, `"value"`, `"vaule"`, 1), `line 1: json: unknown field "vaule"`},
		{"trailing data", ok + "}", "line 1: trailing data"},
		{"two objects", ok + ok, "line 1: trailing data"},
		{"wrong type", strings.Replace(ok, `"value":3`, `"value":-3`, 1), "line 1: json"},
		{"truncated last line", ok + "\n" + ok[:40], "line 2"},
		{"missing key", strings.Replace(ok, `"key":"r"`, `"key":""`, 1), "line 1: write: no key"},
	} {
		ops, err := ReadOps(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReadOps = %d ops, %v; want an error containing %q", tc.name, len(ops), err, tc.want)
		}
	}
	ops, err := ReadOps(strings.NewReader("\n" + ok + "\r\n\n" + ok))
	if err != nil || len(ops) != 2 {
		t.Errorf("blank lines, CRLF, no final newline: %d ops, %v", len(ops), err)
	}
	ops, err = ReadOps(strings.NewReader(""))
	if err != nil || len(ops) != 0 {
		t.Errorf("empty history: %d ops, %v", len(ops), err)
	}
}

// FuzzReadOps checks that no input makes ReadOps panic, and that whatever it
// accepts is well formed and survives a Recorder round trip.
func FuzzReadOps(f *testing.F) {
	f.Add(`{"process":1,"host":"c1","kind":"write","key":"r","value":3,"start":1,"end":2,"outcome":"ok"}`)
	f.Add(`{"process":1,"kind":"list","key":"d","names":["a","b"],"start":1,"end":1,"outcome":"ok","final":true}` + "\n{")
	f.Add("\n\n[]\n")
	f.Fuzz(func(t *testing.T, in string) {
		ops, err := ReadOps(strings.NewReader(in))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		r := NewRecorder(&buf)
		for _, op := range ops {
			if err := r.Record(op); err != nil {
				t.Fatalf("ReadOps accepted %v, Record refuses it: %v", op, err)
			}
		}
		again, err := ReadOps(&buf)
		if err != nil || len(again) != len(ops) {
			t.Fatalf("round trip: %d ops, %v; want %d", len(again), err, len(ops))
		}
	})
}

// FuzzDecode checks that no bytes make the decoders panic, and that what
// decodes encodes back to the same bytes: a decoded value is exactly one
// value's block or records.
func FuzzDecode(f *testing.F) {
	f.Add(EncodeBlock(5, 32))
	f.Add(EncodeRecord(5))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, ok := DecodeBlock(b); ok && !allZero(b) && !bytes.Equal(EncodeBlock(v, len(b)), b) {
			t.Fatalf("%x decodes as %d, which encodes otherwise", b, v)
		}
		if vs, ok := DecodeRecords(b); ok {
			var enc []byte
			for _, v := range vs {
				enc = append(enc, EncodeRecord(v)...)
			}
			if !bytes.Equal(enc, b) {
				t.Fatalf("%x decodes as %v, which encodes otherwise", b, vs)
			}
		}
	})
}
