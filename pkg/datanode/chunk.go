package datanode

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/extentstore"
)

// The wire fingerprint is a chunker.Fingerprint: this conversion stops
// compiling if the two sizes ever differ.
var _ = chunker.Fingerprint([dataproto.FingerprintLen]byte{})

// checkChunk splits an OpWriteChunk payload and, with hash, checks that the
// bytes hash to the fingerprint it names. It is pure, so every replica
// runs the same check and tests need no node.
func checkChunk(payload []byte, hash bool) (chunker.Fingerprint, []byte, dataproto.Code, error) {
	raw, data, err := dataproto.SplitChunk(payload)
	if err != nil {
		return chunker.Fingerprint{}, nil, dataproto.CodeBadRequest, err
	}
	fp := chunker.Fingerprint(raw)
	if !fp.Algorithm().Valid() {
		return fp, nil, dataproto.CodeBadRequest, fmt.Errorf("chunk fingerprint %v names unknown algorithm %d", fp, raw[0])
	}
	if !hash {
		return fp, data, dataproto.CodeOK, nil
	}
	if got := chunker.Sum(fp.Algorithm(), data); got != fp {
		return fp, nil, dataproto.CodeFingerprintMismatch, fmt.Errorf("chunk of %d bytes hashes to %v, not to its fingerprint %v", len(data), got, fp)
	}
	return fp, data, dataproto.CodeOK, nil
}

// appendPieces appends data at off of extent ext in pieces of at most
// piece bytes (a small extent takes at most the small-file threshold per
// append, and a chunk may be larger). It returns the extent's size; on
// failure, partial reports whether some pieces were appended, which leaves
// the extent longer on this replica than on its peers.
func appendPieces(st *extentstore.Store, ext uint64, off int64, data []byte, piece int) (size int64, partial bool, err error) {
	size = off
	for len(data) > 0 {
		n := min(len(data), piece)
		if size, err = st.Append(ext, off, data[:n]); err != nil {
			return size, partial, err
		}
		partial = true
		off += int64(n)
		data = data[n:]
	}
	return size, false, nil
}

// chunkPiece is the largest single append writeChunk makes.
func (h *Host) chunkPiece() int { return max(1, min(h.opts.maxWrite(), h.opts.smallMax())) }

// writeChunk stores a content-addressed chunk. The primary first checks the
// bytes against the fingerprint, on the reader goroutine and before
// anything is stored or forwarded, so a chunk that does not match its
// fingerprint is nowhere. A follower hashes again only a frame without a
// payload CRC: one with the client's CRC (checked on receipt) holds exactly
// the bytes the primary hashed, and hashing 3 times per byte instead of
// once made chunked writes CPU-bound (docs/design.md). The primary then packs it exactly as writeSmall
// packs a small file (a leased small extent, at its end, the lease held
// until the chain answered); replicas append it at the primary's offset as
// a forwarded append with FlagCreate does.
func (s *session) writeChunk(in *dataproto.Inbound) {
	r := s.begin(in)
	p, chain, pos, ok := s.target(r, true)
	if !ok {
		in.Release()
		return
	}
	h := in.Header
	forwarded := h.Flags&dataproto.FlagForwarded != 0
	if forwarded && (h.Extent == 0 || h.Flags&dataproto.FlagCreate == 0) {
		in.Release()
		r.fail(dataproto.CodeBadRequest, "forwarded chunk: extent %d, flags %b", h.Extent, h.Flags)
		return
	}
	_, data, code, err := checkChunk(in.Payload, !forwarded || h.Flags&dataproto.FlagNoCRC != 0)
	if err != nil {
		in.Release()
		if code == dataproto.CodeFingerprintMismatch {
			s.h.m.chunkMismatches.Inc()
		}
		r.fail(code, "partition %d on node %d: %v; nothing stored", h.Partition, s.h.env.NodeID, err)
		return
	}
	n := len(data)
	st := p.st()
	role := "primary"
	var lease *extentstore.SmallLease
	ext, off := h.Extent, h.Offset
	if forwarded {
		role = "replica"
		if err := st.CreateExtent(ext, extentstore.KindSmall); err != nil && !errors.Is(err, extentstore.ErrExists) {
			in.Release()
			r.storeErr(err)
			return
		}
	} else {
		p.raiseIDs()
		ctx, cancel := context.WithTimeout(in.Context(), s.h.opts.LeaseTimeout)
		lease, err = st.LeaseSmall(ctx)
		cancel()
		if err != nil {
			in.Release()
			r.storeErr(err)
			return
		}
		ext = lease.Extent()
		info, err := st.Stat(ext)
		if err != nil {
			in.Release()
			lease.Release()
			r.storeErr(err)
			return
		}
		off = info.Size
	}
	size, partial, err := appendPieces(st, ext, off, data, s.h.chunkPiece())
	if err != nil {
		in.Release()
		switch {
		case lease != nil && partial:
			lease.Retire() // this replica now holds bytes its peers lack
		case lease != nil:
			lease.Release()
		case errors.Is(err, extentstore.ErrOffset) || errors.Is(err, extentstore.ErrNotFound):
			p.wakeup() // this replica is behind the primary: align
		}
		r.storeErr(err)
		return
	}
	seq := p.appendSeq.Add(1)
	if forwarded {
		p.noteAppend(ext)
	}
	fh := h
	fh.Extent, fh.Offset = ext, off
	fh.Flags |= dataproto.FlagCreate
	fh.Kind = uint8(extentstore.KindSmall)
	call, next, ferr := s.forwardAfterAppend(in.Context(), p, chain, pos, fh, in.Payload)
	in.Release()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if !s.finishChain(r, p, seq, call, next, ferr) {
			if lease != nil {
				// The replicas may now disagree on the extent's size: no
				// further chunk or small file goes there.
				lease.Retire()
			}
			return
		}
		if lease != nil {
			lease.Release()
		}
		s.h.m.chunkWrites.WithLabelValues(role).Inc()
		s.h.m.chunkBytes.WithLabelValues(role).Add(float64(n))
		receipt := s.own(r.in.Header.Partition, ext, uint64(off), uint64(off)+uint64(n))
		r.ok(dataproto.Header{Extent: ext, Offset: off, Arg: uint64(off) + uint64(n), Size: size, Kind: uint8(extentstore.KindSmall)}, receipt)
	}()
}
