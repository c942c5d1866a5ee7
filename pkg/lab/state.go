package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// StateFile is the name of a lab's state file in its dir.
const StateFile = "lab.json"

// stateVersion is the state file's format; Decode refuses others.
const stateVersion = 1

// ErrNoLab is returned for a dir that holds no lab state.
var ErrNoLab = errors.New("no lab")

// Phases of a lab, in its state file.
const (
	PhaseMaking = "making" // Up is (or was, if it died) making it
	PhaseUp     = "up"     // Up finished
	PhaseDown   = "down"   // Down removed everything it made
)

// Kinds of resources a lab makes in the kernel, which Down removes.
const (
	ResBridge = "bridge" // a bridge in the root namespace
	ResNetns  = "netns"  // a named network namespace
	ResVeth   = "veth"   // a veth pair, named by its end in the root namespace
	ResTmpfs  = "tmpfs"  // a tmpfs mounted at Name (a small disk)
	ResFuse   = "fuse"   // a FUSE mount point at Name (a client's mount)
)

// Resource is one kernel object the lab made (or was about to make).
type Resource struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Host string `json:"host,omitempty"`
}

// State is everything a lab made and runs, kept in <dir>/lab.json. Every
// resource is recorded before it is made and every fault before it is
// applied, so that Down and Heal work from this file alone, after a crash
// of whatever process made them.
type State struct {
	Version int       `json:"version"`
	ID      string    `json:"id"`
	Dir     string    `json:"dir"`
	Phase   string    `json:"phase"`
	Created time.Time `json:"created"`
	// Binary is the cairn executable the processes run.
	Binary string `json:"binary"`
	Volume string `json:"volume"`
	Subnet string `json:"subnet"`
	Zones  int    `json:"zones"`
	Bridge string `json:"bridge"`
	// SmallDiskBytes is the size of the small disks' tmpfs.
	SmallDiskBytes int64      `json:"small_disk_bytes,omitempty"`
	Hosts          []Host     `json:"hosts"`
	Procs          []Proc     `json:"procs"`
	Made           []Resource `json:"made"`
	Faults         []Fault    `json:"faults"`
	// NextFault is the id the next fault gets; ids are never reused.
	NextFault int `json:"next_fault"`
}

// Encode is the state file's contents.
func (s *State) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("lab state: %w", err)
	}
	return append(b, '\n'), nil
}

// Decode parses a state file and checks what the lab relies on: the
// version, unique host names, processes and faults on known hosts.
func Decode(b []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("lab state: %w", err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("lab state: version %d, this cairn reads version %d", s.Version, stateVersion)
	}
	hosts := map[string]bool{}
	for _, h := range s.Hosts {
		if h.Name == "" || hosts[h.Name] {
			return nil, fmt.Errorf("lab state: host %q is empty or listed twice", h.Name)
		}
		hosts[h.Name] = true
	}
	for _, p := range s.Procs {
		if !hosts[p.Host] || len(p.Args) == 0 {
			return nil, fmt.Errorf("lab state: process %s is on no known host or has no command line", p.Key())
		}
	}
	for _, f := range s.Faults {
		if f.ID <= 0 || f.ID >= s.NextFault {
			return nil, fmt.Errorf("lab state: fault id %d out of range (next %d)", f.ID, s.NextFault)
		}
	}
	return &s, nil
}

// Host returns the host named name.
func (s *State) Host(name string) (*Host, bool) {
	for i := range s.Hosts {
		if s.Hosts[i].Name == name {
			return &s.Hosts[i], true
		}
	}
	return nil, false
}

// Proc returns the process HOST/ROLE.
func (s *State) Proc(key string) (*Proc, bool) {
	for i := range s.Procs {
		if s.Procs[i].Key() == key {
			return &s.Procs[i], true
		}
	}
	return nil, false
}

// made records r unless it is recorded already.
func (s *State) made(r Resource) {
	for _, m := range s.Made {
		if m == r {
			return
		}
	}
	s.Made = append(s.Made, r)
}

// loadState reads dir's state file; ErrNoLab when there is none.
func loadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s (no %s)", ErrNoLab, dir, StateFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read lab state: %w", err)
	}
	s, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	return s, nil
}

// saveState writes s into its dir atomically and durably: a crash leaves
// the old file or the new one.
func saveState(s *State) error {
	b, err := s.Encode()
	if err != nil {
		return err
	}
	path := filepath.Join(s.Dir, StateFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write lab state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write lab state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	return nil
}

// lockFile is held (flock) by whoever changes a lab, so that two cairn lab
// commands on one dir take turns.
const lockFile = "lab.lock"

// lockDir takes dir's lock, waiting at most wait for another command to
// release it; the returned function releases it.
func lockDir(dir string, wait time.Duration) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab lock: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lab in %s is busy with another cairn lab command (lock %s): %w", dir, lockFile, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
