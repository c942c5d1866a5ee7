// Package loopback picks loopback addresses for processes started on one
// machine: local clusters and the tests that start real servers.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// handedOut holds every port FreePorts returned in this process, so that two
// calls never return the same port: a port picked for a server that has not
// bound it yet still looks free.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePorts finds n distinct free loopback ports below the kernel's ephemeral
// range. Ports from the ephemeral range (what ":0" gives) are also handed out to
// outgoing connections, so one picked now could be taken by some client before
// the child process binds it; ports below the range are only taken by listeners.
// No port is returned twice in one process.
func FreePorts(n int) ([]string, error) {
	lo, hi := 20000, ephemeralLow()
	if hi-lo < 1000 {
		lo, hi = 10000, 20000
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free loopback port found in %d-%d", lo, hi)
		}
		port := lo + rand.IntN(hi-lo)
		if !reserve(port) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		out = append(out, addr)
	}
	return out, nil
}

// reserve marks port handed out and reports whether it was not already.
func reserve(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[port] {
		return false
	}
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	handedOut.ports[port] = true
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return v
}
