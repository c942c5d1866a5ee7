package hybridindex

import (
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestExceptionTableOps(t *testing.T) {
	pw := Redirect{Kind: PathWalk}
	ov := func(mp uint64) Redirect { return Redirect{Kind: Override, MP: mp} }
	type op struct {
		del     bool
		name    string
		r       Redirect
		wantErr error // for Set
		wantDel bool  // for Delete
		version uint64
	}
	tests := []struct {
		desc string
		ops  []op
		want map[string]Redirect
	}{
		{"set bumps version", []op{{name: "Makefile", r: pw, version: 1}}, map[string]Redirect{"Makefile": pw}},
		{"same value leaves version", []op{
			{name: "Makefile", r: pw, version: 1},
			{name: "Makefile", r: pw, version: 1},
		}, map[string]Redirect{"Makefile": pw}},
		{"replace bumps version", []op{
			{name: "a", r: pw, version: 1},
			{name: "a", r: ov(3), version: 2},
			{name: "a", r: ov(4), version: 3},
		}, map[string]Redirect{"a": ov(4)}},
		{"delete", []op{
			{name: "a", r: pw, version: 1},
			{name: "b", r: ov(2), version: 2},
			{del: true, name: "a", wantDel: true, version: 3},
			{del: true, name: "a", wantDel: false, version: 3},
			{del: true, name: "zzz", wantDel: false, version: 3},
		}, map[string]Redirect{"b": ov(2)}},
		{"invalid names and redirects change nothing", []op{
			{name: "a", r: pw, version: 1},
			{name: "", r: pw, wantErr: ErrEmptyName, version: 1},
			{name: "..", r: pw, wantErr: ErrDotName, version: 1},
			{name: "x/y", r: pw, wantErr: ErrSlashInName, version: 1},
			{name: strings.Repeat("n", 256), r: pw, wantErr: ErrNameTooLong, version: 1},
			{name: "a", r: Redirect{}, wantErr: ErrInvalidRedirect, version: 1},
			{name: "a", r: Redirect{Kind: PathWalk, MP: 3}, wantErr: ErrInvalidRedirect, version: 1},
			{name: "a", r: Redirect{Kind: Override}, wantErr: ErrInvalidRedirect, version: 1},
			{name: "a", r: Redirect{Kind: 7, MP: 3}, wantErr: ErrInvalidRedirect, version: 1},
		}, map[string]Redirect{"a": pw}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var et ExceptionTable // the zero value is usable
			for i, o := range tc.ops {
				if o.del {
					if got := et.Delete(o.name); got != o.wantDel {
						t.Errorf("op %d: Delete(%q) = %v, want %v", i, o.name, got, o.wantDel)
					}
				} else if err := et.Set(o.name, o.r); !errors.Is(err, o.wantErr) || (err == nil) != (o.wantErr == nil) {
					t.Errorf("op %d: Set(%q, %+v) = %v, want %v", i, o.name, o.r, err, o.wantErr)
				}
				if et.Version() != o.version {
					t.Errorf("op %d: version %d, want %d", i, et.Version(), o.version)
				}
			}
			if et.Len() != len(tc.want) {
				t.Errorf("Len = %d, want %d", et.Len(), len(tc.want))
			}
			for n, r := range tc.want {
				if got, ok := et.Get(n); !ok || got != r {
					t.Errorf("Get(%q) = %+v, %v; want %+v", n, got, ok, r)
				}
			}
		})
	}
}

func TestExceptionTableFull(t *testing.T) {
	var et ExceptionTable
	for i := range MaxEntries {
		if err := et.Set("n"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strconv.Itoa(i), Redirect{Kind: PathWalk}); err != nil {
			t.Fatal(err)
		}
	}
	if err := et.Set("one-more", Redirect{Kind: PathWalk}); !errors.Is(err, ErrTableFull) {
		t.Fatalf("Set past MaxEntries = %v, want ErrTableFull", err)
	}
	// Replacing an existing entry is still allowed.
	first := et.Names()[0]
	if err := et.Set(first, Redirect{Kind: Override, MP: 9}); err != nil {
		t.Fatalf("replace in a full table: %v", err)
	}
}

func TestExceptionTableNil(t *testing.T) {
	var et *ExceptionTable
	if et.Len() != 0 || et.Version() != 0 || et.Names() != nil || et.Delete("a") {
		t.Error("nil table is not empty")
	}
	if _, ok := et.Get("a"); ok {
		t.Error("nil table has an entry")
	}
	if err := et.Set("a", Redirect{Kind: PathWalk}); err == nil {
		t.Error("Set on a nil table succeeded")
	}
	if err := et.UnmarshalBinary(nil); err == nil {
		t.Error("UnmarshalBinary on a nil table succeeded")
	}
	if c := et.Clone(); c.Len() != 0 || !c.Equal(et) {
		t.Error("clone of nil is not an empty table")
	}
}

func TestExceptionTableCloneAndNames(t *testing.T) {
	et := NewExceptionTable()
	for _, n := range []string{"zeta", "Makefile", "alpha", "Kconfig"} {
		if err := et.Set(n, Redirect{Kind: PathWalk}); err != nil {
			t.Fatal(err)
		}
	}
	c := et.Clone()
	if !c.Equal(et) {
		t.Fatalf("clone %v differs from %v", c, et)
	}
	c.Delete("zeta")
	if _, ok := et.Get("zeta"); !ok || c.Equal(et) {
		t.Fatal("changing the clone changed the original")
	}
	if got, want := et.Names(), []string{"Kconfig", "Makefile", "alpha", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
}

// goldenTable is encoded below byte by byte (the checksum was checked with
// an independent CRC-32C); the encoding is part of the
// cluster map and must not change within format 1.
func goldenTable(t testing.TB) *ExceptionTable {
	et := NewExceptionTable()
	for _, s := range []struct {
		n string
		r Redirect
	}{
		{"b", Redirect{Kind: Override, MP: 300}},
		{"Makefile", Redirect{Kind: PathWalk}},
		{"tmp", Redirect{Kind: PathWalk}},
	} {
		if err := et.Set(s.n, s.r); err != nil {
			t.Fatal(err)
		}
	}
	et.Delete("tmp")
	return et
}

const goldenHex = "43585401" + // "CXT", format 1
	"04" + "02" + // version 4, 2 entries
	"08" + hexMakefile + "01" + // "Makefile" path-walk
	"01" + "62" + "02" + "ac02" // "b" override MP 300

const hexMakefile = "4d616b6566696c65"

func TestMarshalGolden(t *testing.T) {
	b, err := goldenTable(t).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	body := hex.EncodeToString(b[:len(b)-4])
	if body != goldenHex {
		t.Fatalf("encoding\n got %s\nwant %s", body, goldenHex)
	}
	if got := hex.EncodeToString(b[len(b)-4:]); got != "111ab92e" {
		t.Errorf("checksum %s, want 111ab92e", got)
	}
	var back ExceptionTable
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(goldenTable(t)) {
		t.Fatalf("round trip: %v, want %v", &back, goldenTable(t))
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, et := range []*ExceptionTable{NewExceptionTable(), goldenTable(t), bigTable(t, 500)} {
		b, _ := et.MarshalBinary()
		var back ExceptionTable
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatalf("%v: %v", et, err)
		}
		if !back.Equal(et) {
			t.Fatalf("round trip of %v gave %v", et, &back)
		}
		b2, _ := back.MarshalBinary()
		if !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs")
		}
	}
}

func bigTable(t testing.TB, n int) *ExceptionTable {
	et := NewExceptionTable()
	for i := range n {
		r := Redirect{Kind: PathWalk}
		if i%3 == 0 {
			r = Redirect{Kind: Override, MP: uint64(i)<<20 + 1}
		}
		if err := et.Set("file-"+strconv.Itoa(i*7919), r); err != nil {
			t.Fatal(err)
		}
	}
	return et
}

func TestUnmarshalRejects(t *testing.T) {
	good, _ := goldenTable(t).MarshalBinary()
	body := good[:len(good)-4]
	tests := []struct {
		desc string
		body []byte // checksum appended by the test
		raw  []byte // used as is when body is nil
	}{
		{desc: "empty", raw: []byte{}},
		{desc: "bad magic", raw: append([]byte("CXT\x02"), good[4:]...)},
		{desc: "bad checksum", raw: append(slices.Clone(body), 0, 0, 0, 0)},
		{desc: "trailing byte", raw: append(slices.Clone(good), 0)},
		{desc: "unsorted", body: mustHex(t, "43585401"+"04"+"02"+"0162"+"02"+"ac02"+"08"+hexMakefile+"01")},
		{desc: "duplicate", body: mustHex(t, "43585401"+"04"+"02"+"016101"+"016101")},
		{desc: "non-canonical varint", body: mustHex(t, "43585401"+"8400"+"02"+"08"+hexMakefile+"01"+"0162"+"02"+"ac02")},
		{desc: "count too large", body: mustHex(t, "43585401"+"04"+"03"+"08"+hexMakefile+"01"+"0162"+"02"+"ac02")},
		{desc: "count huge", body: mustHex(t, "43585401"+"04"+"ffffffffffffffffff01")},
		{desc: "kind hashed", body: mustHex(t, "43585401"+"04"+"01"+"016100")},
		{desc: "kind unknown", body: mustHex(t, "43585401"+"04"+"01"+"016107")},
		{desc: "override to 0", body: mustHex(t, "43585401"+"04"+"01"+"01610200")},
		{desc: "name with slash", body: mustHex(t, "43585401"+"04"+"01"+"032f612f01")},
		{desc: "name dot", body: mustHex(t, "43585401"+"04"+"01"+"012e01")},
		{desc: "name length 0", body: mustHex(t, "43585401"+"04"+"01"+"0001")},
		{desc: "name length 256", body: append(mustHex(t, "43585401"+"04"+"01"+"8002"), append(bytes.Repeat([]byte("x"), 256), 1)...)},
	}
	for _, tc := range tests {
		b := tc.raw
		if tc.body != nil {
			b = appendCRC(tc.body)
		}
		et := goldenTable(t)
		err := et.UnmarshalBinary(b)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: UnmarshalBinary = %v, want ErrCorrupt", tc.desc, err)
		}
		if !et.Equal(goldenTable(t)) {
			t.Errorf("%s: failed UnmarshalBinary changed the table to %v", tc.desc, et)
		}
	}
	// Every proper prefix of a valid encoding is rejected.
	for i := range len(good) {
		var et ExceptionTable
		if err := et.UnmarshalBinary(good[:i]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("prefix of %d bytes: %v, want ErrCorrupt", i, err)
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendCRC(body []byte) []byte {
	return appendChecksum(slices.Clone(body))
}

// FuzzUnmarshal: no input panics, an accepted input re-encodes to exactly
// itself (the encoding is canonical), and an accepted table only holds
// entries Set would accept.
func FuzzUnmarshal(f *testing.F) {
	for _, et := range []*ExceptionTable{NewExceptionTable(), goldenTable(f), bigTable(f, 20)} {
		b, _ := et.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte("CXT\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var et ExceptionTable
		if err := et.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, _ := et.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but re-encodes as %x", b, again)
		}
		for _, n := range et.Names() {
			r, _ := et.Get(n)
			if err := NewExceptionTable().Set(n, r); err != nil {
				t.Fatalf("decoded entry %q %+v that Set refuses: %v", n, r, err)
			}
		}
	})
}
