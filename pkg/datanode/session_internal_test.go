package datanode

import (
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/pkg/pki"
)

// TestClientConnectionBound: one client identity keeps at most
// MaxClientConns data-path sessions that serve requests; past it a session
// refuses them as busy, and a closed session makes room. Nodes are not
// counted.
func TestClientConnectionBound(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	if err := pki.CreateCA(ca, "test"); err != nil {
		t.Fatal(err)
	}
	sign := func(name string, kind pki.Kind) *pki.Issued {
		is, err := pki.Sign(ca, pki.Request{Name: name, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return is
	}
	app, node := sign("app", pki.KindClient).Cert, sign("node", pki.KindNode).Cert
	h := &Host{clientConns: map[string]int{}}
	var open []*session
	for i := 0; i < MaxClientConns; i++ {
		s := h.newSession(app).(*session)
		if s.busy != nil {
			t.Fatalf("session %d refused: %v", i, s.busy)
		}
		open = append(open, s)
	}
	over := h.newSession(app).(*session)
	if over.busy == nil {
		t.Fatal("a client's session past the bound serves requests")
	}
	over.Close()
	for i := 0; i < 2*MaxClientConns; i++ {
		if s := h.newSession(node).(*session); s.busy != nil {
			t.Fatalf("a node's session %d refused: %v", i, s.busy)
		}
	}
	open[0].Close()
	if s := h.newSession(app).(*session); s.busy != nil {
		t.Fatalf("after a close: %v", s.busy)
	}
	if n := h.clientConns[pki.Serial(app)]; n != MaxClientConns {
		t.Fatalf("%d sessions counted, want %d", n, MaxClientConns)
	}
}
