package multiraft

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := NewHost(Config{NodeID: 1, DB: db, Transport: nopTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(h))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cairn_raft_groups Raft groups on this host.
# TYPE cairn_raft_groups gauge
cairn_raft_groups 0
`), "cairn_raft_groups"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n < len(counterNames)+2 {
		t.Fatalf("gathered %d metrics, err %v", n, err)
	}
}

type nopTransport struct{}

func (nopTransport) Send(*Batch) {}
