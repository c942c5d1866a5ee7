package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/lab"
)

// TestLabZoneDown takes down the whole zone of the master leader (every
// process killed, every link down) on a lab of 6 server hosts in 3 zones,
// and checks what docs/design.md ("Partitions and zones") promises: no
// byte written before is lost, writes and reads through a mount on a
// client host resume (the time is logged), cairn status shows the zone
// down and the rule, and that the rule holds: once the zone's nodes are
// out (--out-after, 20 s here) every partition is rebuilt to 3 replicas in
// the two zones left, and after the heal every node is alive again, every
// partition healthy with one replica per zone again, and every file intact.
func TestLabZoneDown(t *testing.T) {
	dir := labDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const outAfter = 20 * time.Second
	l, err := lab.Up(ctx, lab.Config{Dir: dir, Hosts: 6, Zones: 3, Clients: 1, Binary: cairnBin, Out: testLog{t},
		MountOptions: []string{"op_timeout=10"}, MasterFlags: []string{"--out-after=" + outAfter.String()}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	mnt := st.Hosts[len(st.Hosts)-1].Mount
	files := map[string][]byte{}
	for i := range 20 {
		b := make([]byte, 1<<20+i*4099)
		_, _ = rand.Read(b)
		name := fmt.Sprintf("before-%d", i)
		writeSynced(t, filepath.Join(mnt, name), b)
		files[name] = b
	}
	cs, err := l.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := l.State()
	masterHost, _ := s.HostOf(cs.Leader)
	h, _ := s.Host(masterHost)
	t.Logf("master leader on %s: taking zone %s down", masterHost, h.Zone)
	f, err := l.Fault(ctx, lab.Spec{Kind: lab.KindZoneDown, Args: []string{h.Zone}})
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	during := make([]byte, 256<<10)
	_, _ = rand.Read(during)
	var attempts []string // each attempt's write and read: where the time went
	for attempt := 1; ; attempt++ {
		w0 := time.Now()
		werr := os.WriteFile(filepath.Join(mnt, "during"), during, 0o644)
		r0 := time.Now()
		got, rerr := os.ReadFile(filepath.Join(mnt, "before-0"))
		attempts = append(attempts, fmt.Sprintf("attempt %d at %.1fs: write %.1fs (%v), read %.1fs (%v)",
			attempt, w0.Sub(cut).Seconds(), r0.Sub(w0).Seconds(), werr, time.Since(r0).Seconds(), rerr))
		if werr == nil && rerr == nil && bytes.Equal(got, files["before-0"]) {
			break
		}
		if time.Since(cut) > labFailoverMax {
			labDiagnose(ctx, t, l, dir)
			t.Fatalf("zone %s down: no write and read through the mount within %s (attempt %d: write %v, read %v)", h.Zone, labFailoverMax, attempt, werr, rerr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("zone %s down: the first write and read through the mount succeeded after %.1fs:\n%s", h.Zone, time.Since(cut).Seconds(), strings.Join(attempts, "\n"))
	files["during"] = during

	// cairn status shows the zone down and what happens next.
	var rule string
	eventually(t, 60*time.Second, func() error {
		var out bytes.Buffer
		code, err := l.Exec(ctx, "c1", []string{cairnBin, "status", "--json"}, nil, &out, &out)
		if err != nil || code != 0 {
			return fmt.Errorf("status: %d %v %s", code, err, out.String())
		}
		var rep struct {
			Zones []struct {
				Name string `json:"name"`
				Down bool   `json:"down"`
			} `json:"zones"`
			ZoneRule string `json:"zone_rule"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			return err
		}
		for _, z := range rep.Zones {
			if z.Name == h.Zone && z.Down && strings.Contains(rep.ZoneRule, "zone "+h.Zone+" down") {
				rule = rep.ZoneRule
				return nil
			}
		}
		return fmt.Errorf("zones %+v, rule %q", rep.Zones, rep.ZoneRule)
	})
	t.Logf("cairn status: %s", rule)
	// Every byte is there; a read that first meets a replica in the dead
	// zone on a connection opened before may time out once (the data
	// path's 10 s read timeout is the mount's op_timeout here), so each
	// file gets a minute.
	readStart := time.Now()
	for name, want := range files {
		eventuallyOr(t, time.Minute, func() error {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil || !bytes.Equal(got, want) {
				return fmt.Errorf("%s with zone %s down: %v, %d bytes, equal %v", name, h.Zone, err, len(got), bytes.Equal(got, want))
			}
			return nil
		}, func() { labDiagnose(ctx, t, l, dir) })
	}
	t.Logf("every file read back with zone %s down in %.1fs", h.Zone, time.Since(readStart).Seconds())

	// The rule: the zone's nodes go out and every partition gets its
	// third replica back in the zones left.
	diagnose := func() { labDiagnose(ctx, t, l, dir) }
	eventuallyOr(t, 3*time.Minute, func() error {
		return zoneSpread(ctx, l, func(p string, zones map[string]int, n int) error {
			if n != 3 || zones[h.Zone] > 0 {
				return fmt.Errorf("%s: %d replicas alive, zones %v", p, n, zones)
			}
			return nil
		})
	}, diagnose)
	t.Logf("zone %s down: every partition back at 3 replicas in the zones left %.1fs after the cut", h.Zone, time.Since(cut).Seconds())

	if err := l.Heal(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	eventuallyOr(t, 4*time.Minute, func() error {
		cs, err := l.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, n := range cs.Nodes {
			if n.Role != lab.RoleMaster && n.State != "alive" {
				return fmt.Errorf("%s node %s %s", n.Role, n.Address, n.State)
			}
		}
		for _, p := range cs.Partitions {
			if p.Health != "healthy" {
				return fmt.Errorf("%s partition %d %s", p.Kind, p.ID, p.Health)
			}
		}
		// The zone is back: one replica per zone again.
		return zoneSpread(ctx, l, func(p string, zones map[string]int, n int) error {
			if n != 3 || len(zones) != 3 {
				return fmt.Errorf("%s: %d replicas alive, zones %v", p, n, zones)
			}
			return nil
		})
	}, diagnose)
	t.Logf("zone %s back: every partition healthy with one replica per zone %.1fs after the heal", h.Zone, time.Since(healed).Seconds())
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(mnt, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after the heal: %v, %d bytes, equal %v", name, err, len(got), bytes.Equal(got, want))
		}
	}
}

// zoneSpread calls check for every partition of the lab's cluster with
// the zones of its replicas on alive nodes (replicas per zone) and how
// many those are, and returns the first error.
func zoneSpread(ctx context.Context, l *lab.Lab, check func(p string, zones map[string]int, alive int) error) error {
	cs, err := l.Cluster(ctx)
	if err != nil {
		return err
	}
	for _, p := range cs.Partitions {
		zones, n := map[string]int{}, 0
		for _, r := range p.Replicas {
			for _, nd := range cs.Nodes {
				if nd.ID == r && nd.Role != lab.RoleMaster && nd.State == "alive" {
					zones[nd.Zone]++
					n++
				}
			}
		}
		if err := check(fmt.Sprintf("%s partition %d", p.Kind, p.ID), zones, n); err != nil {
			return err
		}
	}
	return nil
}

// eventually retries check every half second until it returns nil, and
// fails the test with its last error after d.
func eventually(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	eventuallyOr(t, d, check, nil)
}

// eventuallyOr is eventually, calling diagnose (if not nil) before it
// fails the test.
func eventuallyOr(t *testing.T, d time.Duration, check func() error, diagnose func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if diagnose != nil {
				diagnose()
			}
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
