package fusefs

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/changefeed"
)

// TestKernelEpochMessage: a bump writes one FUSE notification header, 16
// bytes, whose length is its own, whose code is FUSE_NOTIFY_INC_EPOCH and
// whose unique is 0 (unsolicited); after close, bumps fail and write
// nothing.
func TestKernelEpochMessage(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e := &kernelEpoch{f: w}
	if err := e.bump(); err != nil {
		t.Fatal(err)
	}
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatal(err)
	}
	if l, code, unique := binary.NativeEndian.Uint32(hdr[0:]), int32(binary.NativeEndian.Uint32(hdr[4:])), binary.NativeEndian.Uint64(hdr[8:]); l != 16 || code != 8 || unique != 0 {
		t.Fatalf("header: len %d code %d unique %d, want 16 8 0", l, code, unique)
	}
	e.close()
	if err := e.bump(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("bump after close: %v, want os.ErrClosed", err)
	}
	e.close() // twice is harmless
	if n, err := r.Read(hdr[:]); err != io.EOF {
		t.Fatalf("read after close: %d bytes, %v; want EOF", n, err)
	}
}

// TestForgetAllBumpsOnlyForGrants: a forget-all bumps the kernel's epoch
// only when a name was granted since the last one, since a bump drops
// every cached entry and, with it, the cached pages of every file no
// handle holds open. A feed's first answer may be a forget-all made
// before any grant.
func TestForgetAllBumpsOnlyForGrants(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "epoch")
	if err != nil {
		t.Fatal(err)
	}
	fs := &FS{}
	fs.epoch.Store(&kernelEpoch{f: f})
	c := newCoherence(fs, time.Minute, time.Second)
	defer close(c.stop)
	bumps := func() int64 {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size() / 16
	}
	now := time.Now()
	c.forgetAll(now)
	if n := bumps(); n != 0 {
		t.Fatalf("a forget-all with nothing granted bumped the epoch %d times", n)
	}
	c.cache.setHealthy(true)
	name := changefeed.Name{Parent: 1, Name: "f"}
	if !c.cache.grant(c.cache.begin(), now.Add(-time.Second), &name, 0) {
		t.Fatal("no grant on a healthy feed")
	}
	c.forgetAll(now)
	if n := bumps(); n != 1 {
		t.Fatalf("a forget-all with a name granted bumped the epoch %d times, want 1", n)
	}
	c.forgetAll(now)
	if n := bumps(); n != 1 {
		t.Fatalf("a forget-all after one that took every grant bumped the epoch (%d bumps, want 1)", n)
	}
	// A name granted, then taken back by a notice whose invalidation may
	// wait for its directory's lock (a stalled create holds it): the
	// next forget-all still bumps, although nothing is granted any more.
	c.cache.setHealthy(true)
	if !c.cache.grant(c.cache.begin(), now.Add(-time.Second), &name, 0) {
		t.Fatal("no grant on a healthy feed")
	}
	if told, _, _, _ := c.cache.notice(now, []changefeed.Name{name}, nil); len(told) != 1 {
		t.Fatalf("the notice took back %v, want %v", told, name)
	}
	c.forgetAll(now)
	if n := bumps(); n != 2 {
		t.Fatalf("a forget-all after a name was granted and taken back: %d bumps, want 2", n)
	}
}
