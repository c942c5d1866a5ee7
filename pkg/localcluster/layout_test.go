package localcluster

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLayout(t *testing.T) {
	l, err := NewLayout(3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	ids := map[string][]uint64{}
	for _, p := range l.Procs {
		for _, a := range []string{p.Addr, p.MetricsAddr} {
			if seen[a] {
				t.Fatalf("address %s given twice", a)
			}
			seen[a] = true
			if _, _, err := net.SplitHostPort(a); err != nil {
				t.Fatal(err)
			}
		}
		ids[p.Role] = append(ids[p.Role], p.ID)
	}
	want := map[string][]uint64{"master": {1, 2, 3}, "meta": {1, 2, 3}, "data": {4, 5}}
	for role, w := range want {
		if len(ids[role]) != len(w) {
			t.Fatalf("%s ids %v, want %v", role, ids[role], w)
		}
		for i := range w {
			if ids[role][i] != w[i] {
				t.Fatalf("%s ids %v, want %v", role, ids[role], w)
			}
		}
	}
	if got := l.PeersFlag(); got != "1="+l.Procs[0].Addr+",2="+l.Procs[1].Addr+",3="+l.Procs[2].Addr {
		t.Fatalf("peers flag %q", got)
	}

	dir := t.TempDir()
	if _, err := LoadLayout(dir); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("empty dir: %v", err)
	}
	if err := l.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := LoadLayout(dir)
	if err != nil || len(back.Procs) != len(l.Procs) || back.Procs[4] != l.Procs[4] {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	os.WriteFile(filepath.Join(dir, LayoutFile), []byte("{"), 0o644)
	if _, err := LoadLayout(dir); err == nil || errors.Is(err, ErrNoCluster) {
		t.Fatalf("corrupt layout: %v", err)
	}
	for _, bad := range [][3]int{{2, 3, 3}, {0, 3, 3}, {1, 0, 3}, {1, 3, 0}} {
		if _, err := NewLayout(bad[0], bad[1], bad[2]); err == nil {
			t.Fatalf("NewLayout%v accepted", bad)
		}
	}
}

func TestCheckDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := checkDataDir(filepath.Join(dir, "new")); err != nil {
		t.Fatalf("missing dir: %v", err)
	}
	if err := checkDataDir(dir); err != nil {
		t.Fatalf("empty dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	if err := checkDataDir(dir); err == nil {
		t.Fatal("foreign dir accepted")
	}
	os.WriteFile(filepath.Join(dir, LayoutFile), []byte("{}"), 0o644)
	if err := checkDataDir(dir); err != nil {
		t.Fatalf("cluster dir: %v", err)
	}
}

// TestMasterFlagsForwarded: MasterFlags reach every master's command line
// as given, after the flags Start sets, and no other process's.
func TestMasterFlagsForwarded(t *testing.T) {
	l, err := NewLayout(3, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{"--mp-max-inodes", "2000", "--balance-interval", "1s"}
	for _, flags := range [][]string{nil, extra} {
		c := &Cluster{opts: Options{MasterFlags: flags, LogLevel: "info"}, dir: t.TempDir(), layout: l}
		for _, p := range l.Procs {
			args := c.args(p)
			tail := args[len(args)-min(len(extra), len(args)):]
			forwarded := slices.Equal(tail, extra)
			if want := p.Role == "master" && flags != nil; forwarded != want {
				t.Errorf("%s with MasterFlags %v: args %v", p.Name, flags, args)
			}
		}
	}
}

// TestMetaFlagsForwarded: MetaFlags reach the meta nodes' command lines and
// no other process's.
func TestMetaFlagsForwarded(t *testing.T) {
	l, err := NewLayout(1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{MetaFlags: []string{"--merge=false"}, LogLevel: "info"}, dir: t.TempDir(), layout: l}
	for _, p := range l.Procs {
		args := c.args(p)
		if got, want := slices.Contains(args, "--merge=false"), p.Role == "meta"; got != want {
			t.Errorf("%s: args %v", p.Name, args)
		}
	}
}
