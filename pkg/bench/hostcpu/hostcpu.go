// Package hostcpu reads how much processor time this machine spent between
// two moments, from the first line of /proc/stat. cairn bench reports it
// per operation: when the whole system under test runs on the benchmark's
// host (cairn up, the peers of make bench-data), the CPU time an operation
// costs every process and the kernel together varies far less from run to
// run than the operation rate, which queueing on a busy machine spreads.
package hostcpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Path is where Read finds the counters.
const Path = "/proc/stat"

// tick is one unit of /proc/stat (USER_HZ): 1/100 s on every Linux
// architecture Go supports, whatever the kernel's own tick rate.
const tick = 10 * time.Millisecond

// Sample is the processor time spent since boot, summed over all CPUs.
type Sample struct {
	// Busy is user, nice, system, interrupt and softirq time: every
	// process and the kernel's own work (guest time is within user).
	Busy time.Duration
	// Idle is idle and I/O-wait time.
	Idle time.Duration
	// Steal is time the hypervisor ran something else while this
	// machine's virtual CPUs were ready to run.
	Steal time.Duration
}

// Sub returns the time spent between b and s (s taken later).
func (s Sample) Sub(b Sample) Sample {
	return Sample{Busy: s.Busy - b.Busy, Idle: s.Idle - b.Idle, Steal: s.Steal - b.Steal}
}

// Read samples this machine's counters.
func Read() (Sample, error) {
	f, err := os.Open(Path)
	if err != nil {
		return Sample{}, fmt.Errorf("host cpu: %w", err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return Sample{}, fmt.Errorf("host cpu: %s: %w", Path, err)
	}
	return s, nil
}

// Parse reads the aggregate "cpu" line of /proc/stat from r: at least the
// four fields user, nice, system and idle; the later ones (iowait, irq,
// softirq, steal) count when present, as on every kernel since 2.6.11.
func Parse(r io.Reader) (Sample, error) {
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return Sample{}, err
		}
		return Sample{}, errors.New("empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return Sample{}, fmt.Errorf("first line is not the aggregate cpu line: %q", sc.Text())
	}
	v := make([]uint64, 8) // user nice system idle iowait irq softirq steal
	for i := range v {
		if 1+i >= len(fields) {
			break
		}
		n, err := strconv.ParseUint(fields[1+i], 10, 64)
		if err != nil {
			return Sample{}, fmt.Errorf("cpu field %d: %w", i+1, err)
		}
		v[i] = n
	}
	d := func(n uint64) time.Duration { return time.Duration(n) * tick }
	return Sample{
		Busy:  d(v[0] + v[1] + v[2] + v[5] + v[6]),
		Idle:  d(v[3] + v[4]),
		Steal: d(v[7]),
	}, nil
}
