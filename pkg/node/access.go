package node

import (
	"crypto/tls"
	"slices"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// What the node's last heartbeat says about who may do what: the names of
// its peers' certificates (checked when it dials them), the revoked
// certificates, the keys of extent grants and the full volumes.

// peerNames returns the certificate names the last heartbeat records for
// the nodes that match: those a connection to such a node must be shown
// (none: the map records none, any node is accepted).
func (n *Node) peerNames(match func(id uint64) bool) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	for id, name := range n.assignment.NodeCertNames {
		if match(id) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// peerTLSByID is the Raft transport's configuration per peer
// (multiraft.WithPeerTLS): the peer must show the certificate name the map
// records for it. Nil in plain text.
func (n *Node) peerTLSByID() func(multiraft.NodeID) *tls.Config {
	if n.cfg.TLS == nil {
		return nil
	}
	return func(peer multiraft.NodeID) *tls.Config {
		return n.cfg.TLS.NodeClientConfig(func() []string {
			return n.peerNames(func(id uint64) bool { return id == uint64(peer) })
		})
	}
}

// peerTLSByAddr is Env.PeerTLS: a connection to addr must be shown the
// certificate name of a node the map puts at addr (gRPC or data path).
// Nil in plain text.
func (n *Node) peerTLSByAddr() func(addr string) *tls.Config {
	if n.cfg.TLS == nil {
		return nil
	}
	return func(addr string) *tls.Config {
		return n.cfg.TLS.NodeClientConfig(func() []string {
			// Called with n.mu held by peerNames.
			return n.peerNames(func(id uint64) bool {
				return n.assignment.NodeAddrs[id] == addr || n.assignment.NodeDataAddrs[id] == addr
			})
		})
	}
}

// setRevoked replaces the revocation list.
func (n *Node) setRevoked(serials []string) {
	m := make(map[string]bool, len(serials))
	for _, s := range serials {
		m[s] = true
	}
	n.revoked.Store(&m)
}

// isRevoked reports whether serial is on the revocation list.
func (n *Node) isRevoked(serial string) bool {
	m := n.revoked.Load()
	return m != nil && (*m)[serial]
}

// volumeFull reports whether the last heartbeat named volume full.
func (n *Node) volumeFull(volume uint64) bool {
	m := n.full.Load()
	return m != nil && (*m)[volume]
}

// setGrantState takes the grant keys and full volumes of a heartbeat's
// answer.
func (n *Node) setGrantState(resp *pb.HeartbeatResponse) {
	// Key ids are never reused: the same ids are the same keys.
	if !slices.EqualFunc(resp.GrantKeys, n.lastGrantKeys, func(a, b *pb.GrantKey) bool { return a.Id == b.Id }) {
		n.grants.Set(clustermap.GrantKeysOf(resp.GrantKeys))
		n.lastGrantKeys = resp.GrantKeys
	}
	full := make(map[uint64]bool, len(resp.FullVolumes))
	for _, v := range resp.FullVolumes {
		full[v] = true
	}
	n.full.Store(&full)
}
