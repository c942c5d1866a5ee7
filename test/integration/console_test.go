package integration

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

// chromium is the headless browser the console test drives, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browse loads url in headless Chromium, lets its scripts run for a few
// seconds, and returns the DOM they built (or, with screenshot set, writes
// a screenshot there).
func browse(t *testing.T, browser, url, screenshot string) string {
	t.Helper()
	args := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1800", "--virtual-time-budget=5000"}
	if screenshot != "" {
		args = append(args, "--screenshot="+screenshot)
	} else {
		args = append(args, "--dump-dom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", browser, url, err, errb.String())
	}
	return out.String()
}

// TestConsole: the web console of a `cairn up` cluster with three masters,
// loaded in headless Chromium from a master that does not lead (which
// proxies to the leader), shows every node of the cluster and its volume;
// after a data node is killed it shows the node down and the event; a
// screenshot of the page renders.
func TestConsole(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium (apt-get install chromium; make test installs it)")
	}
	dir := filepath.Join(t.TempDir(), "console")
	startUp(t, dir, "--masters", "3", "--mount", "", "--down-after", "3s")
	st := waitLeaders(t, dir)
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	var follower string
	for _, n := range st.Nodes {
		if n.Role == "master" && !n.Leader {
			for _, p := range l.Procs {
				if p.Role == "master" && p.Addr == n.Address {
					follower = p.MetricsAddr
				}
			}
		}
	}
	if follower == "" {
		t.Fatalf("no follower master's HTTP address in %+v", l.Procs)
	}
	url := "http://" + follower + "/"

	dom := browse(t, browser, url, "")
	for _, p := range l.Procs {
		if p.Role == "meta" || p.Role == "data" {
			if !strings.Contains(dom, p.Addr) {
				t.Errorf("the console does not list %s %s:\n%.3000s", p.Role, p.Addr, dom)
			}
		}
	}
	for _, want := range []string{"nodes alive", "default", "every replica is in sync", "Operations per second"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the console lacks %q", want)
		}
	}

	// A data node dies: the page shows it down, and the event.
	var victim struct {
		id   uint64
		pid  int
		addr string
	}
	for _, n := range st.Nodes {
		if n.Role == "data" {
			victim.id, victim.pid, victim.addr = n.ID, n.Pid, n.Address
			break
		}
	}
	must(t, syscall.Kill(victim.pid, syscall.SIGKILL))
	deadline := time.Now().Add(60 * time.Second)
	for {
		dom = browse(t, browser, url, "")
		if strings.Contains(dom, "is down (was alive)") && strings.Contains(dom, `<span class="down">down`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s after data node %d was killed the console does not show it down:\n%.4000s", victim.id, dom)
		}
		time.Sleep(2 * time.Second)
	}

	shot := filepath.Join(t.TempDir(), "console.png")
	browse(t, browser, url, shot)
	f, err := os.Open(shot)
	must(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	must(t, err)
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 1000 {
		t.Errorf("screenshot of %v", b)
	}
}
