package capability

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
)

func TestMapIDs(t *testing.T) {
	squash := Caps{RootSquash: true}
	mapped := Caps{UIDMap: []IDRange{{Client: 1000, Cluster: 5000, Count: 10}, {Client: 0, Cluster: 7000, Count: 1}}}
	both := Caps{RootSquash: true, UIDMap: []IDRange{{Client: 1000, Cluster: 0, Count: 1}}}
	for _, tc := range []struct {
		name string
		c    Caps
		in   uint32
		want uint32
	}{
		{"none keeps root", Caps{}, 0, 0},
		{"squash root", squash, 0, Nobody},
		{"squash keeps others", squash, 1000, 1000},
		{"map first of range", mapped, 1000, 5000},
		{"map last of range", mapped, 1009, 5009},
		{"past the range", mapped, 1010, 1010},
		{"map root away", mapped, 0, 7000},
		{"a map onto root is squashed", both, 1000, Nobody},
		{"top id", Caps{UIDMap: []IDRange{{Client: 1<<32 - 1, Cluster: 1, Count: 1}}}, 1<<32 - 1, 1},
	} {
		if got := tc.c.UID(tc.in); got != tc.want {
			t.Errorf("%s: UID(%d) = %d, want %d", tc.name, tc.in, got, tc.want)
		}
	}
	if got := squash.OwnerUID(0); got != 0 {
		t.Errorf("OwnerUID(0) under squash = %d: a chown to root must stay one (and be refused)", got)
	}
	if got := mapped.ClientUID(5009); got != 1009 {
		t.Errorf("ClientUID(5009) = %d, want 1009", got)
	}
	if got := mapped.ClientUID(Nobody); got != Nobody {
		t.Errorf("ClientUID(nobody) = %d", got)
	}
	if got := mapped.OwnerUID(1001); got != 5001 {
		t.Errorf("OwnerUID(1001) = %d, want 5001", got)
	}
	if got := (Caps{RootSquash: true, UIDMap: mapped.UIDMap}).GID(0); got != Nobody {
		t.Errorf("GID(0) under squash with only a uid map = %d, want %d", got, Nobody)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c   Caps
		err string
	}{
		{Caps{}, ""},
		{Caps{Volume: "v", VolumeID: 3, Path: "/a/b", RootIno: 9}, ""},
		{Caps{VolumeID: 3, Path: "a"}, "absolute"},
		{Caps{VolumeID: 3, Path: "/a/../b"}, "absolute"},
		{Caps{VolumeID: 3, Path: "/a/"}, "absolute"},
		{Caps{Path: "/a"}, "needs a volume"},
		{Caps{UIDMap: []IDRange{{Client: 1, Cluster: 2}}}, "count 0"},
		{Caps{UIDMap: []IDRange{{Client: 1 << 31, Cluster: 1, Count: 1 << 31}}}, ""},
		{Caps{UIDMap: []IDRange{{Client: 1<<32 - 1, Cluster: 1, Count: 2}}}, "past 2^32"},
		{Caps{GIDMap: []IDRange{{Client: 10, Cluster: 1, Count: 5}, {Client: 14, Cluster: 100, Count: 1}}}, "overlap"},
	} {
		err := tc.c.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.c, err, tc.err)
		}
	}
}

func TestParseIDRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IDRange
		err  bool
	}{
		{"1000:5000", IDRange{1000, 5000, 1}, false},
		{"1000:5000:100", IDRange{1000, 5000, 100}, false},
		{"1000", IDRange{}, true},
		{"a:1", IDRange{}, true},
		{"1:2:3:4", IDRange{}, true},
		{"-1:2", IDRange{}, true},
		{"4294967296:1", IDRange{}, true},
	} {
		got, err := ParseIDRange(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseIDRange(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil {
			if back, _ := ParseIDRange(got.String()); back != got {
				t.Errorf("%v does not read back", got)
			}
		}
	}
}

func TestCertificateRoundTrip(t *testing.T) {
	c := Caps{Volume: "v", VolumeID: 7, Path: "/a", RootIno: 42, ReadOnly: true, RootSquash: true,
		UIDMap: []IDRange{{Client: 1, Cluster: 2, Count: 3}}}
	ext, err := c.Extension()
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromCert(&x509.Certificate{Extensions: []pkix.Extension{ext}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.ReadOnly || got.Path != "/a" || got.RootIno != 42 || got.VolumeID != 7 || got.UID(1) != 2 {
		t.Errorf("read back %+v, wrote %+v", got, c)
	}
	if none, err := FromCert(&x509.Certificate{}); err != nil || none.Restricted() {
		t.Errorf("a certificate without the extension: %+v, %v", none, err)
	}
	ext.Value = []byte("{not json")
	if _, err := FromCert(&x509.Certificate{Extensions: []pkix.Extension{ext}}); err == nil {
		t.Error("an unreadable extension was accepted")
	}
	ext.Value = []byte(`{"path":"relative"}`)
	if _, err := FromCert(&x509.Certificate{Extensions: []pkix.Extension{ext}}); err == nil {
		t.Error("an invalid restriction was accepted")
	}
	if _, err := (Caps{Path: "x"}).Extension(); err == nil {
		t.Error("Extension wrote an invalid restriction")
	}
}
