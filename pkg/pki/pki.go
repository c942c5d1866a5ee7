// Package pki is Cairn's cluster certificate authority and the mutual TLS
// identities built on it (issue: every connection between cluster
// processes, and from clients, is mutual TLS 1.3).
//
// A cluster has one CA (ECDSA P-256). Every process holds an identity: a
// directory with the CA bundle (ca.crt), its certificate (tls.crt) and its
// key (tls.key), the layout of a Kubernetes TLS secret. A certificate's
// common name names the holder, and its organizational unit its kind
// (node, client or admin), which servers read to decide what the holder may
// call (daemon.Authorize).
//
// Trust is the CA's signature, not a host name: cluster processes reach
// each other at addresses the cluster map gives them, and a certificate
// valid for the CA is what proves a peer belongs to the cluster. Both ends
// verify the other's chain against the CA bundle.
//
// Purposes: only a cluster node serves. Sign issues node certificates for
// server and client use (extended key usages serverAuth and clientAuth),
// client and admin certificates for client use only. Every client side
// (ClientConfig: the SDK, mounts, admin commands, and node-to-node dials)
// refuses, during the handshake and before sending a byte of any protocol,
// a server whose certificate is not of kind node, whatever its key usages
// say: certificates issued before the purposes were split carry serverAuth
// whatever their kind, so the kind is the check that counts. A holder of a
// client or admin certificate therefore cannot pose as a master or node to
// anyone. Where the dialer knows which node it dials, it can also demand the
// common name the cluster map records for that node (ClientConfigFor,
// NodeClientConfig), so that one node cannot pose as another.
//
// Rotation without a restart: an identity rereads its files when they
// change (checked at most once a second, at handshakes), so a new
// certificate, key or CA bundle (old and new CA together during a CA
// rotation) takes effect for the next connection.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// File names inside a CA or identity directory.
const (
	CAFile   = "ca.crt"
	CAKey    = "ca.key"
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// Kind is what a certificate's holder is; it is the certificate's
// organizational unit. It decides what the certificate may be used for:
// only KindNode serves (see the package comment).
type Kind string

// Kinds of holders.
const (
	KindNode   Kind = "node"   // a cluster process: master, meta or data node
	KindClient Kind = "client" // a mount, SDK or gateway user
	KindAdmin  Kind = "admin"  // may run administrative commands
)

func (k Kind) valid() bool { return k == KindNode || k == KindClient || k == KindAdmin }

// Validity of what CreateCA and Issue sign.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	certValidity = 2 * 365 * 24 * time.Hour
)

// CreateCA creates a CA in dir (ca.crt, ca.key with mode 0600) named name.
// It refuses to overwrite an existing CA.
func CreateCA(dir, name string) error {
	if _, err := os.Stat(filepath.Join(dir, CAKey)); err == nil {
		return fmt.Errorf("create CA in %s: a CA key is already there", dir)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Cairn"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	if err := writeKey(filepath.Join(dir, CAKey), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", der, 0o644)
}

// Request describes a certificate to issue.
type Request struct {
	Name string // common name: the holder's name
	Kind Kind
	// Hosts are DNS names and IP addresses put in the certificate's
	// subject alternative names, for TLS clients that check them; Cairn's
	// own processes check the CA's signature, the kind and, where they
	// know it, the node's name, never a host name.
	Hosts []string
	// Extensions are added to the certificate as they are (a client's
	// capabilities, pkg/capability).
	Extensions []pkix.Extension
}

// Issued is a signed certificate and its key, not yet written anywhere.
type Issued struct {
	Name   string
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	bundle []byte // the CA bundle it is verified with
}

// Issue signs a certificate for req with the CA in caDir and writes the
// identity into outDir (Issued.Write).
func Issue(caDir, outDir string, req Request) error {
	is, err := Sign(caDir, req)
	if err != nil {
		return err
	}
	return is.Write(outDir)
}

// Sign signs a certificate for req, with a new key, with the CA in caDir.
// The certificate's extended key usages follow its kind (Usages): a node
// certificate may serve and connect, a client or admin certificate may only
// connect.
func Sign(caDir string, req Request) (*Issued, error) {
	if req.Name == "" || !req.Kind.valid() {
		return nil, fmt.Errorf("issue a certificate: need a name and a kind of node, client or admin (got %q, %q)", req.Name, req.Kind)
	}
	caCert, caKey, err := loadCA(caDir)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", req.Name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(certValidity)
	if caCert.NotAfter.Before(notAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:    serial,
		Subject:         pkix.Name{CommonName: req.Name, OrganizationalUnit: []string{string(req.Kind)}, Organization: []string{"Cairn"}},
		NotBefore:       now.Add(-time.Hour),
		NotAfter:        notAfter,
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     Usages(req.Kind),
		ExtraExtensions: req.Extensions,
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", req.Name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", req.Name, err)
	}
	bundle, err := os.ReadFile(filepath.Join(caDir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", req.Name, err)
	}
	return &Issued{Name: req.Name, Cert: cert, key: key, bundle: bundle}, nil
}

// Write writes the identity into outDir: ca.crt (the CA bundle), tls.crt
// and tls.key (mode 0600). An identity already in outDir is replaced,
// files renamed into place one by one, key before certificate.
func (is *Issued) Write(outDir string) error {
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return fmt.Errorf("issue %s: %w", is.Name, err)
	}
	if err := writeFileAtomic(filepath.Join(outDir, CAFile), is.bundle, 0o644); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(outDir, KeyFile), is.key); err != nil {
		return err
	}
	return writePEM(filepath.Join(outDir, CertFile), "CERTIFICATE", is.Cert.Raw, 0o644)
}

// Usages are the extended key usages Sign gives a certificate of kind k:
// serverAuth and clientAuth for a node, clientAuth alone for the other
// kinds (nil for an unknown kind).
func Usages(k Kind) []x509.ExtKeyUsage {
	switch k {
	case KindNode:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case KindClient, KindAdmin:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	return nil
}

// Serial is a certificate's serial number as revocation lists name it:
// lower-case hexadecimal.
func Serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// CAExists reports whether dir holds a CA (certificate and key).
func CAExists(dir string) bool {
	for _, f := range []string{CAFile, CAKey} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// Exists reports whether dir holds an identity (all three files).
func Exists(dir string) bool {
	for _, f := range []string{CAFile, CertFile, KeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// Identity is a process's mutual TLS identity, read from a directory and
// reread when its files change. Safe for concurrent use.
type Identity struct {
	dir string

	mu      sync.Mutex
	checked time.Time // when the files' times were last compared
	stamp   [3]time.Time
	state   *identityState

	revoked atomic.Pointer[func(serial string) bool]
}

// SetRevoked makes every later handshake refuse a peer whose certificate
// revoked reports (by Serial): the cluster's revocation list, which the
// caller keeps current. revoked must be fast and safe for concurrent use.
func (id *Identity) SetRevoked(revoked func(serial string) bool) {
	id.revoked.Store(&revoked)
}

// Revoked reports whether c is revoked by the list SetRevoked gave (false
// when none was given).
func (id *Identity) Revoked(c *x509.Certificate) bool { return id.RevokedSerial(Serial(c)) }

// RevokedSerial is Revoked for a serial already formatted (Serial).
func (id *Identity) RevokedSerial(serial string) bool {
	f := id.revoked.Load()
	return f != nil && (*f)(serial)
}

type identityState struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
}

// reloadEvery bounds how often handshakes look at the files' times.
const reloadEvery = time.Second

// Load reads the identity in dir; it fails with a clear error when a file
// is missing, unreadable, or the certificate is not signed by the bundle.
func Load(dir string) (*Identity, error) {
	id := &Identity{dir: dir}
	if err := id.reload(); err != nil {
		return nil, err
	}
	return id, nil
}

// Dir is the directory the identity is read from.
func (id *Identity) Dir() string { return id.dir }

// Certificate is the identity's certificate as last read.
func (id *Identity) Certificate() *x509.Certificate { return id.current().leaf }

// Name is the certificate's common name.
func (id *Identity) Name() string { return id.current().leaf.Subject.CommonName }

// KindOf returns the kind a certificate names, or "" if none.
func KindOf(c *x509.Certificate) Kind {
	for _, ou := range c.Subject.OrganizationalUnit {
		if k := Kind(ou); k.valid() {
			return k
		}
	}
	return ""
}

func (id *Identity) stamps() ([3]time.Time, error) {
	var st [3]time.Time
	for i, f := range []string{CAFile, CertFile, KeyFile} {
		fi, err := os.Stat(filepath.Join(id.dir, f))
		if err != nil {
			return st, fmt.Errorf("TLS identity in %s: %w", id.dir, err)
		}
		st[i] = fi.ModTime()
	}
	return st, nil
}

func (id *Identity) reload() error {
	stamp, err := id.stamps()
	if err != nil {
		return err
	}
	bundle, err := os.ReadFile(filepath.Join(id.dir, CAFile))
	if err != nil {
		return fmt.Errorf("TLS identity in %s: %w", id.dir, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return fmt.Errorf("TLS identity in %s: %s holds no certificate", id.dir, CAFile)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(id.dir, CertFile), filepath.Join(id.dir, KeyFile))
	if err != nil {
		return fmt.Errorf("TLS identity in %s: %w", id.dir, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("TLS identity in %s: %w", id.dir, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("TLS identity in %s: the certificate is not valid for its CA bundle: %w", id.dir, err)
	}
	cert.Leaf = leaf
	id.mu.Lock()
	id.state = &identityState{cert: &cert, leaf: leaf, pool: pool}
	id.stamp, id.checked = stamp, time.Now()
	id.mu.Unlock()
	return nil
}

// current returns the identity, rereading the files first if they changed
// since the last look (at most once per reloadEvery). A change that does
// not load (a rotation half written) keeps the previous identity.
func (id *Identity) current() *identityState {
	id.mu.Lock()
	st := id.state
	due := time.Since(id.checked) >= reloadEvery
	if due {
		id.checked = time.Now()
	}
	old := id.stamp
	id.mu.Unlock()
	if !due {
		return st
	}
	if stamp, err := id.stamps(); err == nil && stamp != old {
		if id.reload() == nil {
			id.mu.Lock()
			st = id.state
			id.mu.Unlock()
		}
	}
	return st
}

// verify checks a peer's chain against the current CA bundle, for use as
// VerifyPeerCertificate, and returns the peer's certificate; no host name
// is checked (see the package comment).
func (id *Identity) verify(rawCerts [][]byte, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(rawCerts) == 0 {
		return nil, errors.New("the peer sent no certificate")
	}
	certs := make([]*x509.Certificate, 0, len(rawCerts))
	for _, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return nil, fmt.Errorf("the peer's certificate: %w", err)
		}
		certs = append(certs, c)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: id.current().pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("the peer's certificate %q is not from this cluster's CA: %w", certs[0].Subject.CommonName, err)
	}
	if id.Revoked(certs[0]) {
		return nil, fmt.Errorf("the peer's certificate %q (serial %s) is revoked", certs[0].Subject.CommonName, Serial(certs[0]))
	}
	return certs[0], nil
}

// verifyServer is verify for the client side of a connection: the chain,
// then the server's kind, which must be node (the package comment), then
// its usage, then, when names returns any, its common name, which must be
// one of them. The chain is checked for any usage first so that a client
// or admin certificate is refused for its kind, the clearer reason, whether
// or not it carries serverAuth.
func (id *Identity) verifyServer(rawCerts [][]byte, names func() []string) error {
	c, err := id.verify(rawCerts, x509.ExtKeyUsageAny)
	if err != nil {
		return err
	}
	if k := KindOf(c); k != KindNode {
		return &WrongPeerError{Name: c.Subject.CommonName, Kind: k}
	}
	if !hasUsage(c, x509.ExtKeyUsageServerAuth) {
		return fmt.Errorf("the server's node certificate %q is not issued for server use (no serverAuth key usage)", c.Subject.CommonName)
	}
	if names == nil {
		return nil
	}
	if want := names(); len(want) > 0 && !slices.Contains(want, c.Subject.CommonName) {
		return &WrongPeerError{Name: c.Subject.CommonName, Kind: KindNode, Want: want}
	}
	return nil
}

// hasUsage reports whether c may be used for usage: its extended key usages
// name it or any, or it has none (no restriction, RFC 5280).
func hasUsage(c *x509.Certificate, usage x509.ExtKeyUsage) bool {
	return len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 ||
		slices.Contains(c.ExtKeyUsage, usage) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// WrongPeerError is how a client side refuses a server of this cluster's CA
// that is not the peer it meant to reach: a certificate of another kind than
// node (Want empty), or a node certificate of another name than those in
// Want. Nothing has been sent to the server when it is returned.
type WrongPeerError struct {
	Name string   // the common name of the certificate the server presented
	Kind Kind     // its kind ("" for none)
	Want []string // the node names the dialer accepted, if it named any
}

// Error says what the server presented and what was expected, in words a
// user can act on; it always contains "not a cluster node's" for a
// certificate of another kind.
func (e *WrongPeerError) Error() string {
	if e.Kind != KindNode {
		what := "a certificate of no kind"
		switch e.Kind {
		case KindClient:
			what = "a client certificate"
		case KindAdmin:
			what = "an admin certificate"
		}
		return fmt.Sprintf("the server presented %s (%q), not a cluster node's: it is no Cairn master or node, whose certificates alone may serve; nothing was sent to it", what, e.Name)
	}
	return fmt.Sprintf("the server presented the certificate of node %q, but the cluster map records %s for the node dialled; nothing was sent to it", e.Name, quoteList(e.Want))
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return "one of " + strings.Join(q, ", ")
}

// ServerConfig is the TLS configuration of a server: TLS 1.3, a client
// certificate from the cluster's CA required, with the clientAuth usage
// (every kind has it) and not revoked; what the client may call then
// depends on its kind (daemon.Authorize). Only a node's identity can
// usefully serve: clients refuse a server of any other kind (ClientConfig).
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Full-size records from the first byte: the small first records
		// of dynamic sizing help a browser render early, and here only add
		// write calls (crypto/tls writes each record with its own).
		DynamicRecordSizingDisabled: true,
		// No resumption: a resumed session skips VerifyPeerCertificate,
		// and so the revocation list and a rotated CA bundle.
		SessionTicketsDisabled: true,
		ClientAuth:             tls.RequireAnyClientCert, // verified below, against the bundle as it is now
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return id.current().cert, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := id.verify(raw, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
}

// ClientConfig is the TLS configuration of a client: TLS 1.3, this
// identity's certificate presented, the server's verified against the
// cluster's CA, the revocation list, and its purpose: the handshake fails,
// before anything is sent through it (this identity's certificate
// included), unless the server presents a certificate of kind node with
// the serverAuth usage. A client, admin or kindless certificate is refused
// with a *WrongPeerError even when it carries serverAuth (certificates
// issued before Sign split the purposes do).
func (id *Identity) ClientConfig() *tls.Config { return id.clientConfig(nil) }

// ClientConfigFor is ClientConfig for a connection to the node whose
// certificate's common name is name: a node certificate of any other name
// is refused too (a *WrongPeerError). An empty name checks the kind only,
// as ClientConfig does.
func (id *Identity) ClientConfigFor(name string) *tls.Config {
	if name == "" {
		return id.ClientConfig()
	}
	return id.clientConfig(func() []string { return []string{name} })
}

// NodeClientConfig is ClientConfigFor with the accepted names looked up at
// every handshake, so that a connection that reconnects follows the cluster
// map: names returns the common names the map records for the node dialled
// (more than one only when the map puts several nodes at its address); when
// it returns none, the kind alone is checked. names must be safe for
// concurrent use.
func (id *Identity) NodeClientConfig(names func() []string) *tls.Config {
	return id.clientConfig(names)
}

func (id *Identity) clientConfig(names func() []string) *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS13,
		DynamicRecordSizingDisabled: true, // as ServerConfig
		// The chain is verified below, without a host name (see the
		// package comment); Go's own check would require one.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return id.current().cert, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return id.verifyServer(raw, names)
		},
	}
}

// PeerName returns the common name and kind of the certificate a TLS
// connection's peer presented ("" if none).
func PeerName(cs tls.ConnectionState) (string, Kind) {
	if len(cs.PeerCertificates) == 0 {
		return "", ""
	}
	c := cs.PeerCertificates[0]
	return c.Subject.CommonName, KindOf(c)
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("read CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, fmt.Errorf("read CA key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, nil, fmt.Errorf("CA in %s: not an ECDSA certificate authority", dir)
	}
	return cert, key, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// writeFileAtomic replaces path with data: a reader sees the old file or
// the new one, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Hosts returns the addresses' hosts without ports, once each, for
// Request.Hosts.
func Hosts(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			h = a
		}
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
