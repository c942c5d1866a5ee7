package localcluster

import (
	"fmt"
	"path/filepath"

	"github.com/cairnfs/cairn/pkg/pki"
)

// Identities of a `cairn up` cluster, under <data dir>/tls: the CA, the
// identity its masters and nodes share, the admin identity its mount and
// the command line use, and the S3 gateway's client identity, bound to the
// volume it serves (s3.go).
const (
	CAIdentity    = "ca"
	NodeIdentity  = "node"
	AdminIdentity = "admin"
	S3Identity    = "s3"
)

// TLSDir is the directory of identity who (or of the CA) in the cluster
// whose data dir is dataDir.
func TLSDir(dataDir, who string) string { return filepath.Join(dataDir, "tls", who) }

// ensureCerts creates, on the first start, the cluster's CA and the node
// and admin identities; later starts keep them. The node certificate names
// every address of the layout, for TLS clients that check host names.
func (c *Cluster) ensureCerts() error {
	ca := TLSDir(c.dir, CAIdentity)
	if !pki.CAExists(ca) {
		if err := pki.CreateCA(ca, "cairn-up CA "+filepath.Base(c.dir)); err != nil {
			return fmt.Errorf("cairn up: %w", err)
		}
	}
	var addrs []string
	for _, p := range c.layout.Procs {
		addrs = append(addrs, p.Addr, p.DataAddr)
	}
	for _, id := range []struct {
		name  string
		kind  pki.Kind
		hosts []string
	}{
		{NodeIdentity, pki.KindNode, append(pki.Hosts(addrs...), "localhost")},
		{AdminIdentity, pki.KindAdmin, nil},
	} {
		dir := TLSDir(c.dir, id.name)
		if pki.Exists(dir) {
			continue
		}
		if err := pki.Issue(ca, dir, pki.Request{Name: "cairn-up-" + id.name, Kind: id.kind, Hosts: id.hosts}); err != nil {
			return fmt.Errorf("cairn up: %w", err)
		}
	}
	return nil
}
