package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

// traceMakefile builds from the cloned sources: a C program when a compiler
// is there, always a concatenation and a line count (recipes need tabs).
const traceMakefile = `SRCS := $(wildcard src/*.txt)
all: out/all.txt out/count.txt $(if $(CC_OK),out/hello)
out/all.txt: $(SRCS)
	mkdir -p out
	cat $(SRCS) > out/all.tmp
	mv out/all.tmp out/all.txt
out/count.txt: out/all.txt
	wc -l out/all.txt > out/count.txt
out/hello: hello.c
	mkdir -p out
	$(CC) -O0 -o out/hello hello.c
clean:
	rm -rf out
`

// makeTraceRepo creates a small git repository (a few dozen files) in dir.
func makeTraceRepo(t *testing.T, dir string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "doc/sub"), 0o755))
	for i := range 24 {
		must(t, os.WriteFile(filepath.Join(dir, "src", fmt.Sprintf("f%02d.txt", i)), bytes.Repeat([]byte(fmt.Sprintf("line %d\n", i)), 50+i*40), 0o644))
	}
	for i := range 8 {
		must(t, os.WriteFile(filepath.Join(dir, "doc/sub", fmt.Sprintf("d%d.md", i)), []byte(strings.Repeat("doc\n", i+1)), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(dir, "Makefile"), []byte(traceMakefile), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "hello.c"), []byte("#include <stdio.h>\nint main(void){puts(\"hi\");return 0;}\n"), 0o644))
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "sources")
}

// TestTraceMountGitMake records `git clone` and `make` on a traced Cairn
// mount (`cairn mount --trace`), then checks that `cairn bench trace-stats`
// summarizes the trace and that `cairn bench replay` runs it on a local
// directory with no operation whose outcome differs from the recording.
func TestTraceMountGitMake(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	for _, tool := range []string{"git", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "tr")
	startUp(t, dir, "--mount", "")
	src := filepath.Join(tmp, "src")
	makeTraceRepo(t, src)

	mp := filepath.Join(tmp, "mnt")
	must(t, os.Mkdir(mp, 0o755))
	traceFile := filepath.Join(tmp, "app.trace")
	mount := exec.Command(cairnBin, "mount", "--data-dir", dir, "--trace", traceFile, "default", mp)
	mount.Env = cleanEnv()
	var mout bytes.Buffer
	mount.Stdout, mount.Stderr = &mout, &mout
	must(t, mount.Start())
	mountDone := make(chan struct{}) // closed when the process has exited
	var mountErr error
	go func() {
		mountErr = mount.Wait()
		close(mountDone)
	}()
	t.Cleanup(func() {
		// Whatever happened, leave no mount and no process behind.
		if ok, _ := localcluster.IsMounted(mp); ok {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Logf("unmount %s: %v", mp, err)
			}
		}
		select {
		case <-mountDone:
		default:
			_ = mount.Process.Kill()
			<-mountDone
		}
	})
	for {
		if ok, _ := localcluster.IsMounted(mp); ok {
			break
		}
		select {
		case <-mountDone:
			t.Fatalf("cairn mount exited (%v):\n%s", mountErr, mout.String())
		case <-time.After(100 * time.Millisecond):
		}
		if ctx.Err() != nil {
			t.Fatalf("not mounted after 90s:\n%s", mout.String())
		}
	}

	// The application: a clone and a build on the mount.
	run := func(dir string, name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+tmp)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	appStart := time.Now()
	run(mp, "git", "clone", "-q", "--no-hardlinks", src, "repo")
	makeArgs := []string{"-C", filepath.Join(mp, "repo")}
	if _, err := exec.LookPath("cc"); err == nil {
		makeArgs = append(makeArgs, "CC_OK=1")
	}
	run(mp, "make", makeArgs...)
	got, err := os.ReadFile(filepath.Join(mp, "repo/out/count.txt"))
	must(t, err)
	t.Logf("git clone + make on the mount: %s (out/count.txt: %s)", time.Since(appStart).Round(time.Millisecond), strings.TrimSpace(string(got)))

	// Unmount: SIGTERM flushes and closes the trace.
	must(t, mount.Process.Signal(syscall.SIGTERM))
	select {
	case <-mountDone:
		if mountErr != nil {
			t.Fatalf("cairn mount: %v\n%s", mountErr, mout.String())
		}
	case <-ctx.Done():
		t.Fatalf("cairn mount did not exit:\n%s", mout.String())
	}
	m := regexp.MustCompile(`trace: (\d+) operations written to`).FindStringSubmatch(mout.String())
	if m == nil {
		t.Fatalf("cairn mount did not report the trace:\n%s", mout.String())
	}
	records, _ := strconv.Atoi(m[1])
	if records < 200 {
		t.Errorf("only %d operations recorded for a clone and a build", records)
	}

	stats := mustCairn(t, "bench", "trace-stats", traceFile)
	for _, want := range []string{"open", "write", "read", "mkdir", "rename", "stat"} {
		if !strings.Contains(stats, want) {
			t.Errorf("trace-stats does not mention %q:\n%s", want, stats)
		}
	}
	var js map[string]any
	must(t, json.Unmarshal([]byte(mustCairn(t, "bench", "trace-stats", "--json", traceFile)), &js))

	// Replay on a local directory: no outcome may differ.
	local := filepath.Join(tmp, "replay")
	must(t, os.Mkdir(local, 0o755))
	out := filepath.Join(tmp, "replay-out")
	replayOut := mustCairn(t, "bench", "replay", traceFile, "--target", "posix:"+local, "--out", out, "--progress", "off")
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	must(t, err)
	var rep benchReport
	must(t, json.Unmarshal(b, &rep))
	if len(rep.Failures) > 0 {
		t.Fatalf("replay failures: %+v", rep.Failures)
	}
	var ops, differ int64
	for _, w := range rep.Workloads {
		for _, tr := range w.Targets {
			for _, r := range tr.Repetitions {
				if r.Error != "" {
					t.Errorf("replay: %s", r.Error)
				}
				for _, ph := range r.Phases {
					for _, o := range ph.Ops {
						ops += o.Count
						differ += o.Errors
						if o.Errors > 0 {
							t.Errorf("replay: %d %s operations differ from the recording, first: %s", o.Errors, o.Name, o.FirstError)
						}
					}
				}
			}
		}
	}
	if ops != int64(records) {
		t.Errorf("replayed %d operations, the trace has %d", ops, records)
	}
	t.Logf("trace: %d operations; replay: %d operations, %d differing; whole test %s\n%s\n%s",
		records, ops, differ, time.Since(t0).Round(time.Millisecond), stats, replayOut)
}
