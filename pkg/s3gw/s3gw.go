// Package s3gw is Cairn's S3 gateway (`cairn s3`): an S3 endpoint over
// one Cairn volume, whose top-level directories are the buckets and whose
// files are the objects, so that the same bytes are reachable through S3,
// the FUSE mount and the SDK.
//
// The S3 protocol (SigV4, presigned URLs, XML, multipart, ranged reads,
// conditional requests) is versitygw's embeddable front end; its storage is
// versitygw's POSIX backend over a private FUSE mount of the volume made by
// this process (pkg/fusefs), which keeps object metadata (ETag, user
// metadata, content type) in the files' extended attributes and writes
// each object to a temporary name renamed into place, so a reader sees the
// old object or the new one, never a partial one.
package s3gw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/fusefs"
)

// Config is a gateway: the volume it serves, where it mounts it, and its
// S3 endpoint and credentials.
type Config struct {
	Volume *client.Volume
	// MountDir is an empty directory where the gateway mounts the volume
	// for its backend; nothing else should use it.
	MountDir string
	// Listen are the S3 endpoint's addresses (host:port).
	Listen []string
	// AccessKey and SecretKey are the one account's credentials (SigV4).
	AccessKey, SecretKey string
	// Region is the region clients sign for (default us-east-1).
	Region string
	Logger *slog.Logger
}

// Run mounts the volume, serves S3 until ctx ends, then unmounts. Only one
// gateway may run per process (versitygw keeps process-wide state, and its
// backend changes the working directory to the mount).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Volume == nil || cfg.MountDir == "" || len(cfg.Listen) == 0 || cfg.AccessKey == "" || cfg.SecretKey == "" {
		return errors.New("s3gw: a volume, a mount directory, an address and credentials are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	fsys := fusefs.New(cfg.Volume, fusefs.Options{EntryTimeout: time.Second, AttrTimeout: time.Second})
	srv, err := fuse.NewServer(fsys, cfg.MountDir, &fuse.MountOptions{
		DirectMount: os.Geteuid() == 0,
		FsName:      "cairn:" + cfg.Volume.Name(),
		Name:        "cairn",
		MaxWrite:    1 << 20,
		// As cairn mount: the mount decides when cached pages go.
		ExplicitDataCacheControl: true,
	})
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w", cfg.Volume.Name(), cfg.MountDir, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return fmt.Errorf("mount %s on %s: %w", cfg.Volume.Name(), cfg.MountDir, err)
	}
	defer func() {
		// The backend made the mount the working directory: leave it,
		// or the unmount finds it busy.
		_ = os.Chdir("/")
		if err := srv.Unmount(); err != nil {
			cfg.Logger.Warn("unmount the gateway's mount", "dir", cfg.MountDir, "err", err)
		}
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
	defer be.Shutdown()
	cfg.Logger.Info("s3 gateway serving", "volume", cfg.Volume.Name(), "listen", cfg.Listen)
	return embedgw.RunVersityGW(ctx, be, &embedgw.Config{
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
