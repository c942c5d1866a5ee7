package trace

import (
	"strings"
	"testing"
)

// FuzzImportStrace feeds arbitrary text to the strace importer: it may refuse
// lines, never panic, and whatever it produces must be valid records.
func FuzzImportStrace(f *testing.F) {
	for _, l := range strings.Split(straceLog, "\n") {
		f.Add(l)
	}
	f.Add(`1 2.3 openat(AT_FDCWD</w>, "a", O_RDONLY) = 3<abc <0.1>`)
	f.Add(`1 2.3 read(3</w/a>, <unfinished ...>`)
	f.Add(`1 2.3 <... read resumed>""..., 4) = 4 <0.000001>`)
	f.Fuzz(func(t *testing.T, line string) {
		in := "100 1.000000 openat(AT_FDCWD</w>, \"f\", O_RDWR|O_CREAT, 0644) = 3</w/f> <0.000001>\n" + line + "\n"
		events, _, err := ImportStrace(strings.NewReader(in), StraceOptions{Root: "/w", Cwd: "/w"})
		if err != nil {
			return
		}
		for _, e := range events {
			if err := e.Validate(); err != nil {
				t.Fatalf("invalid record %+v from %q: %v", e, line, err)
			}
		}
	})
}
