// Package lightrpc carries the unary methods of Cairn's gRPC services over a
// lighter framing than HTTP/2, on the same port: the generated gRPC clients
// and servers, their interceptors, status codes and trailers stay as they
// are, and only the bytes on the wire and the work per call change.
//
// Why: on the metadata path a gRPC unary call costs a stream set-up, HPACK
// headers, a hand-off to the transport's writer goroutine and a flush per
// message on both sides; profiles of a meta node and of the mount under a
// create load put about half of their CPU there (docs/performance.md).
// storj.io/drpc, the lighter protobuf RPC considered first, runs one call
// per connection, carries no deadline or trailer, and closes the connection
// when a call is cancelled; Cairn's leader redirects travel in a trailer and
// its meta nodes budget follow-up work by the caller's deadline.
//
// Protocol. The client opens a TCP connection and writes Preface; the
// server answers with Preface and from then on both sides exchange frames,
// any number of calls interleaved on the connection:
//
//	frame    = length u32 | kind u8 | call id u64 | body     (little-endian;
//	           length counts the bytes after itself)
//	request  = timeout µs u64 (0: none) | method length u16 | method | message
//	notify   = a request body, for a one-way call: nothing answers it
//	cancel   = (empty): the caller gave up on the call
//	response = code u32 | status message length u32 | status message |
//	           trailer pairs u16 | (length u16 | bytes)* | message
//
// Messages are protocol buffers; a response with a non-zero code (a gRPC
// status code) has no message. A server sees a connection that does not
// start with Preface as gRPC's and hands it to the gRPC server, so both
// protocols share the port, and a client that finds a server answering
// anything else uses gRPC to it for a while. Every length is bounded; a
// frame that breaks the format closes its connection and nothing else.
//
// Writes are coalesced: concurrent calls on one connection share write
// system calls (see writer). The server runs each call on a pooled worker
// goroutine whose stack has already grown, and answers in any order. A
// one-way call (Conn.Notify) runs on the connection's reader before the
// next frame is read: one-way calls run in the order sent, and a sender
// faster than the handler is held back by TCP. A server of an earlier
// version closes a connection that sends one, so a client sends them only
// to a server that said, in an answer on the same connection, that it
// takes them (the Raft transport's Deliver does this).
package lightrpc
