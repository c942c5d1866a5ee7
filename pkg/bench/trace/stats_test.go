package trace

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/optrace"
)

func TestCompute(t *testing.T) {
	ev := []optrace.Event{
		{Start: 0, Dur: 10, TID: 1, Op: optrace.OpOpen, Handle: 1, Path: "/f"},
		{Start: 10, Dur: 10, TID: 1, Op: optrace.OpRead, Handle: 1, Path: "/f", Offset: 0, Size: 4096, Result: 4096},
		{Start: 20, Dur: 10, TID: 1, Op: optrace.OpRead, Handle: 1, Path: "/f", Offset: 4096, Size: 4096, Result: 4096},
		{Start: 30, Dur: 10, TID: 1, Op: optrace.OpRead, Handle: 1, Path: "/f", Offset: 100000, Size: 4096, Result: 1000},
		{Start: 40, Dur: 10, TID: 2, Op: optrace.OpOpen, Handle: 2, Path: "/g", Flags: syscall.O_CREAT},
		{Start: 50, Dur: 10, TID: 2, Op: optrace.OpWrite, Handle: 2, Path: "/g", Offset: 0, Size: 512, Result: 512},
		{Start: 60, Dur: 10, TID: 2, Op: optrace.OpStat, Path: "/nope", Result: -2},
		{Start: 70, Dur: 30, TID: 1, Op: optrace.OpClose, Handle: 1, Path: "/f"},
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
	if len(s.Ops) != 5 || s.Ops[0].Op != optrace.OpOpen || s.Ops[0].Count != 2 {
		t.Errorf("ops %+v", s.Ops)
	}
	sug := s.Suggest()
	if sug.Kind != "mixed" || sug.Values[0][1] != "0.95" {
		t.Errorf("suggestion %+v", sug)
	}
	if k := Compute([]optrace.Event{{Op: optrace.OpStat, Path: "/a"}, {Op: optrace.OpMkdir, Path: "/b"}}).Suggest().Kind; k != "metadata" {
		t.Errorf("metadata-only trace suggests %q", k)
	}
}

func TestPrestate(t *testing.T) {
	enoent := -int64(syscall.ENOENT)
	tests := []struct {
		name   string
		events []optrace.Event
		want   []Entry
	}{
		{"read of an existing file, size from reads", []optrace.Event{
			{Op: optrace.OpOpen, Handle: 1, Path: "/src/a.c"},
			{Op: optrace.OpRead, Handle: 1, Path: "/src/a.c", Offset: 0, Size: 4096, Result: 4096},
			{Op: optrace.OpRead, Handle: 1, Path: "/src/a.c", Offset: 4096, Size: 4096, Result: 100},
		}, []Entry{{Path: "/src", Dir: true}, {Path: "/src/a.c", Size: 4196}}},
		{"stat gives type and size", []optrace.Event{
			{Op: optrace.OpStat, Path: "/d", Mode: syscall.S_IFDIR | 0o755, Size: 4096},
			{Op: optrace.OpStat, Path: "/d/f", Mode: syscall.S_IFREG | 0o644, Size: 77},
		}, []Entry{{Path: "/d", Dir: true}, {Path: "/d/f", Size: 77}}},
		{"created files are not preexisting", []optrace.Event{
			{Op: optrace.OpMkdir, Path: "/out"},
			{Op: optrace.OpOpen, Handle: 1, Flags: syscall.O_CREAT | syscall.O_WRONLY, Path: "/out/x"},
			{Op: optrace.OpWrite, Handle: 1, Path: "/out/x", Size: 10, Result: 10},
			{Op: optrace.OpStat, Path: "/out/x", Mode: syscall.S_IFREG, Size: 10},
		}, nil},
		{"failed lookup means absent", []optrace.Event{
			{Op: optrace.OpStat, Path: "/missing", Result: enoent},
			{Op: optrace.OpOpen, Handle: 1, Flags: syscall.O_CREAT, Path: "/missing"},
		}, nil},
		{"removed and renamed files existed", []optrace.Event{
			{Op: optrace.OpUnlink, Path: "/old"},
			{Op: optrace.OpRename, Path: "/a", Path2: "/b"},
			{Op: optrace.OpStat, Path: "/b", Mode: syscall.S_IFREG, Size: 5},
			{Op: optrace.OpRmdir, Path: "/emptydir"},
		}, []Entry{{Path: "/a"}, {Path: "/emptydir", Dir: true}, {Path: "/old"}}},
		{"mkdir EEXIST", []optrace.Event{
			{Op: optrace.OpMkdir, Path: "/there", Result: -int64(syscall.EEXIST)},
		}, []Entry{{Path: "/there", Dir: true}}},
		{"writes hide the initial size", []optrace.Event{
			{Op: optrace.OpOpen, Handle: 1, Flags: syscall.O_RDWR, Path: "/f"},
			{Op: optrace.OpWrite, Handle: 1, Path: "/f", Offset: 0, Size: 10, Result: 10},
			{Op: optrace.OpRead, Handle: 1, Path: "/f", Offset: 0, Size: 100000, Result: 50000},
		}, []Entry{{Path: "/f"}}},
		{"a file used as a parent is a directory", []optrace.Event{
			{Op: optrace.OpStat, Path: "/p", Size: -1},
			{Op: optrace.OpStat, Path: "/p/q", Mode: syscall.S_IFREG, Size: 3},
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
