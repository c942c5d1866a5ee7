package dataproto

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Connections are authenticated with a mutual TLS handshake (both ends
// present a certificate of the cluster's CA, pkg/pki). What follows depends
// on the server, which says so in one byte sent through TLS once the
// handshake is over:
//
//   - modeCRC: the frames travel outside TLS, on the TCP connection the
//     handshake authenticated, protected by their CRC32C like before (the
//     model of Ceph's msgr2 "crc" mode). Reads keep sendfile(2) and no byte
//     is encrypted: on this project's test machine full TLS halved the
//     3-replica sequential write rate (docs/design.md, "Security"). An
//     active attacker on the path can still alter frames; a passive one can
//     read them.
//   - modeSecure: the frames travel inside TLS (AES-GCM), at that cost.
//
// The byte is read through TLS, so it is authenticated, and it is also how
// a client learns that the server refused its certificate: TLS 1.3 reports
// that after the client's side of the handshake has returned. Neither side
// writes anything else through TLS in CRC mode, and the client sends its
// first frame only after the byte, so neither TLS layer can have read
// ahead into the raw stream.
const (
	modeCRC    byte = 'c'
	modeSecure byte = 's'
)

// authServer authenticates nc as a server with cfg, within ctx, and
// returns the connection the frames travel on and the certificate the
// client presented. The server's handshake listener bounds it
// (handshake.DefaultTimeout, with nc's deadline set to ctx's); a client's
// side is bounded by its dial timeout.
func authServer(ctx context.Context, nc net.Conn, cfg *tls.Config, encrypt bool) (net.Conn, *x509.Certificate, error) {
	tc := tls.Server(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	var peer *x509.Certificate
	if st := tc.ConnectionState(); len(st.PeerCertificates) > 0 {
		peer = st.PeerCertificates[0]
	}
	mode := modeCRC
	if encrypt {
		mode = modeSecure
	}
	if _, err := tc.Write([]byte{mode}); err != nil {
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if encrypt {
		return tc, peer, nil
	}
	return nc, peer, nil
}

// authClient authenticates nc as a client with cfg, within ctx's deadline,
// and returns the connection the frames travel on, in the mode the server
// chose.
func authClient(ctx context.Context, nc net.Conn, cfg *tls.Config) (net.Conn, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	var mode [1]byte
	if _, err := io.ReadFull(tc, mode[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("TLS handshake (the server refused this client's certificate?): %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	switch mode[0] {
	case modeCRC:
		return nc, nil
	case modeSecure:
		return tc, nil
	default:
		return nil, fmt.Errorf("TLS handshake: the server chose an unknown mode %q", mode[0])
	}
}
