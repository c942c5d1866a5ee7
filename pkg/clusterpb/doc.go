// Package clusterpb is the cluster protocol: the cluster map (nodes,
// volumes, partitions, epochs), the master's state-machine commands and
// the master's gRPC service, generated from cluster.proto by `make proto`.
// It imports no other Cairn package.
package clusterpb
