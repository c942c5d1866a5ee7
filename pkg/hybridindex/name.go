package hybridindex

import (
	"errors"
	"fmt"
	"strings"
)

// MaxNameLen is the longest valid name in bytes (NAME_MAX on Linux).
const MaxNameLen = 255

// ErrInvalidName is wrapped by every name error that maps to EINVAL:
// ErrEmptyName, ErrDotName, ErrSlashInName and ErrNULInName. Callers that
// only need the errno test errors.Is(err, ErrInvalidName).
var ErrInvalidName = errors.New("invalid name")

// ErrNameTooLong is returned for a name longer than MaxNameLen bytes. It
// maps to ENAMETOOLONG and deliberately does not wrap ErrInvalidName.
var ErrNameTooLong = errors.New("name too long")

// The EINVAL-class name errors; each wraps ErrInvalidName.
var (
	ErrEmptyName   = fmt.Errorf("%w: empty", ErrInvalidName)
	ErrDotName     = fmt.Errorf("%w: \".\" and \"..\" are not names of records", ErrInvalidName)
	ErrSlashInName = fmt.Errorf("%w: contains '/'", ErrInvalidName)
	ErrNULInName   = fmt.Errorf("%w: contains NUL", ErrInvalidName)
)

// ValidateName reports whether name can be the name of a record: one path
// component, neither "." nor "..", at most MaxNameLen bytes, without '/'
// or NUL. Any other byte sequence is valid, including invalid UTF-8, as on
// Linux. The error wraps exactly one of ErrEmptyName, ErrDotName,
// ErrSlashInName, ErrNULInName (all EINVAL class) or ErrNameTooLong
// (ENAMETOOLONG class). The checks run in that order after length, which is
// checked first: an over-long name is ENAMETOOLONG whatever it contains.
func ValidateName(name string) error {
	switch {
	case len(name) == 0:
		return ErrEmptyName
	case len(name) > MaxNameLen:
		return fmt.Errorf("name %q... (%d bytes, limit %d): %w", name[:32], len(name), MaxNameLen, ErrNameTooLong)
	case name == "." || name == "..":
		return fmt.Errorf("name %q: %w", name, ErrDotName)
	}
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return fmt.Errorf("name %q, byte %d: %w", name, i, ErrSlashInName)
	}
	if i := strings.IndexByte(name, 0); i >= 0 {
		return fmt.Errorf("name %q, byte %d: %w", name, i, ErrNULInName)
	}
	return nil
}
