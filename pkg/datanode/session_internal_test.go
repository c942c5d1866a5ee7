package datanode

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/pkg/pki"
)

// testSigner returns a function that signs certificates with a new CA.
func testSigner(t *testing.T) func(name string, kind pki.Kind) *pki.Issued {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca")
	if err := pki.CreateCA(ca, "test"); err != nil {
		t.Fatal(err)
	}
	return func(name string, kind pki.Kind) *pki.Issued {
		is, err := pki.Sign(ca, pki.Request{Name: name, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return is
	}
}

// TestClientConnectionBound: one client identity keeps at most
// MaxClientConns data-path sessions; past it the connection gets none
// (the server closes it), and a closed session makes room. Nodes are not
// counted.
func TestClientConnectionBound(t *testing.T) {
	sign := testSigner(t)
	app, node := sign("app", pki.KindClient).Cert, sign("node", pki.KindNode).Cert
	h := &Host{clientConns: map[string]int{}, log: slog.Default()}
	var open []*session
	for i := 0; i < MaxClientConns; i++ {
		s := h.session(app)
		if s == nil {
			t.Fatalf("session %d refused", i)
		}
		open = append(open, s)
	}
	if h.newSession(app) != nil {
		t.Fatal("a client's connection past the bound got a session")
	}
	for i := 0; i < 2*MaxClientConns; i++ {
		if h.session(node) == nil {
			t.Fatalf("a node's session %d refused", i)
		}
	}
	open[0].Close()
	if h.session(app) == nil {
		t.Fatal("refused after a close")
	}
	if n := h.clientConns[pki.Serial(app)]; n != MaxClientConns {
		t.Fatalf("%d sessions counted, want %d", n, MaxClientConns)
	}
}
