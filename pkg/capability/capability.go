// Package capability is what a client identity may do: the volume it may
// reach, the subtree of that volume, whether it may change anything, and
// how the user and group ids it claims map onto the cluster's (root squash,
// id maps).
//
// Capabilities travel inside the client's certificate (an X.509 extension
// signed by the cluster's CA, written by 'cairn client create'), so every
// server enforces them from the connection alone: no table to look up, no
// window in which a server that has not heard of a new client refuses it.
// The master keeps a record of every client it issued, for listing and
// revocation; changing a client's capabilities is a revoke and a create.
//
// A certificate without the extension carries no restriction: a client
// certificate issued with 'cairn cert issue', or a node or admin one.
package capability

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Nobody is the id root becomes under root squash (the NFS and CephFS
// convention).
const Nobody = 65534

// OID names the certificate extension holding a client's capabilities. It
// sits under the arc of UUID-named objects (2.25, ITU-T X.667), which needs
// no registration, with 31 random bits where a whole UUID would go:
// Go's certificate parser takes no arc above 2^31-1. A clash with another
// private extension would need the same 31 bits, in a certificate of this
// cluster's CA.
var OID = asn1.ObjectIdentifier{2, 25, 1217963411, 1}

// IDRange maps Count consecutive ids starting at Client, as the client
// claims them, to the ids starting at Cluster.
type IDRange struct {
	Client  uint32 `json:"client"`
	Cluster uint32 `json:"cluster"`
	Count   uint32 `json:"count"`
}

// Caps are a client's capabilities. The zero value restricts nothing.
type Caps struct {
	// Volume, if set, is the only volume the client may reach, by name
	// and by id (a volume deleted and created again under the name is
	// another volume).
	Volume   string `json:"volume,omitempty"`
	VolumeID uint64 `json:"volume_id,omitempty"`
	// Path, if set and not "/", is the only subtree of the volume the
	// client may resolve, list or open; RootIno is that directory's inode
	// number when the client was created. Inode numbers never change, so
	// the restriction follows the directory across renames.
	Path    string `json:"path,omitempty"`
	RootIno uint64 `json:"root_ino,omitempty"`
	// ReadOnly clients change nothing: every change is EROFS.
	ReadOnly bool `json:"read_only,omitempty"`
	// RootSquash makes uid and gid 0, after the maps, Nobody.
	RootSquash bool      `json:"root_squash,omitempty"`
	UIDMap     []IDRange `json:"uid_map,omitempty"`
	GIDMap     []IDRange `json:"gid_map,omitempty"`
}

// Restricted reports whether c limits anything.
func (c Caps) Restricted() bool {
	return c.VolumeID != 0 || c.Subtree() || c.ReadOnly || c.RootSquash || len(c.UIDMap) > 0 || len(c.GIDMap) > 0
}

// Subtree reports whether the client is confined below a directory.
func (c Caps) Subtree() bool { return c.RootIno != 0 && c.Path != "" && c.Path != "/" }

// MapsIDs reports whether the ids the client claims are not the ids the
// cluster uses.
func (c Caps) MapsIDs() bool { return c.RootSquash || len(c.UIDMap) > 0 || len(c.GIDMap) > 0 }

// AllowsVolume reports whether the client may reach volume id.
func (c Caps) AllowsVolume(id uint64) bool { return c.VolumeID == 0 || c.VolumeID == id }

// UID maps a uid the client claims to the cluster's.
func (c Caps) UID(uid uint32) uint32 { return c.mapID(c.UIDMap, uid) }

// GID maps a gid the client claims to the cluster's.
func (c Caps) GID(gid uint32) uint32 { return c.mapID(c.GIDMap, gid) }

// OwnerUID maps a uid the client names as an owner to set (chown) to the
// cluster's: by the uid map only. Root squash is about who the caller is,
// not about the ids it names: a squashed caller's chown to root is refused
// as any unprivileged caller's is.
func (c Caps) OwnerUID(uid uint32) uint32 { return mapRange(c.UIDMap, uid) }

// OwnerGID is OwnerUID for a group.
func (c Caps) OwnerGID(gid uint32) uint32 { return mapRange(c.GIDMap, gid) }

func (c Caps) mapID(m []IDRange, id uint32) uint32 {
	id = mapRange(m, id)
	if c.RootSquash && id == 0 {
		return Nobody
	}
	return id
}

// ClientUID maps a cluster uid back to the client's: the inverse of the
// uid map, so that a mount shows a client's users their own files as
// theirs. Ids outside the map are shown as they are (nobody too).
func (c Caps) ClientUID(uid uint32) uint32 { return unmapRange(c.UIDMap, uid) }

// ClientGID is ClientUID for a group.
func (c Caps) ClientGID(gid uint32) uint32 { return unmapRange(c.GIDMap, gid) }

func unmapRange(m []IDRange, id uint32) uint32 {
	for _, r := range m {
		if id >= r.Cluster && uint64(id) < uint64(r.Cluster)+uint64(r.Count) {
			return r.Client + (id - r.Cluster)
		}
	}
	return id
}

func mapRange(m []IDRange, id uint32) uint32 {
	for _, r := range m {
		if id >= r.Client && uint64(id) < uint64(r.Client)+uint64(r.Count) {
			return r.Cluster + (id - r.Client)
		}
	}
	return id
}

// Validate reports what is wrong with c, if anything.
func (c Caps) Validate() error {
	if c.Path != "" {
		if !strings.HasPrefix(c.Path, "/") || path.Clean(c.Path) != c.Path {
			return fmt.Errorf("path %q: give an absolute path with no . or .. components and no trailing /", c.Path)
		}
		if c.Path != "/" && c.VolumeID == 0 {
			return errors.New("a path restriction needs a volume")
		}
	}
	for _, m := range [][]IDRange{c.UIDMap, c.GIDMap} {
		for i, r := range m {
			if r.Count == 0 {
				return fmt.Errorf("id map %d: count 0", i)
			}
			if uint64(r.Client)+uint64(r.Count) > 1<<32 || uint64(r.Cluster)+uint64(r.Count) > 1<<32 {
				return fmt.Errorf("id map %d: %d ids from %d or %d run past 2^32", i, r.Count, r.Client, r.Cluster)
			}
			for _, o := range m[:i] {
				if r.Client < o.Client+o.Count && o.Client < r.Client+r.Count {
					return fmt.Errorf("id maps overlap: %s and %s", o, r)
				}
			}
		}
	}
	return nil
}

// String is the map in the form ParseIDRange reads.
func (r IDRange) String() string { return fmt.Sprintf("%d:%d:%d", r.Client, r.Cluster, r.Count) }

// ParseIDRange reads CLIENT:CLUSTER[:COUNT] (COUNT 1 when absent).
func ParseIDRange(s string) (IDRange, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return IDRange{}, fmt.Errorf("id map %q: want CLIENT:CLUSTER[:COUNT]", s)
	}
	var n [3]uint64
	n[2] = 1
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return IDRange{}, fmt.Errorf("id map %q: %q is not an id", s, p)
		}
		n[i] = v
	}
	return IDRange{Client: uint32(n[0]), Cluster: uint32(n[1]), Count: uint32(n[2])}, nil
}

// Extension is c as a certificate extension, for pki.Request.
func (c Caps) Extension() (pkix.Extension, error) {
	if err := c.Validate(); err != nil {
		return pkix.Extension{}, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return pkix.Extension{}, err
	}
	return pkix.Extension{Id: OID, Value: b}, nil
}

// FromCert returns the capabilities in cert: the zero Caps when it has
// none, an error when the extension is there but unreadable (a server
// refuses such a peer rather than guess).
func FromCert(cert *x509.Certificate) (Caps, error) {
	for _, e := range cert.Extensions {
		if !e.Id.Equal(OID) {
			continue
		}
		var c Caps
		if err := json.Unmarshal(e.Value, &c); err != nil {
			return Caps{}, fmt.Errorf("capabilities of %q: %w", cert.Subject.CommonName, err)
		}
		if err := c.Validate(); err != nil {
			return Caps{}, fmt.Errorf("capabilities of %q: %w", cert.Subject.CommonName, err)
		}
		return c, nil
	}
	return Caps{}, nil
}

// FromTLS returns the capabilities of the certificate a client
// configuration presents (the zero Caps when it presents none).
func FromTLS(conf *tls.Config) (Caps, error) {
	if conf == nil || conf.GetClientCertificate == nil && len(conf.Certificates) == 0 {
		return Caps{}, nil
	}
	var cert *tls.Certificate
	if conf.GetClientCertificate != nil {
		c, err := conf.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			return Caps{}, err
		}
		cert = c
	} else {
		cert = &conf.Certificates[0]
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return Caps{}, nil
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return Caps{}, err
		}
	}
	return FromCert(leaf)
}

type ctxKey struct{}

// NewContext returns ctx carrying the caller's capabilities (servers put
// them there from the connection's certificate).
func NewContext(ctx context.Context, c Caps) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the caller's capabilities: the zero Caps (no
// restriction) for a caller without any, such as a cluster node or a
// server in plain text.
func FromContext(ctx context.Context) Caps {
	c, _ := ctx.Value(ctxKey{}).(Caps)
	return c
}
