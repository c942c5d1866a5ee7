package datanode

import (
	"log/slog"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/node"
	"github.com/cairnfs/cairn/pkg/pki"
)

// TestGrantedRequests: what a data node lets a client certificate do with
// no grant, with a grant, and with what it wrote itself; nodes and admins
// need none.
func TestGrantedRequests(t *testing.T) {
	sign := testSigner(t)
	full := map[uint64]bool{}
	h := &Host{clientConns: map[string]int{}, log: slog.Default(),
		parts: map[uint64]*partition{1: {id: 1, volume: 7}, 2: {id: 2, volume: 8}},
		env:   node.Env{VolumeFull: func(v uint64) bool { return full[v] }},
	}
	appCert := sign("app", pki.KindClient).Cert
	app, admin, nd := h.session(appCert), h.session(sign("ops", pki.KindAdmin).Cert), h.session(sign("node", pki.KindNode).Cert)
	now := time.Now()
	app.spans.Add(&grant.Grant{Mode: grant.Read, Expires: now.Add(time.Minute).Unix(), Ranges: []grant.Range{{Partition: 1, Extent: 10, Lo: 0, Hi: 4096}}})
	app.spans.Add(&grant.Grant{Mode: grant.Write, Expires: now.Add(time.Minute).Unix(), Ranges: []grant.Range{{Partition: 1, Extent: 11, Lo: 0, Hi: 1 << 20}}})
	app.ownWhole(1, 12)
	app.own(1, 13, 4096, 8192)

	hd := func(op dataproto.Op, ext uint64, off int64, n uint64) dataproto.Header {
		h := dataproto.Header{Op: op, Partition: 1, Extent: ext, Offset: off}
		switch op {
		case dataproto.OpRead, dataproto.OpFree:
			h.Arg = n
		default:
			h.Length = uint32(n)
		}
		return h
	}
	for _, tc := range []struct {
		name string
		s    *session
		h    dataproto.Header
		want dataproto.Code // 0: allowed
	}{
		{"list", app, hd(dataproto.OpListExtents, 0, 0, 0), dataproto.CodePermissionDenied},
		{"checksums", app, hd(dataproto.OpChecksums, 10, 0, 0), dataproto.CodePermissionDenied},
		{"read without a grant", app, hd(dataproto.OpRead, 99, 0, 10), dataproto.CodeNoGrant},
		{"read a granted range", app, hd(dataproto.OpRead, 10, 0, 4096), 0},
		{"read past a granted range", app, hd(dataproto.OpRead, 10, 4000, 200), dataproto.CodeNoGrant},
		{"overwrite on a read grant", app, hd(dataproto.OpOverwrite, 10, 0, 10), dataproto.CodeNoGrant},
		{"overwrite on a write grant", app, hd(dataproto.OpOverwrite, 11, 512, 10), 0},
		{"append to its own extent", app, hd(dataproto.OpAppend, 12, 1<<30, 1<<19), 0},
		{"append to another's extent", app, hd(dataproto.OpAppend, 14, 0, 10), dataproto.CodeNoGrant},
		{"read its own small file", app, hd(dataproto.OpRead, 13, 4096, 4096), 0},
		{"read the small file before its own", app, hd(dataproto.OpRead, 13, 0, 4096), dataproto.CodeNoGrant},
		{"free its own small file", app, hd(dataproto.OpFree, 13, 4096, 4096), 0},
		{"free another's small file", app, hd(dataproto.OpFree, 13, 0, 4096), dataproto.CodeNoGrant},
		{"free a whole extent not its own", app, dataproto.Header{Op: dataproto.OpFree, Partition: 1, Extent: 10, Flags: dataproto.FlagWhole}, dataproto.CodeNoGrant},
		{"create", app, hd(dataproto.OpCreateExtent, 0, 0, 0), 0},
		{"small write", app, hd(dataproto.OpWriteSmall, 0, 0, 10), 0},
		{"admin lists", admin, hd(dataproto.OpListExtents, 0, 0, 0), 0},
		{"admin reads anything", admin, hd(dataproto.OpRead, 99, 0, 10), 0},
		{"node reads anything", nd, hd(dataproto.OpRead, 99, 0, 10), 0},
	} {
		code, msg, ok := tc.s.granted(&tc.h)
		if ok != (tc.want == 0) || (!ok && code != tc.want) {
			t.Errorf("%s: granted = %v %v %q, want %v", tc.name, ok, code, msg, tc.want)
		}
	}
	full[7] = true
	app.ownWhole(2, 12)
	for _, op := range []dataproto.Op{dataproto.OpCreateExtent, dataproto.OpWriteSmall, dataproto.OpWriteChunk, dataproto.OpAppend} {
		h := hd(op, 12, 0, 10) // extent 12 is its own: an append needs no grant
		if code, _, ok := app.granted(&h); ok || code != dataproto.CodeVolumeFull {
			t.Errorf("%v in a full volume: %v %v, want volume full", op, ok, code)
		}
		h.Partition = 2 // another volume
		if _, _, ok := app.granted(&h); !ok {
			t.Errorf("%v in a volume with room refused", op)
		}
	}
	// Spans belong to the certificate, not the connection.
	other := h.session(appCert)
	if _, _, ok := other.granted(&dataproto.Header{Op: dataproto.OpRead, Partition: 1, Extent: 10, Arg: 10}); !ok {
		t.Error("a second connection of the same certificate lacks the first one's grant")
	}
}
