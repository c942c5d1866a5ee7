//go:build !linux

package diskfs

import "os"

// Outside Linux the OS file system works for development but cannot punch
// holes and syncs with fsync; Cairn data nodes run on Linux.

func syncData(f *os.File) error { return f.Sync() }

func punchHole(*os.File, int64, int64) error { return ErrUnsupported }

func lockFile(*os.File) error { return nil }

func infoOf(fi os.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name(), Size: fi.Size(), AllocatedBytes: fi.Size(), IsDir: fi.IsDir()}
}
