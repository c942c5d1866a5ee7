package sim

import (
	"bytes"
	"context"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// TestClusterServesAFile starts the default layout in a bubble and writes
// a file through the SDK.
func TestClusterServesAFile(t *testing.T) {
	if !ownProcess(t) {
		return
	}
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		defer Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		c, err := New(ctx, DefaultTopology, Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		t.Logf("cluster up after %v of simulated time", time.Since(start))
		if err := c.CreateVolume(ctx, "v", 0); err != nil {
			t.Fatal(err)
		}
		v, err := c.Open(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		want := bytes.Repeat([]byte("cairn "), 1000)
		cred := client.Cred{}
		f, err := v.OpenPath(ctx, "/a", os.O_CREATE|os.O_WRONLY, 0o644, cred)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("file written after %v of simulated time", time.Since(start))
	})
}
