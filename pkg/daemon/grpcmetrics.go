package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// UnaryMetrics returns a server interceptor that counts gRPC calls by method and
// code and records their latency in reg.
func UnaryMetrics(reg prometheus.Registerer) grpc.UnaryServerInterceptor {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_grpc_server_calls_total", Help: "gRPC calls served, by method and status code.",
	}, []string{"method", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cairn_grpc_server_seconds", Help: "gRPC call latency, by method.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
	}, []string{"method"})
	reg.MustRegister(calls, latency)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
		calls.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
		return resp, err
	}
}

// MaxRecvMsgBytes bounds one inbound gRPC message. Raft snapshots travel as one
// message until snapshot streaming exists, so the bound is far above gRPC's
// 4 MiB default: a meta partition of a million files snapshots to about 60 MB.
const MaxRecvMsgBytes = 512 << 20
