package clustermap

import "net"

// MetricsEndpoint completes a reported metrics address whose host is
// empty or unspecified with the host of the node's gRPC address.
func MetricsEndpoint(metrics, grpcAddr string) string {
	if metrics == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(metrics)
	if err != nil {
		return metrics
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return metrics
	}
	ghost, _, err := net.SplitHostPort(grpcAddr)
	if err != nil || ghost == "" {
		ghost = "127.0.0.1"
	}
	if ip := net.ParseIP(ghost); ip != nil && ip.IsUnspecified() {
		ghost = "127.0.0.1"
	}
	return net.JoinHostPort(ghost, port)
}
