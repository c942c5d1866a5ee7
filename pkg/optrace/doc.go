// Package optrace defines the Cairn operation trace: a record of the
// file-system operations applications performed, one record per operation,
// with its timing, its outcome and the path it named (DFS-Perf §5.3).
//
// Traces are written by `cairn mount --trace` (pkg/fusefs records every
// request the kernel sends the mount), by `cairn bench record` (which imports
// an strace log, pkg/bench/trace) and by the recording wrapper of the bench
// file-system layer (pkg/bench/fsys.Record). They are read by
// `cairn bench replay`, which runs the operations again on any target, and by
// `cairn bench trace-stats`, which summarizes them (pkg/bench/trace).
//
// The package holds only the format and what produces and consumes it
// directly: the record type Event and its operations (Op), the encoder
// (Writer), the decoders (Scanner, Read), and the Recorder that a file-system
// layer calls concurrently for every operation. It depends on the standard
// library only, so the FUSE mount can record traces without the benchmark
// framework. Analysis of traces and the strace importer live in
// pkg/bench/trace.
//
// What the format guarantees: a record is always one line with exactly 12
// fields, whatever bytes its paths hold (they are percent-escaped); every
// record a Scanner or Read returns has passed Event.Validate, so replay and
// statistics never see a record they cannot interpret (Writer and Recorder do
// not check: a producer's invalid record makes readers refuse the trace, with
// its line number); a record decoded and encoded again is the same record; and
// a file that does not start with the magic line is refused before any record
// is read.
//
// # Format (version 1)
//
// A trace is UTF-8 text, one line per record. The first line is exactly
//
//	# cairn-trace v1
//
// followed by optional header lines "# key=value" (root, source, started,
// host, command; unknown keys are kept and ignored) and then records. Any later
// line starting with '#' is a comment; empty lines are ignored. A record has 12
// tab-separated fields:
//
//		start_ns dur_ns tid op result handle offset size flags mode path path2
//
//	  - start_ns: when the operation started, in nanoseconds since the trace began
//	    (records may appear in any order; readers sort by start_ns).
//	  - dur_ns: how long it took, in nanoseconds (≥ 0).
//	  - tid: the thread or process that issued it (any integer; replay runs each
//	    tid's operations in order, and different tids concurrently).
//	  - op: one of open, close, read, write, fsync, truncate, stat, readdir, mkdir,
//	    rmdir, unlink, rename, link, symlink, readlink, chmod.
//	  - result: ≥ 0 on success (bytes for read and write, 0 otherwise), or the
//	    negated Linux errno on failure (-2 is ENOENT).
//	  - handle: the open-file id that open returned and that read, write, fsync,
//	    truncate (when by handle), readdir and close use; 0 when none. Ids are
//	    unique within a trace and never reused.
//	  - offset: the file offset of read and write, in bytes.
//	  - size: bytes requested by read and write, the new length for truncate, the
//	    file size found by a successful stat (-1 when unknown).
//	  - flags: open flags as a decimal Linux O_* bit set (open only, else 0).
//	  - mode: octal permission bits for open with O_CREAT, mkdir and chmod; the
//	    octal st_mode (type and permissions) a successful stat returned; else 0.
//	  - path: the path the operation named, absolute within the traced file
//	    system ("/" is its root); for operations by handle, the path the handle
//	    was opened with.
//	  - path2: the new name of rename and link, the target of symlink (verbatim,
//	    possibly relative), else empty.
//
// Paths are percent-escaped: '%', tab, newline, carriage return and every byte
// below 0x20 or equal to 0x7f are written as %XX, so a record is always one line
// with exactly 12 fields.
package optrace
