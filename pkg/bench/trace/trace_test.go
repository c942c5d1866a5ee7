package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestEventRoundTrip(t *testing.T) {
	events := []Event{
		{Start: 10, Dur: 5, TID: 7, Op: OpOpen, Handle: 1, Flags: syscall.O_CREAT | syscall.O_WRONLY, Mode: 0o644, Path: "/a b/c"},
		{Start: 20, Dur: 1000, TID: 7, Op: OpWrite, Result: 4096, Handle: 1, Offset: 8192, Size: 4096, Path: "/a b/c"},
		{Start: 30, TID: 8, Op: OpStat, Result: -2, Size: -1, Path: "/weird\tname\n%25"},
		{Start: 31, TID: 8, Op: OpStat, Size: 12, Mode: syscall.S_IFREG | 0o600, Path: "/x"},
		{Start: 40, TID: 8, Op: OpRename, Path: "/x", Path2: "/y"},
		{Start: 50, TID: 9, Op: OpSymlink, Path: "/l", Path2: "../t\x7f"},
		{Start: 60, TID: 7, Op: OpClose, Handle: 1, Path: "/a b/c"},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Root: "/mnt/x", Source: "test", Host: "h", Started: time.Unix(100, 5).UTC(), Extra: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if err := w.Write(&events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")[6:] {
		if n := strings.Count(l, "\t"); n != 11 {
			t.Fatalf("record %q has %d tabs, want 11", l, n)
		}
	}
	tr, err := Read(&buf, 100)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Header.Root != "/mnt/x" || tr.Header.Source != "test" || tr.Header.Extra["k"] != "v" || !tr.Header.Started.Equal(time.Unix(100, 5)) {
		t.Fatalf("header %+v", tr.Header)
	}
	if len(tr.Events) != len(events) {
		t.Fatalf("%d events back, want %d", len(tr.Events), len(events))
	}
	for i := range events {
		if tr.Events[i] != events[i] {
			t.Errorf("event %d: got %+v, want %+v", i, tr.Events[i], events[i])
		}
	}
}

func TestReadRejectsBadInput(t *testing.T) {
	rec := func(fields ...string) string { return Magic + "\n" + strings.Join(fields, "\t") + "\n" }
	good := []string{"0", "1", "1", "stat", "0", "0", "0", "-1", "0", "0", "/a", ""}
	with := func(i int, v string) string {
		f := append([]string(nil), good...)
		f[i] = v
		return rec(f...)
	}
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty input"},
		{"no magic", "hello\n", "not a cairn trace"},
		{"few fields", Magic + "\n0\t1\tstat\n", "3 fields, want 12"},
		{"unknown op", with(3, "frobnicate"), `unknown op "frobnicate"`},
		{"bad start", with(0, "x"), "start_ns"},
		{"negative duration", with(1, "-4"), "negative duration"},
		{"relative path", with(10, "a"), "not absolute"},
		{"bad escape", with(10, "/a%zz"), "bad escape"},
		{"bad mode", with(9, "9"), "mode"},
		{"rename without target", with(3, "rename"), "without a second path"},
		{"close without handle", with(3, "close"), "close without a handle"},
		{"negative offset", with(6, "-1"), "negative offset"},
		{"too many", rec(good...) + strings.Join(good, "\t") + "\n", "more than 1 records"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in), 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Errors name the line.
	_, err := Read(strings.NewReader(Magic+"\n# root=/x\n\n"+strings.Join(good, "\t")+"\nbad\n"), 10)
	if err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Fatalf("error %v, want it to name line 5", err)
	}
}

func TestReadSortsByStart(t *testing.T) {
	in := Magic + "\n" +
		"30\t0\t1\tstat\t0\t0\t0\t-1\t0\t0\t/c\t\n" +
		"10\t0\t1\tstat\t0\t0\t0\t-1\t0\t0\t/a\t\n" +
		"20\t0\t1\tstat\t0\t0\t0\t-1\t0\t0\t/b\t\n"
	tr, err := Read(strings.NewReader(in), 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tr.Events {
		got = append(got, e.Path)
	}
	if strings.Join(got, ",") != "/a,/b,/c" {
		t.Fatalf("order %v", got)
	}
}

type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.n++
	if f.n > 1 {
		return 0, syscall.ENOSPC
	}
	return len(p), nil
}

func TestRecorderConcurrentAndErrors(t *testing.T) {
	var buf bytes.Buffer
	r, err := NewRecorder(&buf, Header{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				h := r.NewHandle()
				r.Record(time.Now(), Event{Op: OpOpen, TID: int64(g), Handle: h, Path: fmt.Sprintf("/g%d/f%d", g, i)})
			}
		}()
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r.Record(time.Now(), Event{Op: OpStat, Path: "/late"}) // dropped after Close
	tr, err := Read(&buf, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Events) != 4000 {
		t.Fatalf("%d records, want 4000", len(tr.Events))
	}
	seen := map[uint64]bool{}
	for _, e := range tr.Events {
		if seen[e.Handle] {
			t.Fatalf("handle %d reused", e.Handle)
		}
		seen[e.Handle] = true
	}

	// A failing writer: Record keeps going, Close reports the first error.
	fw := &failingWriter{}
	r, err = NewRecorder(fw, Header{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 3000)
	for i := 0; i < 200; i++ {
		r.Record(time.Now(), Event{Op: OpStat, Path: "/" + long})
	}
	if err := r.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close error %v, want ENOSPC", err)
	}
}

func TestResultOf(t *testing.T) {
	tests := []struct {
		n    int64
		err  error
		want int64
	}{
		{5, nil, 5},
		{-3, nil, 0},
		{0, syscall.ENOENT, -2},
		{0, &fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, -13},
		{0, fs.ErrNotExist, -2},
		{0, fs.ErrExist, -17},
		{0, errors.New("other"), -5},
		{0, os.ErrPermission, -13},
	}
	for _, tc := range tests {
		if got := ResultOf(tc.n, tc.err); got != tc.want {
			t.Errorf("ResultOf(%d, %v) = %d, want %d", tc.n, tc.err, got, tc.want)
		}
	}
}

func TestCompute(t *testing.T) {
	ev := []Event{
		{Start: 0, Dur: 10, TID: 1, Op: OpOpen, Handle: 1, Path: "/f"},
		{Start: 10, Dur: 10, TID: 1, Op: OpRead, Handle: 1, Path: "/f", Offset: 0, Size: 4096, Result: 4096},
		{Start: 20, Dur: 10, TID: 1, Op: OpRead, Handle: 1, Path: "/f", Offset: 4096, Size: 4096, Result: 4096},
		{Start: 30, Dur: 10, TID: 1, Op: OpRead, Handle: 1, Path: "/f", Offset: 100000, Size: 4096, Result: 1000},
		{Start: 40, Dur: 10, TID: 2, Op: OpOpen, Handle: 2, Path: "/g", Flags: syscall.O_CREAT},
		{Start: 50, Dur: 10, TID: 2, Op: OpWrite, Handle: 2, Path: "/g", Offset: 0, Size: 512, Result: 512},
		{Start: 60, Dur: 10, TID: 2, Op: OpStat, Path: "/nope", Result: -2},
		{Start: 70, Dur: 30, TID: 1, Op: OpClose, Handle: 1, Path: "/f"},
	}
	s := Compute(ev)
	checks := []struct {
		name      string
		got, want int64
	}{
		{"records", int64(s.Records), 8},
		{"duration", int64(s.Duration), 100},
		{"threads", int64(s.Threads), 2},
		{"handles", int64(s.Handles), 2},
		{"paths", int64(s.Paths), 3},
		{"errors", s.Errors, 1},
		{"reads", s.Reads, 3},
		{"writes", s.Writes, 1},
		{"read bytes", s.ReadBytes, 9192},
		{"write bytes", s.WriteBytes, 512},
		{"seq reads", s.SeqReads, 2},
		{"random reads", s.RandomReads, 1},
		{"seq writes", s.SeqWrites, 1},
		{"metadata ops", s.MetadataOps, 2},
		{"files read", int64(s.FilesRead), 1},
		{"files written", int64(s.FilesWritten), 1},
		{"median read size", s.ReadSizes.Median(), 4096},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if len(s.Ops) != 5 || s.Ops[0].Op != OpOpen || s.Ops[0].Count != 2 {
		t.Errorf("ops %+v", s.Ops)
	}
	sug := s.Suggest()
	if sug.Kind != "mixed" || sug.Values[0][1] != "0.95" {
		t.Errorf("suggestion %+v", sug)
	}
	if k := Compute([]Event{{Op: OpStat, Path: "/a"}, {Op: OpMkdir, Path: "/b"}}).Suggest().Kind; k != "metadata" {
		t.Errorf("metadata-only trace suggests %q", k)
	}
}

func TestPrestate(t *testing.T) {
	enoent := -int64(syscall.ENOENT)
	tests := []struct {
		name   string
		events []Event
		want   []Entry
	}{
		{"read of an existing file, size from reads", []Event{
			{Op: OpOpen, Handle: 1, Path: "/src/a.c"},
			{Op: OpRead, Handle: 1, Path: "/src/a.c", Offset: 0, Size: 4096, Result: 4096},
			{Op: OpRead, Handle: 1, Path: "/src/a.c", Offset: 4096, Size: 4096, Result: 100},
		}, []Entry{{Path: "/src", Dir: true}, {Path: "/src/a.c", Size: 4196}}},
		{"stat gives type and size", []Event{
			{Op: OpStat, Path: "/d", Mode: syscall.S_IFDIR | 0o755, Size: 4096},
			{Op: OpStat, Path: "/d/f", Mode: syscall.S_IFREG | 0o644, Size: 77},
		}, []Entry{{Path: "/d", Dir: true}, {Path: "/d/f", Size: 77}}},
		{"created files are not preexisting", []Event{
			{Op: OpMkdir, Path: "/out"},
			{Op: OpOpen, Handle: 1, Flags: syscall.O_CREAT | syscall.O_WRONLY, Path: "/out/x"},
			{Op: OpWrite, Handle: 1, Path: "/out/x", Size: 10, Result: 10},
			{Op: OpStat, Path: "/out/x", Mode: syscall.S_IFREG, Size: 10},
		}, nil},
		{"failed lookup means absent", []Event{
			{Op: OpStat, Path: "/missing", Result: enoent},
			{Op: OpOpen, Handle: 1, Flags: syscall.O_CREAT, Path: "/missing"},
		}, nil},
		{"removed and renamed files existed", []Event{
			{Op: OpUnlink, Path: "/old"},
			{Op: OpRename, Path: "/a", Path2: "/b"},
			{Op: OpStat, Path: "/b", Mode: syscall.S_IFREG, Size: 5},
			{Op: OpRmdir, Path: "/emptydir"},
		}, []Entry{{Path: "/a"}, {Path: "/emptydir", Dir: true}, {Path: "/old"}}},
		{"mkdir EEXIST", []Event{
			{Op: OpMkdir, Path: "/there", Result: -int64(syscall.EEXIST)},
		}, []Entry{{Path: "/there", Dir: true}}},
		{"writes hide the initial size", []Event{
			{Op: OpOpen, Handle: 1, Flags: syscall.O_RDWR, Path: "/f"},
			{Op: OpWrite, Handle: 1, Path: "/f", Offset: 0, Size: 10, Result: 10},
			{Op: OpRead, Handle: 1, Path: "/f", Offset: 0, Size: 100000, Result: 50000},
		}, []Entry{{Path: "/f"}}},
		{"a file used as a parent is a directory", []Event{
			{Op: OpStat, Path: "/p", Size: -1},
			{Op: OpStat, Path: "/p/q", Mode: syscall.S_IFREG, Size: 3},
		}, []Entry{{Path: "/p", Dir: true}, {Path: "/p/q", Size: 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Prestate(tc.events)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
