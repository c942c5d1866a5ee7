package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/hybridindex"
)

// Kind is what backs a CSI volume, chosen by the StorageClass parameter
// "kind".
type Kind string

const (
	// KindSubdir is a directory of a Cairn volume with a directory quota
	// of the requested capacity (the default: cheap, many per volume).
	KindSubdir Kind = "subdir"
	// KindVolume is a whole Cairn volume with the requested capacity.
	KindVolume Kind = "volume"
)

// The StorageClass parameters.
const (
	ParamKind     = "kind"     // subdir (default) or volume
	ParamVolume   = "volume"   // subdir: the Cairn volume (default "default")
	ParamParent   = "parent"   // subdir: the directory the volumes go in (default "/csi")
	ParamReplicas = "replicas" // volume: replicas of each partition (default: the master's)
)

// VolumeID names a CSI volume: its kind, its Cairn volume and, for a
// subdir, the directory's path. The string form is the CSI volume id:
// "subdir:VOLUME:/PATH" or "volume:VOLUME".
type VolumeID struct {
	Kind   Kind
	Volume string
	Path   string // KindSubdir only: absolute, clean
}

func (id VolumeID) String() string {
	if id.Kind == KindVolume {
		return string(KindVolume) + ":" + id.Volume
	}
	return string(KindSubdir) + ":" + id.Volume + ":" + id.Path
}

// errBadID says a volume id is not one this driver makes: no such volume.
var errBadID = errors.New("not a Cairn volume id")

// ParseVolumeID reads a CSI volume id made by String.
func ParseVolumeID(s string) (VolumeID, error) {
	kind, rest, _ := strings.Cut(s, ":")
	switch Kind(kind) {
	case KindVolume:
		if clustermap.ValidateVolumeName(rest) != nil {
			return VolumeID{}, fmt.Errorf("%q: %w", s, errBadID)
		}
		return VolumeID{Kind: KindVolume, Volume: rest}, nil
	case KindSubdir:
		vol, p, ok := strings.Cut(rest, ":")
		if !ok || clustermap.ValidateVolumeName(vol) != nil || !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
			return VolumeID{}, fmt.Errorf("%q: %w", s, errBadID)
		}
		return VolumeID{Kind: KindSubdir, Volume: vol, Path: p}, nil
	}
	return VolumeID{}, fmt.Errorf("%q: %w", s, errBadID)
}

// newVolumeID is the id of the volume CreateVolume makes for a request
// name and parameters: the same name and parameters always give the same
// id, which makes CreateVolume idempotent.
func newVolumeID(name string, params map[string]string) (VolumeID, error) {
	if name == "" {
		return VolumeID{}, errors.New("no volume name")
	}
	for k := range params {
		switch k {
		case ParamKind, ParamVolume, ParamParent, ParamReplicas:
		default:
			return VolumeID{}, fmt.Errorf("unknown parameter %q (known: kind, volume, parent, replicas)", k)
		}
	}
	switch Kind(params[ParamKind]) {
	case KindVolume:
		// Names of Cairn volumes are short and plain; a hash of the CSI
		// name is both.
		sum := sha256.Sum256([]byte(name))
		return VolumeID{Kind: KindVolume, Volume: "csi-" + hex.EncodeToString(sum[:8])}, nil
	case KindSubdir, "":
		vol := params[ParamVolume]
		if vol == "" {
			vol = "default"
		}
		if err := clustermap.ValidateVolumeName(vol); err != nil {
			return VolumeID{}, fmt.Errorf("parameter volume: %w", err)
		}
		parent := params[ParamParent]
		if parent == "" {
			parent = "/csi"
		}
		if !strings.HasPrefix(parent, "/") || path.Clean(parent) != parent {
			return VolumeID{}, fmt.Errorf("parameter parent %q: want an absolute, clean path", parent)
		}
		if err := hybridindex.ValidateName(name); err != nil {
			return VolumeID{}, fmt.Errorf("volume name %q cannot be a directory name", name)
		}
		return VolumeID{Kind: KindSubdir, Volume: vol, Path: path.Join(parent, name)}, nil
	}
	return VolumeID{}, fmt.Errorf("parameter kind %q: want subdir or volume", params[ParamKind])
}
