package s3gw

import (
	"context"
	"log/slog"

	"github.com/versity/versitygw/backend"

	"github.com/cairnfs/cairn/pkg/client"
)

// DirBuckets makes the top-level directories of one volume the buckets:
// creating a bucket makes a directory, and every directory made through a
// mount or the SDK at the top is a bucket.
type DirBuckets struct {
	Volume *client.Volume
}

func (d *DirBuckets) String() string { return "directories of volume " + d.Volume.Name() }

func (d *DirBuckets) open(_ context.Context, root string, log *slog.Logger) (func(backend.Backend) backend.Backend, func(), error) {
	srv, err := mount(d.Volume, root)
	if err != nil {
		return nil, nil, err
	}
	unmount := func() {
		if err := srv.Unmount(); err != nil {
			log.Warn("unmount the gateway's mount", "dir", root, "err", err)
		}
	}
	return func(be backend.Backend) backend.Backend { return be }, unmount, nil
}
