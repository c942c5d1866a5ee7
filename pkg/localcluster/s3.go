package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/loopback"
)

// s3Proc is the name (and dir) of the S3 gateway child.
const s3Proc = "s3"

// S3EnvFile is the file, in the data dir, that holds the S3 gateway's
// endpoint and credentials as the AWS SDKs' own variables, so that
// `set -a; . <data-dir>/s3.env` makes any S3 tool use the gateway.
const S3EnvFile = "s3.env"

// s3Creds returns the gateway's credentials: those of an earlier start
// (kept in s3.env), or new random ones.
func (c *Cluster) s3Creds() (access, secret string, err error) {
	if b, err := os.ReadFile(filepath.Join(c.dir, S3EnvFile)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "AWS_ACCESS_KEY_ID":
				access = v
			case "AWS_SECRET_ACCESS_KEY":
				secret = v
			}
		}
		if access != "" && secret != "" {
			return access, secret, nil
		}
	}
	var a, s [20]byte
	if _, err := rand.Read(a[:]); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(s[:]); err != nil {
		return "", "", err
	}
	return "CAIRN" + strings.ToUpper(hex.EncodeToString(a[:8])), hex.EncodeToString(s[:]), nil
}

// startS3 starts the `cairn s3` child on a free loopback port, writes
// s3.env and waits until the gateway answers; on any failure it warns,
// stops the child and goes on.
func (c *Cluster) startS3(ctx context.Context) {
	warn := func(format string, a ...any) {
		fmt.Fprintf(c.opts.Out, "warning: no S3 gateway: "+format+"\n", a...)
		c.s3Endpoint = ""
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		warn("/dev/fuse is not available (%v)", err)
		return
	}
	access, secret, err := c.s3Creds()
	if err != nil {
		warn("%v", err)
		return
	}
	ports, err := loopback.FreePorts(1)
	if err != nil {
		warn("%v", err)
		return
	}
	mnt := filepath.Join(c.dir, s3Proc, "mnt")
	if ok, _ := IsMounted(mnt); ok {
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH) // left by a killed gateway
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		warn("%v", err)
		return
	}
	c.s3Endpoint = "http://" + ports[0]
	env := fmt.Sprintf("AWS_ENDPOINT_URL=%s\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\nAWS_REGION=us-east-1\n", c.s3Endpoint, access, secret)
	if err := os.WriteFile(filepath.Join(c.dir, S3EnvFile), []byte(env), 0o600); err != nil {
		warn("%v", err)
		return
	}
	p := Proc{Name: s3Proc, Role: s3Proc, Addr: ports[0]}
	if err := c.startChild(p, "AWS_ACCESS_KEY_ID="+access, "AWS_SECRET_ACCESS_KEY="+secret); err != nil {
		warn("%v", err)
		return
	}
	ch := c.childrenOf(s3Proc)[0]
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get(c.s3Endpoint + "/health"); err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-ch.done:
			warn("the gateway exited:\n%s", tail(c.LogPath(p), 5))
			return
		case <-ctx.Done():
			stopChild(ch, 10*time.Second)
			warn("the gateway did not answer in time:\n%s", tail(c.LogPath(p), 5))
			return
		case <-tick.C:
		}
	}
}

// S3Endpoint returns the S3 gateway's URL ("" if there is none).
func (c *Cluster) S3Endpoint() string { return c.s3Endpoint }
