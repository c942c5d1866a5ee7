package trace

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/optrace"
)

func TestSplitArgs(t *testing.T) {
	tests := []struct {
		in   string
		args []string
		rest string
	}{
		{`3</a,b>, ""..., 4096) = 3`, []string{`3</a,b>`, `""...`, `4096`}, ` = 3`},
		{`AT_FDCWD</w>, "x\"),y", {st_mode=S_IFREG|0644, st_size=3, ...}, 0) = 0`, []string{`AT_FDCWD</w>`, `"x\"),y"`, `{st_mode=S_IFREG|0644, st_size=3, ...}`, `0`}, ` = 0`},
		{`3</d>, 0x55 /* 4 entries */, 32768) = 96`, []string{`3</d>`, `0x55 /* 4 entries */`, `32768`}, ` = 96`},
		{`) = 0`, nil, ` = 0`},
		{`4, [{iov_base=""..., iov_len=10}, {iov_base=""..., iov_len=20}], 2) = 30`, []string{`4`, `[{iov_base=""..., iov_len=10}, {iov_base=""..., iov_len=20}]`, `2`}, ` = 30`},
	}
	for _, tc := range tests {
		args, rest, ok := splitArgs(tc.in)
		if !ok || fmt.Sprintf("%q", args) != fmt.Sprintf("%q", tc.args) || rest != tc.rest {
			t.Errorf("splitArgs(%q) = %q, %q, %v; want %q, %q", tc.in, args, rest, ok, tc.args, tc.rest)
		}
	}
	if _, _, ok := splitArgs(`"unterminated`); ok {
		t.Error("unterminated call parsed")
	}
}

func TestStrArg(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`"a\nb\tc"`, "a\nb\tc"},
		{`"q\"uote\\"`, `q"uote\`},
		{`"\303\251t\303\251"`, "été"},
		{`"\x41\x42"`, "AB"},
		{`""...`, ""},
	}
	for _, tc := range tests {
		got, ok := strArg(tc.in)
		if !ok || got != tc.want {
			t.Errorf("strArg(%s) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestParseCall(t *testing.T) {
	tests := []struct {
		in    string
		name  string
		ret   int64
		retFD string
		dur   time.Duration
	}{
		{`openat(AT_FDCWD</w>, "d/a", O_RDONLY) = 3</w/d/a> <0.000008>`, "openat", 3, "/w/d/a", 8 * time.Microsecond},
		{`newfstatat(AT_FDCWD</w>, "b", 0x7ffd, 0) = -1 ENOENT (No such file or directory) <0.000010>`, "newfstatat", -2, "", 10 * time.Microsecond},
		{`fcntl(3</d>, F_GETFL) = 0x38800 (flags O_RDONLY|O_NONBLOCK) <0.000006>`, "fcntl", 0x38800, "", 6 * time.Microsecond},
		{`exit_group(0) = ?`, "exit_group", 0, "", 0},
	}
	for _, tc := range tests {
		c, ok := parseCall(tc.in)
		if !ok || c.name != tc.name || c.ret != tc.ret || c.retFD != tc.retFD || c.dur != tc.dur {
			t.Errorf("parseCall(%q) = %+v, %v", tc.in, c, ok)
		}
	}
}

// straceLog is real strace output (strace 6.1, x86_64) of
//
//	sh -c 'mkdir d && echo hi > d/a; cd d && cat a > b; ln -s a c; readlink c; cd ..; ls d; rm -r d'
//
// run in /w, cut down to the lines that touch /w, plus unfinished/resumed
// pairs, a thread, a fork and lines outside the root.
const straceLog = `100 1000.000000 newfstatat(AT_FDCWD</w>, "/usr/bin/mkdir", {st_mode=S_IFREG|0755, st_size=97552, ...}, 0) = 0 <0.000008>
100 1000.000100 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 101 <0.000200>
101 1000.000500 mkdir("d", 0777) = 0 <0.001370>
101 1000.000600 +++ exited with 0 +++
100 1000.001000 openat(AT_FDCWD</w>, "d/a", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/d/a> <0.001134>
100 1000.002000 dup2(3</w/d/a>, 1) = 1</w/d/a> <0.000006>
100 1000.002100 close(3</w/d/a>) = 0 <0.000007>
100 1000.002200 write(1</w/d/a>, ""..., 3) = 3 <0.000014>
100 1000.002300 dup2(11</tmp/out>, 1</w/d/a>) = 1</tmp/out> <0.000008>
100 1000.002400 chdir("/w/d") = 0 <0.000008>
100 1000.002500 openat(AT_FDCWD</w/d>, "b", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/d/b> <0.001150>
100 1000.002600 dup2(3</w/d/b>, 1) = 1</w/d/b> <0.000007>
100 1000.002700 close(3</w/d/b>) = 0 <0.000007>
100 1000.002800 vfork( <unfinished ...>
102 1000.002900 execve("/usr/bin/cat", ["cat", "a"], 0x7ffd /* 20 vars */) = 0 <0.000300>
100 1000.003000 <... vfork resumed>) = 102 <0.000400>
102 1000.003100 openat(AT_FDCWD</w/d>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache> <0.000008>
102 1000.003150 close(3</etc/ld.so.cache>) = 0 <0.000007>
102 1000.003200 openat(AT_FDCWD</w/d>, "a", O_RDONLY) = 3</w/d/a> <0.000008>
102 1000.003300 newfstatat(3</w/d/a>, "", {st_mode=S_IFREG|0644, st_size=3, ...}, AT_EMPTY_PATH) = 0 <0.000007>
102 1000.003400 copy_file_range(3</w/d/a>, NULL, 1</w/d/b>, NULL, 9223372035781033984, 0 <unfinished ...>
103 1000.003450 read(7</w/d/a>, ""..., 10) = 10 <0.000001>
102 1000.003500 <... copy_file_range resumed>) = 3 <0.000025>
102 1000.003600 close(3</w/d/a>) = 0 <0.000007>
102 1000.003700 close(1</w/d/b>) = 0 <0.000006>
102 1000.003800 +++ exited with 0 +++
100 1000.003900 dup2(11</tmp/out>, 1</w/d/b>) = 1</tmp/out> <0.000008>
100 1000.004000 symlinkat("a", AT_FDCWD</w/d>, "c") = 0 <0.001365>
100 1000.004100 readlink("c", ""..., 64) = 1 <0.000010>
100 1000.004200 chdir("..") = 0 <0.000008>
100 1000.004300 openat(AT_FDCWD</w>, "d", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 3</w/d> <0.000007>
100 1000.004400 getdents64(3</w/d>, 0x55 /* 5 entries */, 32768) = 120 <0.000014>
100 1000.004500 getdents64(3</w/d>, 0x55 /* 0 entries */, 32768) = 0 <0.000007>
100 1000.004600 unlinkat(3</w/d>, "b", 0) = 0 <0.000048>
100 1000.004700 unlinkat(AT_FDCWD</w>, "d/c", 0) = 0 <0.000013>
100 1000.004800 renameat2(AT_FDCWD</w>, "d/a", AT_FDCWD</w>, "x", RENAME_NOREPLACE) = 0 <0.000028>
100 1000.004900 close(3</w/d>) = 0 <0.000007>
100 1000.005000 unlinkat(AT_FDCWD</w>, "d", AT_REMOVEDIR) = 0 <0.000204>
100 1000.005100 newfstatat(AT_FDCWD</w>, "gone", 0x7fff, 0) = -1 ENOENT (No such file or directory) <0.000010>
100 1000.005110 clone(child_stack=0x7f, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM) = 106 <0.000010>
100 1000.005120 openat(AT_FDCWD</w>, "r1", O_RDONLY) = 5</w/r1> <0.000001>
100 1000.005130 close(5</w/r1> <unfinished ...>
106 1000.005140 openat(AT_FDCWD</w>, "r2", O_RDONLY) = 5</w/r2> <0.000001>
100 1000.005150 <... close resumed>) = 0 <0.000100>
106 1000.005160 read(5</w/r2>, ""..., 10) = 10 <0.000001>
100 1000.005190 newfstatat(AT_FDCWD</w>, "", 0x7fff, 0) = -1 ENOENT (No such file or directory) <0.000010>
100 1000.005200 this line is garbage
100 1000.005300 +++ exited with 0 +++
`

func TestImportStrace(t *testing.T) {
	events, rep, err := ImportStrace(strings.NewReader(straceLog), StraceOptions{Root: "/w", Cwd: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		if err := e.Validate(); err != nil {
			t.Fatalf("invalid event %+v: %v", e, err)
		}
		s := fmt.Sprintf("%d %s %s", e.TID, e.Op, e.Path)
		if e.Handle != 0 {
			s += fmt.Sprintf(" h%d", e.Handle)
		}
		if e.Op.IsData() {
			s += fmt.Sprintf(" @%d+%d=%d", e.Offset, e.Size, e.Result)
		}
		if e.Path2 != "" {
			s += " -> " + e.Path2
		}
		if e.Result < 0 {
			s += fmt.Sprintf(" err%d", e.Result)
		}
		got = append(got, s)
	}
	want := []string{
		"101 mkdir /d",
		"100 open /d/a h1",
		"100 write /d/a h1 @0+3=3",
		"100 close /d/a h1", // the dup2 that replaced fd 1 released the last reference
		"100 open /d/b h2",
		"102 open /d/a h3",
		"102 stat /d/a",
		"102 read /d/a h3 @0+3=3",
		"102 write /d/b h2 @0+3=3",
		"103 open /d/a h4", // an fd this import never saw opened
		"103 read /d/a h4 @0+10=10",
		"102 close /d/a h3",
		"100 close /d/b h2", // the parent's dup2 dropped the last of the fork's shared references
		"100 symlink /d/c -> a",
		"100 readlink /d/c",
		"100 open /d h5",
		"100 readdir /d h5",
		"100 unlink /d/b",
		"100 unlink /d/c",
		"100 rename /d/a -> /x",
		"100 close /d h5",
		"100 rmdir /d",
		"100 stat /gone err-2",
		// A close still in flight when a thread's open reuses its descriptor
		// closes the old file, not the new one.
		"100 open /r1 h6",
		"100 close /r1 h6",
		"106 open /r2 h7",
		"106 read /r2 h7 @0+10=10",
		"103 close /d/a h4",
		"106 close /r2 h7",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\n\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Unparsed != 1 || !strings.Contains(rep.UnparsedEx[0], "garbage") {
		t.Errorf("unparsed %d %q", rep.Unparsed, rep.UnparsedEx)
	}
	if rep.Outside == 0 {
		t.Errorf("no calls counted as outside the root")
	}
	if events[1].Flags&syscall.O_CREAT == 0 || events[1].Mode != 0o666 {
		t.Errorf("open flags %o mode %o", events[1].Flags, events[1].Mode)
	}
	if events[6].Size != 3 || events[6].Mode != syscall.S_IFREG|0o644 {
		t.Errorf("stat size %d mode %o", events[6].Size, events[6].Mode)
	}
	if d := events[0].Dur; d != 1370*time.Microsecond {
		t.Errorf("mkdir duration %v", d)
	}
	if s := events[0].Start; s != 500*time.Microsecond {
		t.Errorf("mkdir start %v", s)
	}
}

func TestImportStraceRelativeRoot(t *testing.T) {
	if _, _, err := ImportStrace(strings.NewReader(""), StraceOptions{Root: "w"}); err == nil {
		t.Fatal("relative root accepted")
	}
}

// TestStraceRealProgram records a real shell pipeline with strace and checks
// that the import sees what the program did. It needs the strace binary (Debian
// package "strace") and permission to ptrace.
func TestStraceRealProgram(t *testing.T) {
	bin, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace)")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "strace.log")
	script := `mkdir -p src/sub && printf 'hello world\n' > src/sub/f.txt && cp src/sub/f.txt src/g.txt && cat src/g.txt > /dev/null && mv src/g.txt src/h.txt && ls -R src > /dev/null && rm -r src/sub`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(append([]string{}, StraceArgs...), "-o", logPath, "--", "sh", "-c", script)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "ptrace") {
			t.Skipf("strace cannot trace here: %s", out)
		}
		t.Fatalf("strace: %v\n%s", err, out)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	events, rep, err := ImportStrace(bytes.NewReader(log), StraceOptions{Root: work, Cwd: work})
	if err != nil {
		t.Fatal(err)
	}
	has := func(op optrace.Op, p string) bool {
		for _, e := range events {
			if e.Op == op && e.Path == p && e.OK() {
				return true
			}
		}
		return false
	}
	for _, w := range []struct {
		op optrace.Op
		p  string
	}{
		{optrace.OpMkdir, "/src"}, {optrace.OpMkdir, "/src/sub"}, {optrace.OpOpen, "/src/sub/f.txt"}, {optrace.OpWrite, "/src/sub/f.txt"},
		{optrace.OpOpen, "/src/g.txt"}, {optrace.OpRead, "/src/g.txt"}, {optrace.OpRename, "/src/g.txt"}, {optrace.OpReaddir, "/src"},
		{optrace.OpUnlink, "/src/sub/f.txt"}, {optrace.OpRmdir, "/src/sub"},
	} {
		if !has(w.op, w.p) {
			t.Errorf("no successful %s of %s in the import (%d records, report %+v)", w.op, w.p, len(events), rep)
		}
	}
	// Every open handle is closed exactly once and nothing outside the root leaks in.
	open := map[uint64]int{}
	for _, e := range events {
		if strings.Contains(e.Path, "/etc/") || strings.Contains(e.Path, "/usr/") {
			t.Errorf("path outside the root kept: %+v", e)
		}
		switch {
		case e.Op == optrace.OpOpen && e.OK():
			open[e.Handle]++
		case e.Op == optrace.OpClose:
			open[e.Handle]--
		}
	}
	for h, n := range open {
		if n != 0 {
			t.Errorf("handle %d opened-closed balance %d", h, n)
		}
	}
}
