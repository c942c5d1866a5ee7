// Package transportpb is the wire format of the multi-raft transport: the
// batches of Raft messages one host sends another, and the service that
// carries them, generated from transport.proto by `make proto`.
package transportpb
