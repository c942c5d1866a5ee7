package lab

import (
	"bufio"
	"context"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLauncher: commands run through a launcher as run runs them (output,
// stdin, stderr kept apart on request, failures with their output), and
// detached ones start with their output in their log.
func TestLauncher(t *testing.T) {
	reqR, reqW := io.Pipe()
	repR, repW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- ServeLauncher(reqR, repW); repW.Close() }()
	l := &launcher{in: reqW, out: bufio.NewReader(repR)}
	ctx := context.Background()

	if out, err := l.run(ctx, command{Argv: []string{"cat"}, Stdin: "hello\n"}); err != nil || out != "hello\n" {
		t.Fatalf("cat = %q, %v; want hello", out, err)
	}
	out, err := l.run(ctx, command{Argv: []string{"sh", "-c", "echo answer; echo complaint >&2; exit 3"}, StdoutOnly: true})
	if err == nil || out != "answer\n" || !strings.Contains(err.Error(), "complaint") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("failing command = %q, %v; want its stdout, and an error with its stderr and status", out, err)
	}
	if _, err := l.run(ctx, command{Argv: []string{"/no/such/command"}}); err == nil {
		t.Fatal("a command that does not exist ran")
	}

	log := filepath.Join(t.TempDir(), "log")
	pid, err := l.spawn(ctx, "", []string{"sh", "-c", "echo started; sleep 0.2"}, os.Environ(), log)
	if err != nil || pid <= 0 {
		t.Fatalf("spawn = %d, %v", pid, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if string(b) == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the detached command's log holds %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sid, err := unix.Getsid(pid); err == nil && sid != pid {
		t.Errorf("the detached command's session is %d, want its own (%d)", sid, pid)
	}

	reqW.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeLauncher = %v", err)
	}
	if _, err := l.run(ctx, command{Argv: []string{"true"}}); err == nil {
		t.Fatal("a launcher that ended still answers")
	}
}
