// Package trace is the benchmark's side of the operation traces that
// pkg/optrace defines (DFS-Perf §5.3): it imports strace logs into traces
// (`cairn bench record`), summarizes a trace the way DFS-Perf's workload
// generator does (`cairn bench trace-stats`: operations, sizes, access
// patterns, and a built-in workload that resembles it), and infers the files
// and directories a trace expects to exist before it starts, which replay
// creates first. The record format, its encoder and decoder and the
// concurrent Recorder are in pkg/optrace, which the FUSE mount uses without
// depending on the benchmark.
package trace
