// Package arch checks that the import graph keeps the layers that
// docs/design.md ("Layout of the code") draws: the table of groups there is
// read by this test, so the document and the code cannot drift apart.
package arch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// module is the import path prefix of Cairn's packages.
const module = "github.com/cairnfs/cairn/"

// rules is the "Layout of the code" table: each package's group, and the
// groups each group may import.
type rules struct {
	group   map[string]string          // package (module-relative) -> group
	imports map[string]map[string]bool // group -> groups it may import
}

// parseRules reads the table whose header row is
// "| Group | Packages | May import |". Packages are written in backquotes,
// module-relative ("pkg/metapb"); "may import" names groups, comma
// separated.
func parseRules(r io.Reader) (*rules, error) {
	rs := &rules{group: map[string]string{}, imports: map[string]map[string]bool{}}
	sc := bufio.NewScanner(r)
	in := false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !in {
			in = strings.HasPrefix(line, "| Group | Packages | May import |")
			continue
		}
		if strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| ---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			return nil, fmt.Errorf("line %d: want 3 cells, got %d: %q", n, len(cells), line)
		}
		g := strings.Trim(strings.TrimSpace(cells[0]), "*")
		if _, dup := rs.imports[g]; dup {
			return nil, fmt.Errorf("line %d: group %q twice", n, g)
		}
		rs.imports[g] = map[string]bool{}
		for _, p := range strings.Split(cells[1], ",") {
			p = strings.Trim(strings.TrimSpace(p), "`")
			if p == "" {
				continue
			}
			if other, dup := rs.group[p]; dup {
				return nil, fmt.Errorf("line %d: package %s is in groups %s and %s", n, p, other, g)
			}
			rs.group[p] = g
		}
		for _, i := range strings.Split(cells[2], ",") {
			if i = strings.TrimSpace(i); i != "" {
				rs.imports[g][i] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rs.imports) == 0 {
		return nil, fmt.Errorf("no table with the header | Group | Packages | May import |")
	}
	for g, is := range rs.imports {
		for i := range is {
			if _, ok := rs.imports[i]; !ok {
				return nil, fmt.Errorf("group %s may import %q, which is no group", g, i)
			}
		}
	}
	return rs, nil
}

// check returns one message per package the table does not place and per
// import the table forbids, sorted. graph maps each package
// (module-relative) to the module packages it imports.
func (rs *rules) check(graph map[string][]string) []string {
	var out []string
	for p, deps := range graph {
		g, ok := rs.group[p]
		if !ok {
			out = append(out, fmt.Sprintf("package %s is in no group of docs/design.md's layout table: add it to the group it belongs to", p))
			continue
		}
		for _, d := range deps {
			dg, ok := rs.group[d]
			if !ok {
				continue // reported as a package of its own
			}
			if !rs.imports[g][dg] {
				out = append(out, fmt.Sprintf("forbidden import %s -> %s: group %s may not import group %s (docs/design.md, Layout of the code)", p, d, g, dg))
			}
		}
	}
	for p := range rs.group {
		if _, ok := graph[p]; !ok {
			out = append(out, fmt.Sprintf("docs/design.md's layout table names %s, which is no package", p))
		}
	}
	sort.Strings(out)
	return out
}

// importGraph lists the module's packages with `go list` and returns each
// one's imports of other module packages (test files excluded: a test may
// reach further than the code it tests).
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		var deps []string
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module) {
				deps = append(deps, strings.TrimPrefix(i, module))
			}
		}
		graph[name] = deps
	}
	return graph
}

func TestImportsFollowTheLayers(t *testing.T) {
	f, err := os.Open("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := parseRules(f)
	if err != nil {
		t.Fatalf("docs/design.md: %v", err)
	}
	graph := importGraph(t)
	if len(graph) < 10 {
		t.Fatalf("go list found %d packages; is the test run from test/arch?", len(graph))
	}
	for _, msg := range rs.check(graph) {
		t.Error(msg)
	}
}

// The checker itself, on a made-up graph and table: it must name a
// forbidden edge, a package the table misses and a name that is no package,
// and accept a graph that keeps the rules.
func TestCheckNamesForbiddenEdges(t *testing.T) {
	const table = `Some text.

| Group | Packages | May import |
|---|---|---|
| protocol | ` + "`pkg/metapb`" + ` | protocol |
| storage | ` + "`pkg/metapartition`, `pkg/extentstore`" + ` | protocol, storage |
| rpc | ` + "`pkg/lightrpc`" + ` | rpc |
| servers | ` + "`pkg/metanode`" + ` | protocol, storage, rpc, servers |

After the table.
`
	rs, err := parseRules(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	good := map[string][]string{
		"pkg/metapb":        nil,
		"pkg/metapartition": {"pkg/metapb"},
		"pkg/extentstore":   nil,
		"pkg/lightrpc":      nil,
		"pkg/metanode":      {"pkg/metapartition", "pkg/lightrpc", "pkg/metapb"},
	}
	if got := rs.check(good); len(got) != 0 {
		t.Fatalf("a graph that keeps the rules: %q", got)
	}
	bad := map[string][]string{
		"pkg/metapb":        nil,
		"pkg/metapartition": {"pkg/metapb", "pkg/lightrpc"}, // storage -> rpc
		"pkg/extentstore":   {"pkg/metanode"},               // storage -> servers
		"pkg/lightrpc":      nil,
		"pkg/metanode":      nil,
		"pkg/newthing":      nil, // in no group
	}
	want := []string{
		"forbidden import pkg/extentstore -> pkg/metanode: group storage may not import group servers (docs/design.md, Layout of the code)",
		"forbidden import pkg/metapartition -> pkg/lightrpc: group storage may not import group rpc (docs/design.md, Layout of the code)",
		"package pkg/newthing is in no group of docs/design.md's layout table: add it to the group it belongs to",
	}
	got := rs.check(bad)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	delete(bad, "pkg/extentstore")
	if got := rs.check(bad); !strings.Contains(strings.Join(got, "\n"), "names pkg/extentstore, which is no package") {
		t.Fatalf("a table naming a missing package: %q", got)
	}
}

func TestParseRulesRejectsBadTables(t *testing.T) {
	for name, table := range map[string]string{
		"no table":       "just text\n",
		"unknown group":  "| Group | Packages | May import |\n|---|---|---|\n| a | `pkg/x` | a, b |\n",
		"package twice":  "| Group | Packages | May import |\n|---|---|---|\n| a | `pkg/x` | a |\n| b | `pkg/x` | b |\n",
		"group twice":    "| Group | Packages | May import |\n|---|---|---|\n| a | `pkg/x` | a |\n| a | `pkg/y` | a |\n",
		"missing a cell": "| Group | Packages | May import |\n|---|---|---|\n| a | `pkg/x` |\n",
	} {
		if _, err := parseRules(strings.NewReader(table)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// maxLines is the length past which a Go file holds more than one concern
// (docs/design.md, "Files by concern").
const maxLines = 800

// Every hand-written, non-test Go file stays under maxLines.
func TestFilesStayShort(t *testing.T) {
	for _, root := range []string{"../../cmd", "../../pkg", "../../test"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if generated.Match(b) {
				return nil
			}
			if n := bytes.Count(b, []byte("\n")); n > maxLines {
				t.Errorf("%s has %d lines, more than %d: split it by concern", strings.TrimPrefix(path, "../../"), n, maxLines)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// generated matches the marker of generated Go files (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)
