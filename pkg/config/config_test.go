package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cairn.yaml")
	if err := os.WriteFile(cfg, []byte("data-dir: /from/file\naddr: file:1\nzone: file-zone\npeers: [a, b]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	dataDir := fs.String("data-dir", "default", "")
	addr := fs.String("addr", "default", "")
	zone := fs.String("zone", "default", "")
	other := fs.String("other", "default", "")
	peers := fs.StringSlice("peers", nil, "")
	masters := fs.StringSlice("masters", nil, "")
	if err := fs.Parse([]string{"--data-dir", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	env := []string{"CAIRN_ADDR=env:1", "CAIRN_MASTERS=x:1,y:2", "CAIRN_UNRELATED=1", "HOME=/root"}
	if err := Apply(fs, cfg, env); err != nil {
		t.Fatal(err)
	}
	got := []string{*dataDir, *addr, *zone, *other}
	want := []string{"/from/flag", "env:1", "file-zone", "default"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if !reflect.DeepEqual(*peers, []string{"a", "b"}) || !reflect.DeepEqual(*masters, []string{"x:1", "y:2"}) {
		t.Fatalf("slices: peers %v masters %v", *peers, *masters)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("data-dri: /x\n"), 0o644)
	notYAML := filepath.Join(dir, "notyaml.yaml")
	os.WriteFile(notYAML, []byte("a: [\n"), 0o644)
	for _, tc := range []struct {
		name, path string
		env        []string
		want       string
	}{
		{"unknown key", bad, nil, "unknown keys data-dri"},
		{"missing file", filepath.Join(dir, "nope.yaml"), nil, "no such file"},
		{"not yaml", notYAML, nil, "config file"},
		{"bad env value", "", []string{"CAIRN_PORT=abc"}, "CAIRN_PORT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			fs.String("data-dir", "", "")
			fs.Int("port", 0, "")
			err := Apply(fs, tc.path, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}
