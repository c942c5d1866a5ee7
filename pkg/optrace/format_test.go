package optrace

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"
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
