package integration

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestMonitoring: the alert rules pass 'promtool check rules' and their
// unit tests ('promtool test rules'); every query of the Grafana dashboard
// is valid PromQL (checked as a recording rule) and names only metrics
// Cairn exports (found in the source, as the servers register them).
func TestMonitoring(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool (apt-get install prometheus; make test installs it)")
	}
	mon := filepath.Join("..", "..", "deploy", "monitoring")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = mon
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	b, err := os.ReadFile(filepath.Join(mon, "cairn-dashboard.json"))
	must(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	must(t, json.Unmarshal(b, &dash))
	known := exportedMetrics(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range regexp.MustCompile(`cairn_[a-z_]+`).FindAllString(tg.Expr, -1) {
				if !known[strings.TrimSuffix(m, "_bucket")] {
					t.Errorf("panel %q queries %s, which no Cairn process exports", p.Title, m)
				}
			}
			n++
			q, _ := json.Marshal(tg.Expr)
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", n, q)
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	must(t, os.WriteFile(file, []byte(rules.String()), 0o644))
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries: %v\n%s", err, out)
	}
}

// exportedMetrics lists the metric names registered in Cairn's source
// (Name: "cairn_..."), and those of the Raft collector's prefix.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	re := regexp.MustCompile(`"(cairn_[a-z_]+)"`)
	err := filepath.WalkDir(filepath.Join("..", "..", "pkg"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src, err := os.ReadFile(p)
		for _, m := range re.FindAllSubmatch(src, -1) {
			known[string(m[1])] = true
		}
		return err
	})
	must(t, err)
	if len(known) < 50 {
		t.Fatalf("found only %d metric names in the source", len(known))
	}
	return known
}
