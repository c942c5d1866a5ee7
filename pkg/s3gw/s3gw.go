// Package s3gw is Cairn's S3 gateway (`cairn s3`): an S3 endpoint whose
// buckets are the top-level directories of one volume (DirBuckets) or
// whole volumes (VolumeBuckets), and whose objects are files, so that the
// same bytes are reachable through S3, the FUSE mount and the SDK.
//
// The S3 protocol (SigV4, presigned URLs, XML, multipart, ranged reads,
// conditional requests) is versitygw's embeddable front end; its storage is
// versitygw's POSIX backend over private FUSE mounts made by this process
// (pkg/fusefs), which keeps object metadata (ETag, user metadata, content
// type) in the files' extended attributes and writes each object to a
// temporary name in its bucket renamed into place, so a reader sees the
// old object or the new one, never a partial one.
package s3gw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

// Config is a gateway: what its buckets are, where it mounts volumes, and
// its S3 endpoint and credentials.
type Config struct {
	// Buckets says what a bucket is: a *DirBuckets or a *VolumeBuckets.
	Buckets Buckets
	// MountDir is an empty directory under which the gateway mounts
	// volumes for its backend; nothing else should use it.
	MountDir string
	// Listen are the S3 endpoint's addresses (host:port).
	Listen []string
	// AccessKey and SecretKey are the one account's credentials (SigV4).
	AccessKey, SecretKey string
	// Region is the region clients sign for (default us-east-1).
	Region string
	Logger *slog.Logger
}

// Buckets is where a gateway keeps its buckets. The POSIX backend serves
// the buckets as the directories below one root; a Buckets prepares that
// root and may wrap the backend to change what bucket operations do.
type Buckets interface {
	// open prepares root and returns how to wrap the backend rooted
	// there, and what undoes open once the backend has shut down.
	open(ctx context.Context, root string, log *slog.Logger) (wrap func(backend.Backend) backend.Backend, close func(), err error)
	// String names the buckets for the log.
	String() string
}

// Run prepares the buckets, serves S3 until ctx ends, then unmounts. Only
// one gateway may run per process (versitygw keeps process-wide state, and
// its backend changes the working directory to MountDir).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Buckets == nil || cfg.MountDir == "" || len(cfg.Listen) == 0 || cfg.AccessKey == "" || cfg.SecretKey == "" {
		return errors.New("s3gw: buckets, a mount directory, an address and credentials are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	wrap, closeBuckets, err := cfg.Buckets.open(ctx, cfg.MountDir, cfg.Logger)
	if err != nil {
		return err
	}
	defer func() {
		// The backend made MountDir the working directory: leave it, or
		// the unmounts find it busy.
		_ = os.Chdir("/")
		closeBuckets()
	}()
	be, err := posix.New(cfg.MountDir, meta.XattrMeta{}, posix.PosixOpts{
		NewDirPerm:  0o755,
		NewFilePerm: 0o644,
		// A FUSE mount has no O_TMPFILE: new objects go to a temporary
		// name first, then are renamed into place.
		ForceNoTmpFile: true,
		// S3's own limit on a copy source (0 would refuse every copy).
		CopyObjectThreshold: 5 << 30,
	})
	if err != nil {
		return fmt.Errorf("s3 backend on %s: %w", cfg.MountDir, err)
	}
	gw := wrap(be)
	defer gw.Shutdown()
	cfg.Logger.Info("s3 gateway serving", "buckets", cfg.Buckets.String(), "listen", cfg.Listen)
	return embedgw.RunVersityGW(ctx, gw, &embedgw.Config{
		RootUserAccess:    cfg.AccessKey,
		RootUserSecret:    cfg.SecretKey,
		Region:            cfg.Region,
		Ports:             cfg.Listen,
		MaxConnections:    4096,
		MaxRequests:       1024,
		MultipartMaxParts: 10000,
		Quiet:             true,
		HealthPath:        "/health",
	})
}
