// Package chunkgc recounts a volume's chunk references: it compares every
// chunk index entry's reference count with the number of times the
// volume's chunked files name the chunk, reports what differs, and plans
// the corrections that are safe.
//
// Reference rules (docs/design.md, "The chunk index"): a writer takes a
// reference before the layout that uses it commits, and a reference is
// given back only after the layout that dropped it committed (the drop
// waits on the inode's free list until the chunk's shard applies it). So a
// crash can leave a count too high (a leak: the chunk is never reclaimed)
// but never too low. A count too low, or a layout naming a chunk the index
// does not have, is a bug and is reported, never "fixed".
//
// Lowering a leaked count races with writers, so a fix is planned only for
// an entry that was quiet (unchanged) for longer than a grace that bounds
// how long a writer holds references before its layout commits, only when
// no chunk drop was pending anywhere when the layouts had been read, and
// it is applied with ChunkFix, which the shard refuses if the entry
// changed since it was read.
package chunkgc

import (
	"encoding/hex"
	"sort"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Kind names a finding.
type Kind string

// Kinds of findings.
const (
	// Leaked: the index counts more references than layouts hold (a
	// writer crashed between taking references and committing). Fixable.
	Leaked Kind = "leaked-references"
	// Missing: the index counts fewer references than layouts hold. The
	// chunk may be reclaimed while files use it: a bug, reported only.
	Missing Kind = "missing-references"
	// Dangling: a layout names a chunk the index does not have, or has
	// dead. Reads of it fail (EIO); reported only.
	Dangling Kind = "dangling-chunk"
)

// Entry is one chunk index entry as a scan read it.
type Entry struct {
	Partition uint64 // the shard holding it
	Record    *metapb.ChunkRecord
}

// Finding is one disagreement between the index and the layouts.
type Finding struct {
	Kind        Kind   `json:"kind"`
	Fingerprint string `json:"fingerprint"`
	Partition   uint64 `json:"partition,omitempty"` // the shard (0: no entry)
	IndexRefs   uint64 `json:"index_refs"`
	LayoutRefs  uint64 `json:"layout_refs"`
	Size        uint32 `json:"size"`
	// Fixable is set on a leak the plan corrects (quiet entry, no drop
	// pending); a leak left alone says why in Reason.
	Fixable bool   `json:"fixable"`
	Reason  string `json:"reason,omitempty"`
}

// Input is what a recount reads, in this order: the index entries, then
// every layout, then whether chunk drops were pending on any partition.
type Input struct {
	Entries []Entry
	// LayoutRefs counts, per fingerprint (as a string of its bytes), the
	// chunk's occurrences in all layouts.
	LayoutRefs map[string]uint64
	// LayoutSizes is a chunk's size as the layouts name it (for reports).
	LayoutSizes map[string]uint32
	// DropsPending reports whether any partition had chunk drops on its
	// free list after the layouts were read. Drops not yet applied still
	// count in the index, and a removal racing the layout scan would make
	// a recount too low: no leak is fixed then.
	DropsPending bool
	// ReadAtNs is when the index entries were read; QuietNs the grace: an
	// entry changed after ReadAtNs-QuietNs is not fixed.
	ReadAtNs, QuietNs int64
}

// Report is the result of a recount.
type Report struct {
	Entries       int       `json:"entries"`
	LayoutChunks  uint64    `json:"layout_chunks"` // occurrences in layouts
	ZeroRef       int       `json:"zero_ref"`      // live entries with no reference (the collector's)
	Dead          int       `json:"dead"`          // entries being reclaimed
	StoredBytes   uint64    `json:"stored_bytes"`  // live entries' bytes, each chunk once
	LogicalBytes  uint64    `json:"logical_bytes"` // bytes the layouts name (size x occurrences)
	Findings      []Finding `json:"findings"`
	LeakedRefs    uint64    `json:"leaked_refs"`
	LeakedBytes   uint64    `json:"leaked_bytes"` // bytes kept only by leaked references
	DropsPending  bool      `json:"drops_pending"`
	fixes         []*metapb.ChunkRecord
	fixPartitions []uint64
}

// DedupRatio is logical bytes over stored bytes (1 without sharing; 0 for
// an empty volume).
func (r *Report) DedupRatio() float64 {
	if r.StoredBytes == 0 {
		return 0
	}
	return float64(r.LogicalBytes) / float64(r.StoredBytes)
}

// Recount compares in.Entries with in.LayoutRefs. It is pure and
// deterministic: findings are sorted by kind, then fingerprint.
func Recount(in Input) *Report {
	r := &Report{Entries: len(in.Entries), DropsPending: in.DropsPending}
	seen := make(map[string]bool, len(in.Entries))
	for _, n := range in.LayoutRefs {
		r.LayoutChunks += n
	}
	for fp, n := range in.LayoutRefs {
		r.LogicalBytes += n * uint64(in.LayoutSizes[fp])
	}
	for _, e := range in.Entries {
		rec := e.Record
		fp := string(rec.GetChunk().GetFingerprint())
		seen[fp] = true
		size := rec.GetChunk().GetSize()
		if rec.GetDead() {
			r.Dead++
			if n := in.LayoutRefs[fp]; n > 0 {
				r.Findings = append(r.Findings, Finding{Kind: Dangling, Fingerprint: hexFP(fp), Partition: e.Partition, LayoutRefs: n, Size: size,
					Reason: "the entry is dead (being reclaimed)"})
			}
			continue
		}
		r.StoredBytes += uint64(size)
		refs, want := rec.GetRefs(), in.LayoutRefs[fp]
		if refs == 0 {
			r.ZeroRef++
		}
		switch {
		case refs > want:
			f := Finding{Kind: Leaked, Fingerprint: hexFP(fp), Partition: e.Partition, IndexRefs: refs, LayoutRefs: want, Size: size}
			switch {
			case in.DropsPending:
				f.Reason = "chunk drops were pending; run again when writes are quiet"
			case rec.GetMtimeNs() > in.ReadAtNs-in.QuietNs:
				f.Reason = "changed within the grace; a writer may be committing"
			default:
				f.Fixable = true
				fix := &metapb.ChunkRecord{Chunk: rec.GetChunk(), Refs: want, MtimeNs: rec.GetMtimeNs()}
				r.fixes = append(r.fixes, fix)
				r.fixPartitions = append(r.fixPartitions, e.Partition)
			}
			r.LeakedRefs += refs - want
			if want == 0 {
				r.LeakedBytes += uint64(size)
			}
			r.Findings = append(r.Findings, f)
		case refs < want:
			r.Findings = append(r.Findings, Finding{Kind: Missing, Fingerprint: hexFP(fp), Partition: e.Partition, IndexRefs: refs, LayoutRefs: want, Size: size})
		}
	}
	for fp, n := range in.LayoutRefs {
		if !seen[fp] {
			r.Findings = append(r.Findings, Finding{Kind: Dangling, Fingerprint: hexFP(fp), LayoutRefs: n, Size: in.LayoutSizes[fp],
				Reason: "no index entry"})
		}
	}
	sort.Slice(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Fingerprint < b.Fingerprint
	})
	return r
}

// Fixes returns the ChunkFix records the report plans, grouped by the
// shard that must apply them (in the order found).
func (r *Report) Fixes() map[uint64][]*metapb.ChunkRecord {
	out := map[uint64][]*metapb.ChunkRecord{}
	for i, f := range r.fixes {
		out[r.fixPartitions[i]] = append(out[r.fixPartitions[i]], f)
	}
	return out
}

// Serious reports whether the recount found a missing reference or a
// dangling chunk (a leak is not serious: it only wastes space).
func (r *Report) Serious() bool {
	for _, f := range r.Findings {
		if f.Kind != Leaked {
			return true
		}
	}
	return false
}

func hexFP(fp string) string { return hex.EncodeToString([]byte(fp)) }
