package daemon

import (
	"context"
	"log/slog"
	"net"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/pki"
)

// RPCServer is the RPC server every Cairn process uses: one port that
// serves the unary methods of its services in lightrpc's framing (what
// Cairn's own clients speak) and everything in gRPC (streams, and any
// other gRPC client). Services register once, for both.
type RPCServer struct {
	grpc  *grpc.Server
	light *lightrpc.Server
}

// maxStreamsPerConn bounds the calls of one gRPC connection in flight,
// as lightrpc bounds its own per connection.
const maxStreamsPerConn = 4096

// NewRPCServer returns a server with call metrics in reg (one set for both
// protocols) and the message size bound MaxRecvMsgBytes. With an identity
// id (serve it on ListenRPC's TLS listener), every call is checked against
// the policy of Authorize by the kind of the certificate its caller
// presented, and against id's revocation list; the caller's capabilities
// are in the handler's context (capability.FromContext), and one client
// identity has at most MaxClientCalls calls in flight. A nil id serves
// plain text and checks nothing.
func NewRPCServer(reg prometheus.Registerer, id *pki.Identity) *RPCServer {
	metrics := UnaryMetrics(reg)
	unary := []grpc.UnaryServerInterceptor{recoverUnary, metrics}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxRecvMsgBytes), grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ChainStreamInterceptor(recoverStream)}
	if id != nil {
		a := newAuthorizer(id, MaxClientCalls)
		unary = append(unary, a.unary)
		opts = append(opts, grpc.Creds(newHandshakenCreds()), grpc.ChainStreamInterceptor(a.stream))
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(unary...))
	return &RPCServer{
		grpc:  grpc.NewServer(opts...),
		light: lightrpc.NewServer(lightrpc.ServerOptions{Interceptor: chainUnary(unary), MaxFrameBytes: MaxRecvMsgBytes}),
	}
}

// recoverUnary turns a handler's panic into an INTERNAL answer, logged
// with its stack, so that a bug a request reaches costs that request and
// not the process and every partition it hosts.
func recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicked(info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

// recoverStream is recoverUnary for streams.
func recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicked(info.FullMethod, r)
		}
	}()
	return handler(srv, ss)
}

func panicked(method string, r any) error {
	slog.Error("rpc handler panicked; the request fails, the server goes on", "method", method, "panic", r, "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "%s: internal error: %v", method, r)
}

// chainUnary runs interceptors in order around a handler, as
// grpc.ChainUnaryInterceptor does.
func chainUnary(chain []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(chain) == 1 {
		return chain[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(chain) - 1; i >= 0; i-- {
			ic, h := chain[i], next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, h) }
		}
		return next(ctx, req)
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
