package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits: the unit files under deploy/systemd pass
// 'systemd-analyze verify' (syntax, directives, the executable), with
// /usr/local/bin/cairn pointed at the binary under test.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	units, err := filepath.Glob(filepath.Join("..", "..", "deploy", "systemd", "*.service"))
	must(t, err)
	if len(units) < 4 {
		t.Fatalf("found %d unit files: %v", len(units), units)
	}
	dir := t.TempDir()
	var copies []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		must(t, err)
		c := filepath.Join(dir, filepath.Base(u))
		must(t, os.WriteFile(c, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/cairn", cairnBin)), 0o644))
		copies = append(copies, c)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, copies...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
