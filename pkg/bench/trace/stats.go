package trace

import (
	"fmt"
	"math/bits"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/stats"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// OpStats are the figures of one operation in a trace.
type OpStats struct {
	Op      optrace.Op      `json:"op"`
	Count   int64           `json:"count"`
	Errors  int64           `json:"errors"`
	Bytes   int64           `json:"bytes"`
	Latency stats.Histogram `json:"latency"`
}

// SizeHist counts request sizes in power-of-two buckets: bucket i holds sizes
// in [2^(i-1), 2^i), bucket 0 holds zero.
type SizeHist [41]int64

func (h *SizeHist) add(n int64) {
	if n < 0 {
		n = 0
	}
	i := bits.Len64(uint64(n))
	if i >= len(h) {
		i = len(h) - 1
	}
	h[i]++
}

// Median returns the lower bound of the bucket holding the median request, 0
// when there are none.
func (h *SizeHist) Median() int64 {
	var total int64
	for _, c := range h {
		total += c
	}
	if total == 0 {
		return 0
	}
	var seen int64
	for i, c := range h {
		seen += c
		if seen*2 >= total {
			if i == 0 {
				return 0
			}
			return 1 << (i - 1)
		}
	}
	return 0
}

// Stats summarizes a trace the way DFS-Perf's workload generator does: what the
// application did, how much data it moved, in which sizes and patterns, so that
// a built-in workload can be configured to match it.
type Stats struct {
	Records      int           `json:"records"`
	Duration     time.Duration `json:"duration_ns"`
	Threads      int           `json:"threads"`
	Handles      int           `json:"handles"`
	Paths        int           `json:"paths"`
	Errors       int64         `json:"errors"`
	Ops          []OpStats     `json:"ops"`
	Reads        int64         `json:"reads"`
	Writes       int64         `json:"writes"`
	ReadBytes    int64         `json:"read_bytes"`
	WriteBytes   int64         `json:"write_bytes"`
	SeqReads     int64         `json:"sequential_reads"`
	RandomReads  int64         `json:"random_reads"`
	SeqWrites    int64         `json:"sequential_writes"`
	RandomWrites int64         `json:"random_writes"`
	MetadataOps  int64         `json:"metadata_ops"`
	ReadSizes    SizeHist      `json:"read_sizes_log2"`
	WriteSizes   SizeHist      `json:"write_sizes_log2"`
	FilesRead    int           `json:"files_read"`
	FilesWritten int           `json:"files_written"`
	FileExtents  SizeHist      `json:"file_extents_log2"` // largest offset+size touched per file
}

// Compute returns the statistics of events (in any order). A read or write is
// sequential when it starts where the previous one on the same handle ended
// (the first one on a handle when it starts at offset 0).
func Compute(events []optrace.Event) *Stats {
	s := &Stats{Records: len(events)}
	byOp := map[optrace.Op]*OpStats{}
	tids := map[int64]bool{}
	handles := map[uint64]bool{}
	paths := map[string]bool{}
	next := map[uint64]int64{} // handle -> offset where the last data op ended
	extent := map[string]int64{}
	read, written := map[string]bool{}, map[string]bool{}
	var first, last time.Duration
	for i := range events {
		e := &events[i]
		if i == 0 || e.Start < first {
			first = e.Start
		}
		if e.End() > last {
			last = e.End()
		}
		o := byOp[e.Op]
		if o == nil {
			o = &OpStats{Op: e.Op}
			byOp[e.Op] = o
		}
		o.Count++
		o.Latency.Record(e.Dur)
		tids[e.TID] = true
		if e.Handle != 0 {
			handles[e.Handle] = true
		}
		paths[e.Path] = true
		if !e.OK() {
			o.Errors++
			s.Errors++
			continue
		}
		if !e.Op.IsData() {
			if e.Op != optrace.OpClose {
				s.MetadataOps++
			}
			continue
		}
		o.Bytes += e.Result
		want, seen := next[e.Handle]
		seq := (!seen && e.Offset == 0) || (seen && e.Offset == want)
		next[e.Handle] = e.Offset + e.Result
		if end := e.Offset + e.Result; end > extent[e.Path] {
			extent[e.Path] = end
		}
		if e.Op == optrace.OpRead {
			s.Reads++
			s.ReadBytes += e.Result
			s.ReadSizes.add(e.Size)
			read[e.Path] = true
			if seq {
				s.SeqReads++
			} else {
				s.RandomReads++
			}
		} else {
			s.Writes++
			s.WriteBytes += e.Result
			s.WriteSizes.add(e.Size)
			written[e.Path] = true
			if seq {
				s.SeqWrites++
			} else {
				s.RandomWrites++
			}
		}
	}
	if len(events) > 0 {
		s.Duration = last - first
	}
	for _, op := range optrace.Ops {
		if o := byOp[op]; o != nil {
			s.Ops = append(s.Ops, *o)
		}
	}
	s.Threads, s.Handles, s.Paths = len(tids), len(handles), len(paths)
	s.FilesRead, s.FilesWritten = len(read), len(written)
	for _, x := range extent {
		s.FileExtents.add(x)
	}
	return s
}

// Suggestion is a built-in workload configured to resemble a trace.
type Suggestion struct {
	Kind   string
	Values [][2]string // key, value in the workload's key syntax
	Why    string
}

// Suggest picks the built-in workload closest to the trace: metadata when
// metadata operations dominate, otherwise mixed (mostly sequential access) or
// massive (mostly random access) with the trace's read ratio, request size and
// typical file size.
func (s *Stats) Suggest() Suggestion {
	data := s.Reads + s.Writes
	if data == 0 || s.MetadataOps > 4*data {
		return Suggestion{Kind: "metadata", Why: fmt.Sprintf("%d metadata operations against %d reads and writes", s.MetadataOps, data)}
	}
	ratio := 0.0
	if s.ReadBytes+s.WriteBytes > 0 {
		ratio = float64(s.ReadBytes) / float64(s.ReadBytes+s.WriteBytes)
	}
	block := s.ReadSizes.Median()
	if s.Reads < s.Writes {
		block = s.WriteSizes.Median()
	}
	block = clamp(block, 512, 64<<20)
	file := clamp(s.FileExtents.Median(), block, 1<<30)
	kind, why := "mixed", "mostly sequential"
	if s.RandomReads+s.RandomWrites > s.SeqReads+s.SeqWrites {
		kind, why = "massive", "mostly random"
	}
	return Suggestion{Kind: kind, Why: why + " data access", Values: [][2]string{
		{"read_ratio", strconv.FormatFloat(roundTo(ratio, 2), 'f', -1, 64)},
		{"block_size", strconv.FormatInt(block, 10)},
		{"file_size", strconv.FormatInt(file, 10)},
	}}
}

func clamp(v, lo, hi int64) int64 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

func roundTo(v float64, digits int) float64 {
	p := 1.0
	for i := 0; i < digits; i++ {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// Entry is a file or directory a trace expects to exist before its first record.
type Entry struct {
	Path string // absolute within the traced file system
	Dir  bool
	Size int64 // bytes, for files
}

type pinfo struct {
	pre     bool // existed before the trace's first record
	exists  bool // exists at this point of the trace
	dir     bool
	size    int64
	touched bool // written, truncated, moved or removed: later sightings say nothing about the initial state
}

// Prestate infers the files and directories a trace expects to find, so that
// replay can create them before it starts: whatever a successful operation used
// before the trace created it (an open without O_CREAT, a stat, an unlink, a
// rename source, the parents of any path), with sizes from stat results and
// from how far reads reached. The result lists directories before their
// contents. It is an inference: a trace cannot tell, for example, whether an
// open with O_CREAT found the file already there; replay counts any operation
// whose outcome then differs from the recorded one.
func Prestate(events []optrace.Event) []Entry {
	m := map[string]*pinfo{}
	handles := map[uint64]string{}
	ensureParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if i, ok := m[d]; ok {
				if i.pre && !i.touched {
					i.dir = true
				}
				break
			}
			m[d] = &pinfo{pre: true, exists: true, dir: true}
		}
	}
	// see returns p's info, creating it at its first sighting: existed tells
	// whether the operation shows that p was there before the trace touched it.
	see := func(p string, existed, dir bool) *pinfo {
		if i, ok := m[p]; ok {
			return i
		}
		i := &pinfo{pre: existed, exists: existed, dir: dir}
		m[p] = i
		return i
	}
	for k := range events {
		e := &events[k]
		p := path.Clean(e.Path)
		if e.Op == optrace.OpOpen && e.OK() && e.Handle != 0 {
			handles[e.Handle] = p
		}
		if p == "/" {
			continue
		}
		if !e.OK() {
			switch {
			case -e.Result == int64(syscall.ENOENT) && e.Op != optrace.OpRename && e.Op != optrace.OpLink:
				see(p, false, false)
			case -e.Result == int64(syscall.EEXIST) && (e.Op == optrace.OpMkdir || e.Op == optrace.OpOpen):
				ensureParents(p)
				see(p, true, e.Op == optrace.OpMkdir)
			}
			continue
		}
		switch e.Op {
		case optrace.OpOpen:
			ensureParents(p)
			var i *pinfo
			if e.Flags&syscall.O_CREAT != 0 {
				i = see(p, false, false)
			} else {
				i = see(p, true, e.Flags&syscall.O_DIRECTORY != 0)
			}
			i.exists = true
			if e.Flags&syscall.O_TRUNC != 0 {
				i.touched = true
			}
		case optrace.OpClose, optrace.OpFsync, optrace.OpReadlink:
			// A symlink's target is not in a trace; replay reports readlink
			// of a preexisting link as a mismatch.
		case optrace.OpRead:
			hp := handles[e.Handle]
			if hp == "" {
				hp = p
			}
			if i, ok := m[hp]; ok && i.pre && !i.touched && !i.dir {
				i.size = max(i.size, e.Offset+e.Result)
			}
		case optrace.OpWrite, optrace.OpTruncate:
			hp := p
			if e.Handle != 0 && handles[e.Handle] != "" {
				hp = handles[e.Handle]
			}
			ensureParents(hp)
			see(hp, true, false).touched = true
		case optrace.OpStat:
			ensureParents(p)
			i := see(p, true, e.Mode&syscall.S_IFMT == syscall.S_IFDIR)
			if i.pre && !i.touched && !i.dir {
				i.size = max(i.size, e.Size)
			}
		case optrace.OpReaddir:
			ensureParents(p)
			see(p, true, true)
		case optrace.OpMkdir:
			ensureParents(p)
			i := see(p, false, true)
			i.exists, i.dir = true, true
		case optrace.OpRmdir, optrace.OpUnlink:
			ensureParents(p)
			i := see(p, true, e.Op == optrace.OpRmdir)
			i.exists, i.touched = false, true
			if e.Op == optrace.OpRmdir {
				prefix := p + "/"
				for q, c := range m {
					if strings.HasPrefix(q, prefix) {
						c.exists, c.touched = false, true
					}
				}
			}
		case optrace.OpRename:
			ensureParents(p)
			src := see(p, true, false)
			dst := path.Clean(e.Path2)
			ensureParents(dst)
			// Children of a renamed directory move along; at their new paths
			// they are the trace's doing, at the old ones they stay preexisting.
			prefix := p + "/"
			for q, c := range m {
				if strings.HasPrefix(q, prefix) && c.exists {
					m[dst+"/"+strings.TrimPrefix(q, prefix)] = &pinfo{exists: true, dir: c.dir, touched: true}
					c.exists, c.touched = false, true
				}
			}
			d := see(dst, false, src.dir)
			d.exists, d.dir, d.touched = true, src.dir, true
			src.exists, src.touched = false, true
		case optrace.OpLink:
			ensureParents(p)
			see(p, true, false)
			dst := path.Clean(e.Path2)
			ensureParents(dst)
			see(dst, false, false).exists = true
		case optrace.OpSymlink:
			ensureParents(p)
			see(p, false, false).exists = true
		case optrace.OpChmod:
			ensureParents(p)
			see(p, true, false)
		}
	}
	var out []Entry
	for p, i := range m {
		if i.pre {
			e := Entry{Path: p, Dir: i.dir}
			if !i.dir {
				e.Size = i.size
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		da, db := strings.Count(out[a].Path, "/"), strings.Count(out[b].Path, "/")
		if da != db {
			return da < db
		}
		return out[a].Path < out[b].Path
	})
	return out
}
