package fsys

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
)

// The cairn backend will talk to a volume through the native client SDK (the
// one-hop path API, no FUSE). The SDK does not exist yet, so opening a cairn:
// target fails with ErrNotAvailable instead of pretending; the target syntax is
// checked now so that scripts written today keep working. When the SDK lands,
// this file implements FS on a client session: Mkdir/Rmdir/Unlink/Rename/Stat
// map to its metadata calls and OpenFile to its extent streams.

func init() {
	register("cairn", backend{open: openCairn, check: checkCairn, usage: "MASTER[,MASTER...]/VOLUME"})
}

// ErrNotAvailable is returned for backends whose client is not built yet.
var ErrNotAvailable = errors.New("not available yet")

func checkCairn(rest string) error {
	masters, volume, ok := strings.Cut(rest, "/")
	if !ok || masters == "" || volume == "" || strings.Contains(volume, "/") {
		return errors.New("cairn: want MASTER[,MASTER...]/VOLUME, e.g. cairn:127.0.0.1:17000/default")
	}
	for _, m := range strings.Split(masters, ",") {
		if _, _, err := net.SplitHostPort(m); err != nil {
			return fmt.Errorf("cairn: master %q: %v", m, err)
		}
	}
	return nil
}

func openCairn(_ context.Context, rest string, _ Options) (FS, error) {
	return nil, fmt.Errorf("target cairn:%s: the native Cairn backend is %w: it needs the client SDK, which has not landed; "+
		"mount the volume with FUSE and benchmark it as posix:MOUNTPOINT meanwhile", rest, ErrNotAvailable)
}
