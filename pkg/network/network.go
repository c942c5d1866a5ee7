// Package network is the network a Cairn process sees: where its servers
// listen and how its clients connect. Production code uses OS, the host's
// TCP stack; the simulation (package simnet) gives each simulated host its
// own Network, so that a whole cluster can run in one process over links
// that a test cuts, slows and heals.
//
// Every role, server and client library that opens sockets takes a Network
// (nil means OS), so that nothing below the roles reaches for package net
// on its own.
package network

import (
	"context"
	"net"
)

// Network listens and dials TCP-like stream connections. Addresses are
// host:port strings. Implementations are safe for concurrent use.
type Network interface {
	// Listen listens on addr (host:port; port 0 picks one).
	Listen(addr string) (net.Listener, error)
	// DialContext connects to addr within ctx.
	DialContext(ctx context.Context, addr string) (net.Conn, error)
}

// OS is the host's TCP stack.
var OS Network = osNetwork{}

type osNetwork struct{}

func (osNetwork) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func (osNetwork) DialContext(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// Or returns n, or OS when n is nil: configurations leave their Network
// unset to mean the host's.
func Or(n Network) Network {
	if n == nil {
		return OS
	}
	return n
}

// IsOS reports whether n is the host's TCP stack (nil or OS): callers that
// tune real sockets (socket options, sendfile) do so only then.
func IsOS(n Network) bool { return n == nil || n == OS }

// DialFunc adapts n to the dialer signature gRPC's WithContextDialer takes.
func DialFunc(n Network) func(context.Context, string) (net.Conn, error) {
	n = Or(n)
	return n.DialContext
}
