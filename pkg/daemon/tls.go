package daemon

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/cairnfs/cairn/pkg/handshake"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/pki"
)

// ListenRPC listens on addr of n (nil: the host's TCP stack) for an
// RPCServer: over mutual TLS with id
// (every connection must present a certificate of the cluster's CA before
// a byte of either protocol is read), or in plain text when id is nil.
// With TLS, each connection's handshake runs off the accept loop before
// the connection is handed to the server, within handshake.DefaultTimeout
// and the default bounds on handshakes per source address and overall
// (package handshake): connections that never finish theirs cannot take
// the places, descriptors or goroutines of authenticated ones.
func ListenRPC(n network.Network, addr string, id *pki.Identity) (net.Listener, error) {
	ln, err := network.Or(n).Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if id == nil {
		return ln, nil
	}
	cfg := id.ServerConfig()
	cfg.NextProtos = []string{"h2"} // gRPC clients require it; lightrpc asks for none
	return handshake.NewListener(ln, handshake.TLS(cfg), handshake.Options{Name: "rpc"}), nil
}

// ServerTLS is the server configuration of id, or nil (plain text) when id
// is nil.
func ServerTLS(id *pki.Identity) *tls.Config {
	if id == nil {
		return nil
	}
	return id.ServerConfig()
}

// ClientTLS is the client configuration of id, or nil (plain text) when id
// is nil.
func ClientTLS(id *pki.Identity) *tls.Config {
	if id == nil {
		return nil
	}
	return id.ClientConfig()
}
