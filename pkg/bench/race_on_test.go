//go:build race

package bench

// raceEnabled: the race detector slows the instrumented framework code many
// times over but not the system calls of the direct loop, so overhead figures
// mean nothing under it.
const raceEnabled = true
