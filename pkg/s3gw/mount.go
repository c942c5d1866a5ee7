package s3gw

import (
	"fmt"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/fusefs"
)

// mount mounts v on dir with FUSE, as `cairn mount` does, for the
// backend's use only, and returns once the kernel serves it.
func mount(v *client.Volume, dir string) (*fuse.Server, error) {
	fsys := fusefs.New(v, fusefs.Options{EntryTimeout: time.Second, AttrTimeout: time.Second})
	srv, err := fusefs.NewServer(fsys, dir, fusefs.ServerOptions(v.Name()))
	if err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", v.Name(), dir, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount %s on %s: %w", v.Name(), dir, err)
	}
	return srv, nil
}
