package lab

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/history"
)

func TestStalls(t *testing.T) {
	s := func(x float64) int64 { return int64(x * float64(time.Second)) }
	op := func(kind history.Kind, start, end float64, out history.Outcome) history.Op {
		return history.Op{Kind: kind, Start: s(start), End: s(end), Outcome: out}
	}
	ops := []history.Op{
		op(history.Write, 0, 1, history.OK),
		op(history.Read, 1, 2, history.OK),
		op(history.Write, 9, 10.5, history.OK),  // the last write before the fault
		op(history.Write, 11, 18, history.OK),   // waited out the fault
		op(history.Write, 12, 14, history.Fail), // failures are no success
		op(history.Read, 10, 11, history.OK),
		op(history.Read, 11.5, 12, history.OK),
		op(history.Write, 19, 19.5, history.OK),
	}
	events := []NemesisEvent{
		{At: 10 * time.Second, Fault: 1, Spec: "isolate s2"},
		{At: 20 * time.Second, Fault: 1, Spec: "isolate s2", Heal: true},
		{At: 25 * time.Second, Fault: 2, Spec: "kill s1/meta", Err: "refused"},
	}
	got := Stalls(ops, events)
	if len(got) != 1 {
		t.Fatalf("stalls %+v, want one", got)
	}
	st := got[0]
	if st.Kind != KindIsolate || st.Lasted != 10*time.Second {
		t.Errorf("stall %+v", st)
	}
	// Writes: successes at 10.5, 18, 19.5 in [10, 20]: gaps 0.5, 7.5, 1.5, 0.5.
	if st.LongestGapW != 7500*time.Millisecond {
		t.Errorf("write gap %v, want 7.5s", st.LongestGapW)
	}
	// Reads: 11, 12, then nothing until the heal at 20.
	if st.LongestGapR != 8*time.Second {
		t.Errorf("read gap %v, want 8s", st.LongestGapR)
	}
	r := &JepsenResult{Duration: 20 * time.Second, Events: events, Stalls: got}
	if svg := timelineSVG(r, ops); !strings.Contains(svg, "isolate s2") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Errorf("timeline lacks the fault or is cut: %.200s", svg)
	}
}

// TestKeepLogs copies every host's process logs into the run's directory,
// host by host, and nothing else.
func TestKeepLogs(t *testing.T) {
	lab, out := t.TempDir(), t.TempDir()
	files := map[string]string{"s1/meta.log": "meta of s1", "s1/data.log": "data of s1", "c1/mount.log": "mount of c1"}
	for name, body := range files {
		p := filepath.Join(lab, "hosts", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lab, "hosts", "s1", "state.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := keepLogs(lab, out); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if b, err := os.ReadFile(filepath.Join(out, "logs", name)); err != nil || string(b) != body {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "logs", "s1", "state.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file that is no log was copied: %v", err)
	}
}
