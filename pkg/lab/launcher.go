package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A process that has files of a FUSE mount open must not fork: exec closes
// the child's copies of its close-on-exec descriptors, and each close of a
// FUSE file sends the mount a FLUSH the child waits for. While the mount
// holds that file (an fsync that cannot reach the cluster), the child
// never gets past exec, and its parent's fork never returns. A nemesis run
// forks (nft, ip, tc, restarts of killed nodes) while its workers hold
// files of every mount, so it forks through a launcher: a process of its
// own, started before the workers open anything, that holds no file of a
// mount and does the forking.

// launchRequest is one command for a launcher: run Cmd to completion
// (output returned), or with Log set, start it detached (own session,
// environment Env, output appended to Log) and return its pid.
type launchRequest struct {
	Cmd command  `json:"cmd"`
	Env []string `json:"env,omitempty"`
	Log string   `json:"log,omitempty"`
}

// launchReply is a launcher's answer to one request.
type launchReply struct {
	Pid    int    `json:"pid,omitempty"`
	Output string `json:"output,omitempty"`
	Err    string `json:"err,omitempty"`
}

// ServeLauncher is the launcher's side (`cairn lab launcher`): it answers
// the requests on r, one JSON line each, with one JSON line each on w, in
// order, until r ends. It reaps what it started detached while it runs;
// those outlive it.
func ServeLauncher(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		var req launchRequest
		var rep launchReply
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			rep.Err = fmt.Sprintf("launcher: bad request: %v", err)
		} else if len(req.Cmd.Argv) == 0 {
			rep.Err = "launcher: bad request: no command"
		} else if req.Log != "" {
			cmd, err := startDetached(req)
			if err != nil {
				rep.Err = err.Error()
			} else {
				rep.Pid = cmd.Process.Pid
				go func() { _ = cmd.Wait() }()
			}
		} else {
			out, err := run(context.Background(), req.Cmd)
			rep.Output = out
			if err != nil {
				rep.Err = err.Error()
			}
		}
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("launcher: reply: %w", err)
		}
	}
	return sc.Err()
}

// startDetached starts req's command in its namespace, in a session of its
// own (it outlives the process that started it and no terminal's Ctrl-C
// reaches it; the lab stops it), stdin /dev/null, output appended to
// req.Log.
func startDetached(req launchRequest) (*exec.Cmd, error) {
	logf, err := os.OpenFile(req.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(req.Cmd.Argv[0], req.Cmd.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = req.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := startIn(req.Cmd.Netns, cmd); err != nil {
		return nil, err
	}
	return cmd, nil
}

// launcher is the nemesis run's side of a launcher process.
type launcher struct {
	mu   sync.Mutex // one request at a time
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	dead error // set once the launcher failed; every later call fails
}

// startLauncher starts `binary lab launcher`. Call it before this process
// opens any file of a mount.
func startLauncher(binary string) (*launcher, error) {
	cmd := exec.Command(binary, "lab", "launcher")
	cmd.Env = cleanEnv()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launcher: start %s lab launcher: %w", binary, err)
	}
	return &launcher{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

// call sends req and waits for its reply, at most until ctx ends: a
// launcher that does not answer in time is stopped (its children live on)
// and every later call fails.
func (l *launcher) call(ctx context.Context, req launchRequest) (launchReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return launchReply{}, l.dead
	}
	b, err := json.Marshal(req)
	if err != nil {
		return launchReply{}, fmt.Errorf("launcher: %w", err)
	}
	type result struct {
		rep launchReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		if _, err := l.in.Write(append(b, '\n')); err != nil {
			res.err = err
		} else if line, err := l.out.ReadBytes('\n'); err != nil {
			res.err = err
		} else {
			res.err = json.Unmarshal(line, &res.rep)
		}
		done <- res
	}()
	select {
	case res := <-done:
		if res.err != nil {
			l.dead = fmt.Errorf("launcher: %w", res.err)
			return launchReply{}, l.dead
		}
		return res.rep, nil
	case <-ctx.Done():
		l.dead = fmt.Errorf("launcher: no answer to %s: %w", req.Cmd, ctx.Err())
		if l.cmd != nil {
			_ = l.cmd.Process.Kill()
		}
		return launchReply{}, l.dead
	}
}

// run runs c through the launcher, as run does.
func (l *launcher) run(ctx context.Context, c command) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout()+5*time.Second)
	defer cancel()
	rep, err := l.call(ctx, launchRequest{Cmd: c})
	if err != nil {
		return "", fmt.Errorf("%s: %w", c, err)
	}
	if rep.Err != "" {
		return rep.Output, errors.New(rep.Err)
	}
	return rep.Output, nil
}

// spawn starts argv detached in netns through the launcher, its output
// appended to log, and returns its pid.
func (l *launcher) spawn(ctx context.Context, netns string, argv, env []string, log string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	rep, err := l.call(ctx, launchRequest{Cmd: command{Netns: netns, Argv: argv}, Env: env, Log: log})
	if err != nil {
		return 0, err
	}
	if rep.Err != "" {
		return 0, errors.New(rep.Err)
	}
	return rep.Pid, nil
}

// close ends the launcher; the processes it started live on.
func (l *launcher) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.in.Close()
	err := l.cmd.Wait()
	if l.dead == nil {
		l.dead = errors.New("launcher: closed")
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && !ee.Exited() {
		return nil // killed after it stopped answering: already reported
	}
	return err
}
