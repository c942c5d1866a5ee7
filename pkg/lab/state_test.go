package lab

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStateRoundTrip(t *testing.T) {
	s := testState(t)
	s.Created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.Made = []Resource{{Kind: ResBridge, Name: s.Bridge}, {Kind: ResNetns, Name: s.Hosts[0].Netns, Host: "s1"}}
	s.Procs[0].Pid, s.Procs[0].Start = 1234, 99
	f, err := planFault(s, Spec{Kind: KindIsolate, Args: []string{"s1"}}, 1, s.Created)
	if err != nil {
		t.Fatal(err)
	}
	s.Faults, s.NextFault = []Fault{f}, 2
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := back.Encode()
	if !bytes.Equal(b, b2) {
		t.Errorf("a decoded state encodes differently:\n%s\n%s", b, b2)
	}
	if back.Procs[0].Pid != 1234 || len(back.Faults[0].Cuts) != 8 || back.Faults[0].Since != s.Created {
		t.Errorf("decoded %+v %+v", back.Procs[0], back.Faults[0])
	}
	for _, key := range []string{`"phase": "up"`, `"kind": "isolate"`, `"next_fault": 2`, `"kind": "netns"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("the state file lacks %s", key)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*State)
		want string
	}{
		{"version", func(s *State) { s.Version = 2 }, "version 2"},
		{"duplicate host", func(s *State) { s.Hosts[1].Name = "s1" }, `host "s1" is empty or listed twice`},
		{"process on no host", func(s *State) { s.Procs[0].Host = "s9" }, "process s9/master"},
		{"fault id", func(s *State) { s.Faults = []Fault{{ID: 3}} }, "fault id 3 out of range"},
	} {
		s := testState(t)
		tc.edit(s)
		b, _ := s.Encode()
		if _, err := Decode(b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := Decode([]byte("{")); err == nil {
		t.Error("a truncated state accepted")
	}
}

func TestSaveLoadAndLock(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadState(dir); !errors.Is(err, ErrNoLab) {
		t.Fatalf("empty dir: %v, want ErrNoLab", err)
	}
	s := testState(t)
	s.Dir = dir
	if err := saveState(s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile+".tmp")); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	back, err := loadState(dir)
	if err != nil || back.ID != s.ID || len(back.Hosts) != 5 {
		t.Fatalf("load: %v, %+v", err, back)
	}
	unlock, err := lockDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("a second lock: %v, want busy", err)
	}
	unlock()
	unlock2, err := lockDir(dir, 0)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(dir); err == nil || !strings.Contains(err.Error(), "version 0") {
		t.Errorf("corrupt state: %v", err)
	}
}

// TestHostsByReach checks where the lab asks the cluster from: client
// hosts first, then servers, hosts touched by a fault last.
func TestHostsByReach(t *testing.T) {
	s := testState(t)
	f, _ := planFault(s, Spec{Kind: KindIsolate, Args: []string{"c1"}}, 1, time.Unix(0, 0))
	g, _ := planFault(s, Spec{Kind: KindHostDown, Args: []string{"s2"}}, 2, time.Unix(0, 0))
	s.Faults = []Fault{f, g}
	// c1 is cut from everyone, so every host is touched; s2 is down too.
	got := hostNames(hostsByReach(s), nil)
	if strings.Join(got, " ") != "c1 s1 s2 s3 s4" {
		t.Errorf("order %v", got)
	}
	s.Faults = []Fault{g}
	if got := hostNames(hostsByReach(s), nil); strings.Join(got, " ") != "c1 s1 s3 s4 s2" {
		t.Errorf("order %v", got)
	}
	if h, ok := s.HostOf("10.213.0.3:17100"); !ok || h != "s3" {
		t.Errorf("HostOf: %s %v", h, ok)
	}
}

// TestPrepareDir: a lab starts in an empty dir or in one of a lab taken
// down, whose files go but for its nemesis reports; anything else is
// refused.
func TestPrepareDir(t *testing.T) {
	dir := t.TempDir()
	if err := prepareDir(dir); err != nil {
		t.Fatalf("empty dir: %v", err)
	}
	s := testState(t)
	s.Dir, s.Phase = dir, PhaseDown
	if err := saveState(s); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"hosts/c1", "tls/ca", "mnt", "jepsen/seed1"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := prepareDir(dir); err != nil {
		t.Fatalf("a lab taken down: %v", err)
	}
	for name, want := range map[string]bool{"hosts": false, "tls": false, "mnt": false, StateFile: false, "jepsen/seed1": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s there: %v, want %v", name, err == nil, want)
		}
	}

	// Files of something else: refused, as is a lab still up.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(other); err == nil {
		t.Error("a dir of other files accepted")
	}
	s.Phase = PhaseUp
	if err := saveState(s); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(dir); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("a lab that is up: %v", err)
	}
}
