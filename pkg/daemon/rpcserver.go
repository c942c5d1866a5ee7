package daemon

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/lightrpc"
)

// RPCServer is the RPC server every Cairn process uses: one port that
// serves the unary methods of its services in lightrpc's framing (what
// Cairn's own clients speak) and everything in gRPC (streams, and any
// other gRPC client). Services register once, for both.
type RPCServer struct {
	grpc  *grpc.Server
	light *lightrpc.Server
}

// NewRPCServer returns a server with call metrics in reg (one set for both
// protocols) and the message size bound MaxRecvMsgBytes.
func NewRPCServer(reg prometheus.Registerer) *RPCServer {
	metrics := UnaryMetrics(reg)
	return &RPCServer{
		grpc: grpc.NewServer(
			grpc.ChainUnaryInterceptor(metrics),
			grpc.MaxRecvMsgSize(MaxRecvMsgBytes),
		),
		light: lightrpc.NewServer(lightrpc.ServerOptions{Interceptor: metrics, MaxFrameBytes: MaxRecvMsgBytes}),
	}
}

// RegisterService registers impl for both protocols; it makes RPCServer a
// grpc.ServiceRegistrar. Call it before Serve.
func (s *RPCServer) RegisterService(sd *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(sd, impl)
	s.light.RegisterService(sd, impl)
}

// Serve serves ln until Stop; it owns and closes ln.
func (s *RPCServer) Serve(ln net.Listener) error {
	return s.light.Serve(ln, s.grpc.Serve)
}

// GracefulStop stops accepting and returns once the unary calls in flight
// are answered and every gRPC stream has ended.
func (s *RPCServer) GracefulStop() {
	s.light.GracefulStop()
	s.grpc.GracefulStop()
}

// Stop closes every connection at once.
func (s *RPCServer) Stop() {
	s.light.Stop()
	s.grpc.Stop()
}
