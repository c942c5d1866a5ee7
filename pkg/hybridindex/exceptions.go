package hybridindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
)

// Kind says how a name is placed. The zero value is Hashed, so a name
// without an exception-table entry needs no explicit kind.
type Kind uint8

const (
	// Hashed: the record lives on the owner of SlotOf(name). One hop.
	Hashed Kind = iota
	// PathWalk: the record lives on the owner of SlotOfParent(parent, name).
	// A client without the parent's inode number needs a second hop.
	PathWalk
	// Override: the record lives on the MP named in the Redirect. One hop.
	Override
)

// String returns "hashed", "path-walk", "override" or "kind(N)".
func (k Kind) String() string {
	switch k {
	case Hashed:
		return "hashed"
	case PathWalk:
		return "path-walk"
	case Override:
		return "override"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Redirect is an exception-table entry. Kind is PathWalk or Override; MP is
// the target meta partition of an Override and zero for a PathWalk.
type Redirect struct {
	Kind Kind
	MP   uint64
}

// MaxEntries bounds the exception table. FalconFS needs on the order of one
// entry per MP; the bound keeps a corrupt or runaway table from being
// shipped to every client.
const MaxEntries = 1 << 16

// ErrInvalidRedirect is wrapped by the errors of ExceptionTable.Set for a
// Kind other than PathWalk or Override, a PathWalk with a non-zero MP, or an
// Override to MP 0 (partition ids start at 1).
var ErrInvalidRedirect = errors.New("invalid redirect")

// ErrTableFull is wrapped by the error of ExceptionTable.Set when a new name
// would take the table past MaxEntries.
var ErrTableFull = errors.New("exception table full")

var errNilTable = errors.New("exception table: nil *ExceptionTable")

// ErrCorrupt is wrapped by every error of ExceptionTable.UnmarshalBinary.
var ErrCorrupt = errors.New("corrupt exception table encoding")

// ExceptionTable maps names to redirections and carries a version that
// increases by exactly one on every call that changes its contents, so two
// replicas that apply the same changes in the same order agree on contents
// and version. The zero value is an empty table at version 0, ready to use.
// A nil *ExceptionTable reads as empty. It is not safe for concurrent
// mutation; readers of a shared table should use a Clone.
type ExceptionTable struct {
	version uint64
	entries map[string]Redirect
}

// NewExceptionTable returns an empty table at version 0.
func NewExceptionTable() *ExceptionTable {
	return &ExceptionTable{}
}

// Version returns the number of changes applied since the empty table
// (restored by UnmarshalBinary).
func (t *ExceptionTable) Version() uint64 {
	if t == nil {
		return 0
	}
	return t.version
}

// Len returns the number of entries.
func (t *ExceptionTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Get returns the entry for name and whether there is one.
func (t *ExceptionTable) Get(name string) (Redirect, bool) {
	if t == nil {
		return Redirect{}, false
	}
	r, ok := t.entries[name]
	return r, ok
}

// Set makes r the entry for name, replacing any previous entry. It returns an
// error, and changes nothing, if name fails ValidateName, r is not a valid
// redirect (see ErrInvalidRedirect), or the table is full. The version
// increases only if the entry changed.
func (t *ExceptionTable) Set(name string, r Redirect) error {
	if t == nil {
		return errNilTable
	}
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("exception table: set: %w", err)
	}
	if err := checkRedirect(r); err != nil {
		return fmt.Errorf("exception table: set %q: %w", name, err)
	}
	old, ok := t.entries[name]
	if ok && old == r {
		return nil
	}
	if !ok && len(t.entries) >= MaxEntries {
		return fmt.Errorf("exception table: set %q: %w (%d entries)", name, ErrTableFull, len(t.entries))
	}
	if t.entries == nil {
		t.entries = make(map[string]Redirect)
	}
	t.entries[name] = r
	t.version++
	return nil
}

func checkRedirect(r Redirect) error {
	switch {
	case r.Kind == PathWalk && r.MP != 0:
		return fmt.Errorf("%w: path-walk with MP %d", ErrInvalidRedirect, r.MP)
	case r.Kind == Override && r.MP == 0:
		return fmt.Errorf("%w: override to MP 0", ErrInvalidRedirect)
	case r.Kind != PathWalk && r.Kind != Override:
		return fmt.Errorf("%w: kind %v", ErrInvalidRedirect, r.Kind)
	}
	return nil
}

// Delete removes the entry for name and reports whether there was one; the
// version increases only if there was.
func (t *ExceptionTable) Delete(name string) bool {
	if t == nil {
		return false
	}
	if _, ok := t.entries[name]; !ok {
		return false
	}
	delete(t.entries, name)
	t.version++
	return true
}

// Clone returns an independent copy with the same entries and version. The
// clone of nil is an empty table.
func (t *ExceptionTable) Clone() *ExceptionTable {
	c := &ExceptionTable{}
	if t == nil {
		return c
	}
	c.version = t.version
	if len(t.entries) > 0 {
		c.entries = make(map[string]Redirect, len(t.entries))
		for k, v := range t.entries {
			c.entries[k] = v
		}
	}
	return c
}

// Names returns the names with an entry in increasing byte order.
func (t *ExceptionTable) Names() []string {
	if t == nil {
		return nil
	}
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Equal reports whether t and u have the same version and entries.
func (t *ExceptionTable) Equal(u *ExceptionTable) bool {
	if t.Version() != u.Version() || t.Len() != u.Len() {
		return false
	}
	for _, n := range t.Names() {
		a, _ := t.Get(n)
		if b, ok := u.Get(n); !ok || a != b {
			return false
		}
	}
	return true
}

// String returns the entries in name order, for logs and test failures.
func (t *ExceptionTable) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d{", t.Version())
	for i, n := range t.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		r, _ := t.Get(n)
		if r.Kind == Override {
			fmt.Fprintf(&b, "%q: override MP %d", n, r.MP)
		} else {
			fmt.Fprintf(&b, "%q: %v", n, r.Kind)
		}
	}
	b.WriteString("}")
	return b.String()
}

// Encoding, format 1 (all integers unsigned LEB128 varints in their
// shortest form, unless said otherwise):
//
//	"CXT" 0x01                   magic and format
//	version                      ExceptionTable.Version
//	count                        number of entries, ≤ MaxEntries
//	count × entry, names in strictly increasing byte order:
//	  len, name                  1..MaxNameLen bytes, valid per ValidateName
//	  kind                       1 byte: 1 path-walk, 2 override
//	  mp                         override only, non-zero
//	crc                          CRC-32C of everything before, 4 bytes little-endian
//
// Sorted names and shortest varints make the encoding canonical: a table has
// exactly one encoding, so replicas can compare tables by bytes.
var magic = [4]byte{'C', 'X', 'T', 1}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary returns the canonical encoding of the table described above;
// equal tables (Equal) have identical encodings. The error is always nil.
func (t *ExceptionTable) MarshalBinary() ([]byte, error) {
	names := t.Names()
	size := len(magic) + 2*binary.MaxVarintLen64 + 4
	for _, n := range names {
		size += 2 + len(n) + 1 + binary.MaxVarintLen64
	}
	b := make([]byte, 0, size)
	b = append(b, magic[:]...)
	b = binary.AppendUvarint(b, t.Version())
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		r, _ := t.Get(n)
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = append(b, byte(r.Kind))
		if r.Kind == Override {
			b = binary.AppendUvarint(b, r.MP)
		}
	}
	return appendChecksum(b), nil
}

func appendChecksum(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// UnmarshalBinary replaces the table's contents and version with the table
// encoded in b. It accepts exactly the encodings MarshalBinary produces: on
// truncated, reordered, non-canonical or otherwise corrupt input it returns
// an error wrapping ErrCorrupt and leaves the table unchanged. It never
// allocates more than a small multiple of len(b).
func (t *ExceptionTable) UnmarshalBinary(b []byte) error {
	if t == nil {
		return errNilTable
	}
	d := decoder{b: b}
	if len(b) < len(magic) || [4]byte(b[:4]) != magic {
		return fmt.Errorf("%w: bad magic or format", ErrCorrupt)
	}
	d.off = len(magic)
	version, err := d.uvarint("version")
	if err != nil {
		return err
	}
	count, err := d.uvarint("entry count")
	if err != nil {
		return err
	}
	// Each entry takes at least 3 bytes, so a count beyond that is garbage;
	// checking it before allocating bounds memory by the input size.
	if count > MaxEntries || count > uint64(len(b)-d.off)/3 {
		return fmt.Errorf("%w: entry count %d for %d bytes", ErrCorrupt, count, len(b))
	}
	entries := make(map[string]Redirect, count)
	prev := ""
	for i := range count {
		n, err := d.uvarint("name length")
		if err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if n == 0 || n > MaxNameLen || n > uint64(len(b)-d.off) {
			return fmt.Errorf("%w: entry %d: name length %d at offset %d", ErrCorrupt, i, n, d.off)
		}
		name := string(b[d.off : d.off+int(n)])
		d.off += int(n)
		if err := ValidateName(name); err != nil {
			return fmt.Errorf("%w: entry %d: %w", ErrCorrupt, i, err)
		}
		if i > 0 && name <= prev {
			return fmt.Errorf("%w: entry %d: name %q not after %q", ErrCorrupt, i, name, prev)
		}
		prev = name
		if d.off >= len(b) {
			return fmt.Errorf("%w: entry %d: truncated before kind", ErrCorrupt, i)
		}
		r := Redirect{Kind: Kind(b[d.off])}
		d.off++
		if r.Kind == Override {
			if r.MP, err = d.uvarint("override MP"); err != nil {
				return fmt.Errorf("entry %d: %w", i, err)
			}
		}
		if err := checkRedirect(r); err != nil {
			return fmt.Errorf("%w: entry %d (%q): %w", ErrCorrupt, i, name, err)
		}
		entries[name] = r
	}
	if len(b)-d.off != 4 {
		return fmt.Errorf("%w: %d bytes after the entries, want a 4-byte checksum", ErrCorrupt, len(b)-d.off)
	}
	// The checksum is verified last so that fuzzing reaches the parser.
	if got, want := binary.LittleEndian.Uint32(b[d.off:]), crc32.Checksum(b[:d.off], castagnoli); got != want {
		return fmt.Errorf("%w: checksum %08x, computed %08x", ErrCorrupt, got, want)
	}
	t.version = version
	t.entries = entries
	if len(entries) == 0 {
		t.entries = nil
	}
	return nil
}

type decoder struct {
	b   []byte
	off int
}

// uvarint reads a shortest-form varint; longer forms are rejected so that
// the encoding stays canonical.
func (d *decoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: %s at offset %d: bad varint", ErrCorrupt, what, d.off)
	}
	var tmp [binary.MaxVarintLen64]byte
	if binary.PutUvarint(tmp[:], v) != n {
		return 0, fmt.Errorf("%w: %s at offset %d: non-canonical varint", ErrCorrupt, what, d.off)
	}
	d.off += n
	return v, nil
}
