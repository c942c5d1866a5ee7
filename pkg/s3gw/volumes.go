package s3gw

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/masterclient"
)

// VolumeBuckets makes every volume a bucket, as CubeFS's object node does:
// creating a bucket creates a volume (the identity must be an admin), and
// deleting an empty one deletes the volume. Volumes made any other way
// (`cairn volume create`, the CSI driver) are buckets too, listed by
// ListBuckets; a volume whose name S3 does not allow for a bucket
// (capitals, underscores) is not reachable over S3.
//
// The gateway mounts a volume under MountDir at the first request that
// names it and keeps it mounted until the bucket is deleted or the volume
// is gone from a later listing.
type VolumeBuckets struct {
	Masters []string
	TLS     *tls.Config
	// Replicas and CapacityBytes are those of the volumes CreateBucket
	// makes (0: the master's default replicas; 0 bytes: no limit).
	Replicas      int32
	CapacityBytes uint64
	// Owner is the account that owns every bucket (the gateway's access
	// key), as ListBucketsAndOwners reports it.
	Owner string
}

func (vb *VolumeBuckets) String() string { return "volumes" }

func (vb *VolumeBuckets) open(_ context.Context, root string, log *slog.Logger) (func(backend.Backend) backend.Backend, func(), error) {
	mc, err := masterclient.New(vb.Masters, vb.TLS, nil)
	if err != nil {
		return nil, nil, err
	}
	set := &volumeSet{cfg: vb, root: root, log: log, mc: mc, mounted: map[string]*volumeMount{}}
	wrap := func(be backend.Backend) backend.Backend { return &volumeBackend{Backend: be, set: set} }
	return wrap, set.close, nil
}

// validBucket reports whether name may name a volume-bucket: a bucket name
// S3 allows that is also a volume name (which keeps it one path element).
func validBucket(name string) bool {
	return utils.IsValidBucketName(name) && clustermap.ValidateVolumeName(name) == nil
}

// volumeMount is one mounted volume.
type volumeMount struct {
	vol *client.Volume
	srv *fuse.Server
}

// volumeSet tracks the volumes mounted under root, one directory each,
// named as the volume.
type volumeSet struct {
	cfg  *VolumeBuckets
	root string
	log  *slog.Logger
	mc   *masterclient.Client

	mu      sync.Mutex
	mounted map[string]*volumeMount
}

// ensure mounts the volume named bucket if it exists and is not mounted.
// A volume that does not exist is left to the backend, which answers
// NoSuchBucket for the missing directory.
func (s *volumeSet) ensure(ctx context.Context, bucket string) error {
	if !validBucket(bucket) {
		return nil
	}
	// The front end's strings may share memory with a request buffer that
	// is reused once the request ends: a map key must own its bytes.
	bucket = strings.Clone(bucket)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mounted[bucket] != nil {
		return nil
	}
	v, err := client.Open(ctx, s.cfg.Masters, bucket, &client.Options{TLS: s.cfg.TLS})
	if client.ErrnoOf(err) == syscall.ENOENT {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	dir := filepath.Join(s.root, bucket)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		v.Close()
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	srv, err := mount(v, dir)
	if err != nil {
		v.Close()
		_ = os.Remove(dir)
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	s.mounted[bucket] = &volumeMount{vol: v, srv: srv}
	s.log.Info("s3 bucket mounted", "volume", bucket, "dir", dir)
	return nil
}

// drop unmounts bucket's volume, if mounted. The caller holds s.mu.
func (s *volumeSet) drop(bucket string) {
	m := s.mounted[bucket]
	if m == nil {
		return
	}
	delete(s.mounted, bucket)
	dir := filepath.Join(s.root, bucket)
	if err := m.srv.Unmount(); err != nil {
		// Requests still hold files open: detach it, the kernel ends it
		// once they are done.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			s.log.Warn("unmount a bucket's volume", "dir", dir, "err", err)
		}
	}
	m.vol.Close()
	_ = os.Remove(dir)
	s.log.Info("s3 bucket unmounted", "volume", bucket, "dir", dir)
}

func (s *volumeSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.mounted {
		s.drop(name)
	}
	_ = s.mc.Close()
}

// list returns the volumes that are buckets, by name, and unmounts those
// mounted here that are gone.
func (s *volumeSet) list(ctx context.Context) ([]*pb.Volume, error) {
	var resp *pb.ListVolumesResponse
	err := s.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.ListVolumes(ctx, &pb.ListVolumesRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, masterErr(err, "")
	}
	var out []*pb.Volume
	live := map[string]bool{}
	for _, v := range resp.GetVolumes() {
		live[v.Name] = true
		if validBucket(v.Name) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b *pb.Volume) int { return strings.Compare(a.Name, b.Name) })
	s.mu.Lock()
	for name := range s.mounted {
		if !live[name] {
			s.drop(name)
		}
	}
	s.mu.Unlock()
	return out, nil
}

// masterErr turns a master's refusal into the S3 error a client expects.
func masterErr(err error, bucket string) error {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return s3err.GetAPIError(s3err.ErrAccessDenied)
	case codes.NotFound:
		if bucket != "" {
			return s3err.GetBucketErr(s3err.ErrNoSuchBucket, bucket)
		}
	case codes.AlreadyExists:
		if bucket != "" {
			return s3err.GetBucketErr(s3err.ErrBucketAlreadyOwnedByYou, bucket)
		}
	case codes.InvalidArgument:
		if bucket != "" {
			return s3err.GetBucketErr(s3err.ErrInvalidBucketName, bucket)
		}
	}
	return fmt.Errorf("master: %w", err)
}

// volumeBackend is the POSIX backend with buckets as volumes: the bucket
// operations create, delete and list volumes, and every request naming a
// bucket mounts its volume first. The front end asks for the bucket's ACL
// (GetBucketAcl) before every request on a bucket except CreateBucket and
// ListBuckets, so that is where the mount happens; the source bucket of a
// copy is mounted by the copy.
type volumeBackend struct {
	backend.Backend
	set *volumeSet
}

func (b *volumeBackend) String() string { return "Cairn volumes (POSIX)" }

func (b *volumeBackend) GetBucketAcl(ctx context.Context, in *s3.GetBucketAclInput) ([]byte, error) {
	if err := b.set.ensure(ctx, deref(in.Bucket)); err != nil {
		return nil, err
	}
	return b.Backend.GetBucketAcl(ctx, in)
}

func (b *volumeBackend) HeadBucket(ctx context.Context, in *s3.HeadBucketInput) (*s3.HeadBucketOutput, error) {
	if err := b.set.ensure(ctx, deref(in.Bucket)); err != nil {
		return nil, err
	}
	return b.Backend.HeadBucket(ctx, in)
}

func (b *volumeBackend) CopyObject(ctx context.Context, in s3response.CopyObjectInput) (s3response.CopyObjectOutput, error) {
	if err := b.ensureSource(ctx, deref(in.CopySource)); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	return b.Backend.CopyObject(ctx, in)
}

func (b *volumeBackend) UploadPartCopy(ctx context.Context, in *s3.UploadPartCopyInput) (s3response.CopyPartResult, error) {
	if err := b.ensureSource(ctx, deref(in.CopySource)); err != nil {
		return s3response.CopyPartResult{}, err
	}
	return b.Backend.UploadPartCopy(ctx, in)
}

// ensureSource mounts the bucket of a copy source; a source that does not
// parse is left to the backend to refuse.
func (b *volumeBackend) ensureSource(ctx context.Context, source string) error {
	bucket, _, _, err := backend.ParseCopySource(source)
	if err != nil {
		return nil
	}
	return b.set.ensure(ctx, bucket)
}

func (b *volumeBackend) ListBuckets(ctx context.Context, in s3response.ListBucketsInput) (s3response.ListAllMyBucketsResult, error) {
	vols, err := b.set.list(ctx)
	if err != nil {
		return s3response.ListAllMyBucketsResult{}, err
	}
	var (
		buckets []s3response.ListAllMyBucketsEntry
		token   string
	)
	for _, v := range vols {
		if !strings.HasPrefix(v.Name, in.Prefix) || v.Name <= in.ContinuationToken {
			continue
		}
		if in.MaxBuckets > 0 && len(buckets) == int(in.MaxBuckets) {
			token = buckets[len(buckets)-1].Name
			break
		}
		buckets = append(buckets, s3response.ListAllMyBucketsEntry{Name: v.Name, CreationDate: time.UnixMilli(v.CreatedUnixMs)})
	}
	return s3response.ListAllMyBucketsResult{
		Buckets:           s3response.ListAllMyBucketsList{Bucket: buckets},
		Owner:             s3response.CanonicalUser{ID: in.Owner},
		Prefix:            in.Prefix,
		ContinuationToken: token,
	}, nil
}

func (b *volumeBackend) ListBucketsAndOwners(ctx context.Context) ([]s3response.Bucket, error) {
	vols, err := b.set.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]s3response.Bucket, len(vols))
	for i, v := range vols {
		out[i] = s3response.Bucket{Name: v.Name, Owner: b.set.cfg.Owner}
	}
	return out, nil
}

// Bucket attributes the POSIX backend keeps in the bucket directory's
// extended attributes (user.<name>), written here for a bucket the backend
// did not create.
const (
	attrACL       = "acl"
	attrOwnership = "ownership"
	attrTags      = "X-Amz-Tagging"
)

// CreateBucket creates the volume, mounts it and records the bucket's ACL,
// object ownership and tags on its root, as the backend does for a
// directory. A volume that exists is a bucket owned by the one account.
// Object lock needs versioning, which this gateway does not keep.
func (b *volumeBackend) CreateBucket(ctx context.Context, in *s3.CreateBucketInput, acl []byte) (err error) {
	bucket := deref(in.Bucket)
	if !validBucket(bucket) {
		return s3err.GetBucketErr(s3err.ErrInvalidBucketName, bucket)
	}
	if in.ObjectLockEnabledForBucket != nil && *in.ObjectLockEnabledForBucket {
		return s3err.GetAPIError(s3err.ErrNotImplemented)
	}
	var tags map[string]string
	if in.CreateBucketConfiguration != nil {
		if tags, err = backend.ParseCreateBucketTags(in.CreateBucketConfiguration.Tags); err != nil {
			return err
		}
	}
	err = b.set.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: bucket, CapacityBytes: b.set.cfg.CapacityBytes, Replicas: b.set.cfg.Replicas}, o...)
		return err
	})
	if err != nil {
		return masterErr(err, bucket)
	}
	// Until its attributes are stored the volume is a bucket without an
	// owner: undo the volume, so a retry starts over.
	defer func() {
		if err != nil {
			b.set.log.Warn("create bucket: removing the volume made for it", "volume", bucket, "err", err)
			if derr := b.deleteVolume(context.WithoutCancel(ctx), bucket); derr != nil {
				b.set.log.Warn("create bucket: remove the volume", "volume", bucket, "err", derr)
			}
		}
	}()
	if err = b.set.ensure(ctx, bucket); err != nil {
		return err
	}
	dir := filepath.Join(b.set.root, bucket)
	store := func(key string, val []byte) error {
		if err := (meta.XattrMeta{}).StoreAttribute(nil, dir, "", key, val); err != nil {
			return fmt.Errorf("bucket %s: store %s: %w", bucket, key, err)
		}
		return nil
	}
	if err = store(attrACL, acl); err != nil {
		return err
	}
	if err = store(attrOwnership, []byte(in.ObjectOwnership)); err != nil {
		return err
	}
	if tags != nil {
		js, jerr := json.Marshal(tags)
		if jerr != nil {
			return fmt.Errorf("bucket tags: %w", jerr)
		}
		err = store(attrTags, js)
	}
	return err
}

// DeleteBucket deletes an empty bucket's volume. Empty is what the
// backend means: nothing but its own temporary directory. An object put
// between the check and the deletion goes with the volume, as with any
// bucket deleted while a client still writes to it.
func (b *volumeBackend) DeleteBucket(ctx context.Context, bucket string) error {
	if !validBucket(bucket) {
		return s3err.GetBucketErr(s3err.ErrInvalidBucketName, bucket)
	}
	if err := b.set.ensure(ctx, bucket); err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(b.set.root, bucket))
	if errors.Is(err, os.ErrNotExist) {
		return s3err.GetBucketErr(s3err.ErrNoSuchBucket, bucket)
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	for _, e := range ents {
		if e.Name() != posix.MetaTmpDir {
			return s3err.GetBucketErr(s3err.ErrBucketNotEmpty, bucket)
		}
	}
	return b.deleteVolume(ctx, bucket)
}

// deleteVolume unmounts bucket's volume and deletes it.
func (b *volumeBackend) deleteVolume(ctx context.Context, bucket string) error {
	b.set.mu.Lock()
	b.set.drop(bucket)
	b.set.mu.Unlock()
	err := b.set.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.DeleteVolume(ctx, &pb.VolumeRequest{Name: bucket}, o...)
		return err
	})
	if err != nil {
		return masterErr(err, bucket)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
