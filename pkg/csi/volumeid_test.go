package csi

import (
	"errors"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNewVolumeID(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]string
		want    string
		wantErr string
	}{
		{"pvc-1", nil, "subdir:default:/csi/pvc-1", ""},
		{"pvc-1", map[string]string{"volume": "photos", "parent": "/k8s/vols"}, "subdir:photos:/k8s/vols/pvc-1", ""},
		{"pvc-1", map[string]string{"kind": "subdir"}, "subdir:default:/csi/pvc-1", ""},
		{"pvc-1", map[string]string{"kind": "volume"}, "volume:csi-", ""},
		{"", nil, "", "no volume name"},
		{"a/b", nil, "", "cannot be a directory name"},
		{"..", nil, "", "cannot be a directory name"},
		{"pvc-1", map[string]string{"kind": "block"}, "", "want subdir or volume"},
		{"pvc-1", map[string]string{"volume": "Bad Name!"}, "", "parameter volume"},
		{"pvc-1", map[string]string{"parent": "rel"}, "", "absolute, clean"},
		{"pvc-1", map[string]string{"parent": "/a/../b"}, "", "absolute, clean"},
		{"pvc-1", map[string]string{"size": "1"}, "", "unknown parameter"},
	}
	for _, tt := range tests {
		id, err := newVolumeID(tt.name, tt.params)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("newVolumeID(%q, %v) = %v, %v; want an error with %q", tt.name, tt.params, id, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(id.String(), tt.want) {
			t.Errorf("newVolumeID(%q, %v) = %v, %v; want %s", tt.name, tt.params, id, err, tt.want)
			continue
		}
		back, err := ParseVolumeID(id.String())
		if err != nil || back != id {
			t.Errorf("ParseVolumeID(%q) = %+v, %v; want %+v", id, back, err, id)
		}
	}
	a, _ := newVolumeID("pvc-x", map[string]string{"kind": "volume"})
	b, _ := newVolumeID("pvc-x", map[string]string{"kind": "volume"})
	c, _ := newVolumeID("pvc-y", map[string]string{"kind": "volume"})
	if a != b || a == c {
		t.Errorf("whole-volume names: %v and %v for one name, %v for another", a, b, c)
	}
}

func TestParseVolumeIDRefuses(t *testing.T) {
	for _, s := range []string{"", "x", "subdir:", "subdir:default", "subdir:default:rel", "subdir:default:/", "subdir:default:/a/../b",
		"subdir:Bad Vol:/a", "volume:", "volume:Bad Vol", "block:default"} {
		if id, err := ParseVolumeID(s); !errors.Is(err, errBadID) {
			t.Errorf("ParseVolumeID(%q) = %+v, %v; want errBadID", s, id, err)
		}
	}
}

func TestCapacity(t *testing.T) {
	tests := []struct {
		req, lim int64
		want     uint64
		code     codes.Code
	}{
		{0, 0, 0, codes.OK},
		{100, 0, 100, codes.OK},
		{0, 200, 200, codes.OK},
		{100, 200, 100, codes.OK},
		{300, 200, 0, codes.OutOfRange},
		{-1, 0, 0, codes.InvalidArgument},
	}
	for _, tt := range tests {
		got, err := capacity(&csipb.CapacityRange{RequiredBytes: tt.req, LimitBytes: tt.lim})
		if status.Code(err) != tt.code || (err == nil && got != tt.want) {
			t.Errorf("capacity(%d, %d) = %d, %v; want %d, %v", tt.req, tt.lim, got, err, tt.want, tt.code)
		}
	}
	if got, err := capacity(nil); got != 0 || err != nil {
		t.Errorf("capacity(nil) = %d, %v", got, err)
	}
}

func TestCheckCaps(t *testing.T) {
	mount := &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}
	mode := func(m csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability_AccessMode {
		return &csipb.VolumeCapability_AccessMode{Mode: m}
	}
	tests := []struct {
		name string
		caps []*csipb.VolumeCapability
		ok   bool
	}{
		{"none", nil, false},
		{"rwx mount", []*csipb.VolumeCapability{{AccessType: mount, AccessMode: mode(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}}, true},
		{"rwo mount", []*csipb.VolumeCapability{{AccessType: mount, AccessMode: mode(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}}, true},
		{"block", []*csipb.VolumeCapability{{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
			AccessMode: mode(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}}, false},
		{"no access type", []*csipb.VolumeCapability{{AccessMode: mode(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}}, false},
		{"no mode", []*csipb.VolumeCapability{{AccessType: mount}}, false},
	}
	for _, tt := range tests {
		if err := checkCaps(tt.caps); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
