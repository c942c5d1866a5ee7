package clustermap

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Limits on the identity records, so that the map stays small enough to
// send whole.
const (
	MaxClients = 10000
	MaxRevoked = 100000
)

// registerClient records a newly issued client identity.
func (s *State) registerClient(now int64, c *pb.RegisterClient) error {
	cl := c.GetClient()
	switch {
	case cl == nil || cl.Name == "" || len(cl.Name) > 255:
		return fmt.Errorf("%w client: a name of 1 to 255 bytes", ErrInvalid)
	case cl.Serial == "":
		return fmt.Errorf("%w client %q: no certificate serial", ErrInvalid, cl.Name)
	case s.validClients() >= MaxClients:
		return fmt.Errorf("%w: the cluster has %d valid clients already; revoke some", ErrConflict, MaxClients)
	}
	if old, ok := s.m.Clients[cl.Name]; ok && old.RevokedUnixMs == 0 {
		return fmt.Errorf("client %q: %w (revoke it first, or pick another name)", cl.Name, ErrExists)
	}
	if _, ok := s.m.Revoked[cl.Serial]; ok {
		return fmt.Errorf("%w client %q: serial %s is revoked", ErrInvalid, cl.Name, cl.Serial)
	}
	if s.m.Clients == nil {
		s.m.Clients = map[string]*pb.Client{}
	}
	if len(s.m.Clients) >= MaxClients {
		// Full of revoked records: their serials stay revoked; forget
		// the records.
		maps.DeleteFunc(s.m.Clients, func(_ string, c *pb.Client) bool { return c.RevokedUnixMs != 0 })
	}
	rec := &pb.Client{Name: cl.Name, Serial: cl.Serial, Caps: cl.Caps, CreatedUnixMs: now, NotAfterUnixMs: cl.NotAfterUnixMs}
	s.m.Clients[cl.Name] = rec
	return nil
}

// revoke revokes a recorded client's certificate, or any certificate by
// serial. It reports whether anything changed (revoking twice is no
// change) and the serial revoked.
func (s *State) revoke(now int64, r *pb.Revoke) (string, bool, error) {
	serial, notAfter := r.Serial, r.NotAfterUnixMs
	if r.Client != "" {
		cl, ok := s.m.Clients[r.Client]
		if !ok {
			return "", false, fmt.Errorf("client %q: %w", r.Client, ErrNotFound)
		}
		if cl.RevokedUnixMs == 0 {
			cl.RevokedUnixMs = now
		}
		serial, notAfter = cl.Serial, cl.NotAfterUnixMs
	}
	if serial == "" {
		return "", false, fmt.Errorf("%w revoke: name a client or a serial", ErrInvalid)
	}
	if _, ok := s.m.Revoked[serial]; ok {
		return serial, r.Client != "", nil
	}
	if len(s.m.Revoked) >= MaxRevoked {
		s.dropExpired(now)
		if len(s.m.Revoked) >= MaxRevoked {
			return "", false, fmt.Errorf("%w: %d certificates revoked and unexpired; rotate the CA", ErrConflict, len(s.m.Revoked))
		}
	}
	if s.m.Revoked == nil {
		s.m.Revoked = map[string]int64{}
	}
	s.m.Revoked[serial] = notAfter
	for _, cl := range s.m.Clients {
		if cl.Serial == serial && cl.RevokedUnixMs == 0 {
			cl.RevokedUnixMs = now
		}
	}
	return serial, true, nil
}

// validClients counts the clients not revoked.
func (s *State) validClients() int {
	n := 0
	for _, c := range s.m.Clients {
		if c.RevokedUnixMs == 0 {
			n++
		}
	}
	return n
}

// dropExpired forgets revocations of certificates that have expired: no
// handshake accepts them anyway. An entry with no known expiry stays.
func (s *State) dropExpired(now int64) {
	maps.DeleteFunc(s.m.Revoked, func(_ string, notAfter int64) bool { return notAfter != 0 && notAfter < now })
}

// RevokedSerials lists the revoked serials, sorted.
func (s *State) RevokedSerials() []string {
	return slices.Sorted(maps.Keys(s.m.Revoked))
}

// Clients lists the recorded clients by name.
func (s *State) Clients() []*pb.Client {
	out := slices.Collect(maps.Values(s.m.Clients))
	slices.SortFunc(out, func(a, b *pb.Client) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
