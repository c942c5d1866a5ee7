// Package dataproto is Cairn's data-path protocol: framed binary messages on
// TCP between SDK clients and data nodes, and between the data nodes of a
// partition's replication chain. The control plane and metadata use gRPC;
// this protocol exists because the data path needs pipelined chain
// replication and zero-copy reads (sendfile), which a general RPC layer does
// not give (see docs/design.md, "Data path").
//
// # Frames
//
// Every message is one frame: an 80-byte header (HeaderLen) followed by
// Length payload bytes. All integers are little-endian.
//
//	off len field
//	  0   4 magic       "CARN" (Magic)
//	  4   1 version     Version (1)
//	  5   1 op          Op
//	  6   1 flags       Flags (FlagResponse on every response)
//	  7   1 kind        extent kind for creations (1 large, 2 small)
//	  8   2 code        Code, the result (responses only; 0 = OK)
//	 10   2 reserved    must be 0
//	 12   4 length      payload bytes, at most MaxPayload
//	                    (MaxChunkPayload for an OpWriteChunk request)
//	 16   8 request id  chosen by the sender, echoed by the response
//	 24   8 partition   data partition id
//	 32   8 extent      extent id
//	 40   8 offset      byte offset in the extent (< 2^63)
//	 48   8 arg         op-specific (read length, acknowledged offset, ...)
//	 56   8 size        op-specific (committed size known to a reader,
//	                    the replica's extent size in responses; < 2^63)
//	 64   8 epoch       the sender's cluster-map epoch; in a StaleEpoch
//	                    response, the partition's epoch on the server
//	 72   4 payload crc CRC32C (Castagnoli) of the payload
//	 76   4 header crc  CRC32C of bytes [0, 76)
//
// The header CRC is checked before anything in the header is believed, so a
// corrupted length never makes a reader allocate or wait for bytes that were
// never sent; a header that fails it (or has a wrong magic, version or
// reserved field, or a length above its op's PayloadLimit) ends the
// connection, since
// the stream can no longer be framed. A payload whose CRC does not match is
// consumed and reported (ErrPayloadCRC); the connection goes on. Read
// responses sent with sendfile carry a payload CRC the server made without
// reading the bytes (a CheckedSection: the extent store combines its block
// CRCs), so the reader checks them end to end, disk to its own memory, and
// the server reads them only once, in sendfile. A section that does not
// know its CRC is sent with FlagNoCRC instead.
//
// # Pipelining, limits and deadlines
//
// A connection carries many requests at once; responses come back in any
// order and are matched by request id. Both ends bound what one connection
// may hold: a client (Conn) has at most ConnOptions.MaxInflight calls
// outstanding and Start waits for a free slot; a server (Server) reads the
// next request only while fewer than ServerOptions.MaxInflight are being
// handled, so a fast client is slowed to the server's pace and memory per
// connection stays below MaxInflight × MaxChunkPayload. Every read and write has a
// deadline: a write must finish within WriteTimeout; while calls are
// outstanding a response (any response) must arrive within ReadTimeout, or
// the connection is declared broken and every outstanding call fails; an
// idle connection is closed after IdleTimeout.
//
// Requests on one connection reach the server's handler in the order they
// were sent (Conn.Start calls are serialized, and the server reads one
// connection with one goroutine). The data node relies on this: the packets
// of one extent, sent in order on one connection, are appended in order.
//
// # Chunks
//
// OpWriteChunk carries a content-addressed chunk (pkg/chunker). The
// 33-byte fingerprint (FingerprintLen: the algorithm byte, then the
// SHA-256 of the chunk) travels at the start of the payload, not in the
// header: the 80-byte header has no 33 free bytes, and growing it would
// make every existing frame undecodable. So the header layout is
// unchanged, and only an OpWriteChunk request may exceed MaxPayload, by
// exactly the fingerprint (MaxChunkPayload), which keeps a chunk of the
// chunker's default maximum (1 MiB = MaxChunk) writable in one frame and
// readable with one OpRead. The payload CRC covers fingerprint and bytes
// alike; a client sends the fingerprint as Request.Prefix so the chunk is
// not copied. A chunk above MaxChunk cannot be framed (Conn.Start refuses
// it with ErrTooLarge before sending; a peer receiving such a header drops
// the connection). Chunk layouts with a larger maximum (the VarFS reference
// point, 8 MiB) are therefore not storable as single chunks: allowing
// them would raise the per-connection memory bound eightfold. A peer that
// predates OpWriteChunk answers it with CodeBadRequest, or drops the
// connection if the chunk frame exceeds its MaxPayload; every other frame
// is unchanged.
package dataproto
