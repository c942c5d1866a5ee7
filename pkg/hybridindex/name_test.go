package hybridindex

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		want error // nil, or the specific sentinel
	}{
		{"a", nil},
		{"Makefile", nil},
		{"...", nil},
		{".hidden", nil},
		{"..x", nil},
		{" ", nil},
		{"\xff\xfe not utf-8", nil},
		{"name\nwith newline", nil},
		{strings.Repeat("x", MaxNameLen), nil},
		{"", ErrEmptyName},
		{".", ErrDotName},
		{"..", ErrDotName},
		{"a/b", ErrSlashInName},
		{"/", ErrSlashInName},
		{"dir/", ErrSlashInName},
		{"a\x00b", ErrNULInName},
		{"\x00", ErrNULInName},
		{strings.Repeat("x", MaxNameLen+1), ErrNameTooLong},
		{strings.Repeat("/", MaxNameLen+1), ErrNameTooLong},
		{strings.Repeat("é", 128), ErrNameTooLong}, // 256 bytes, 128 runes
	}
	for _, tc := range tests {
		err := ValidateName(tc.name)
		if tc.want == nil {
			if err != nil {
				t.Errorf("ValidateName(%q) = %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("ValidateName(%q) = %v, want %v", tc.name, err, tc.want)
		}
		// The errno class: ENAMETOOLONG never looks like EINVAL and back.
		if tooLong := tc.want == ErrNameTooLong; errors.Is(err, ErrInvalidName) == tooLong {
			t.Errorf("ValidateName(%q) = %v: errors.Is(ErrInvalidName) = %v", tc.name, err, !tooLong)
		}
	}
}
