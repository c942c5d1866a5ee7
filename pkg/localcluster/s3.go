package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/loopback"
	"github.com/cairnfs/cairn/pkg/pki"
)

// s3Proc is the name (and dir) of the S3 gateway child.
const s3Proc = "s3"

// S3EnvFile is the file, in the data dir, that holds the S3 gateway's
// endpoint and credentials as the AWS SDKs' own variables, so that
// `set -a; . <data-dir>/s3.env` makes any S3 tool use the gateway.
const S3EnvFile = "s3.env"

// s3ClientName is the name the masters record the gateway's identity
// under ('cairn client list').
const s3ClientName = "cairn-up-s3"

// ensureS3Identity makes sure <data-dir>/tls/s3 holds the gateway's
// identity: a client identity (pkg/capability) bound to the volume it
// serves, read-write, as 'cairn client create cairn-up-s3 --volume V'
// makes, rather than the admin identity, so that whoever takes over the
// gateway reaches that one volume and no admin method of the masters. It
// is issued on the gateway's first start and kept; one bound to another
// volume (another --volume, or a volume of the same name deleted and made
// again) is replaced, its record revoked. A revoked identity is not
// replaced: remove the directory for a new one.
func (c *Cluster) ensureS3Identity(ctx context.Context) error {
	var vol *pb.Volume
	err := c.client.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		resp, err := m.GetVolume(ctx, &pb.VolumeRequest{Name: c.opts.Volume}, o...)
		vol = resp.GetVolume()
		return err
	})
	if err != nil {
		return fmt.Errorf("volume %q: %w", c.opts.Volume, err)
	}
	dir := TLSDir(c.dir, S3Identity)
	if pki.Exists(dir) {
		if id, err := pki.Load(dir); err == nil {
			caps, err := capability.FromCert(id.Certificate())
			if err == nil && pki.KindOf(id.Certificate()) == pki.KindClient && caps.VolumeID == vol.GetId() {
				return nil
			}
		}
	}
	caps := capability.Caps{Volume: c.opts.Volume, VolumeID: vol.GetId()}
	ext, err := caps.Extension()
	if err != nil {
		return err
	}
	is, err := pki.Sign(TLSDir(c.dir, CAIdentity), pki.Request{Name: s3ClientName, Kind: pki.KindClient, Extensions: []pkix.Extension{ext}})
	if err != nil {
		return err
	}
	rec := &pb.Client{Name: s3ClientName, Serial: pki.Serial(is.Cert), Caps: ext.Value, NotAfterUnixMs: is.Cert.NotAfter.UnixMilli()}
	err = c.client.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.CreateClient(ctx, &pb.CreateClientRequest{Client: rec}, o...)
		if status.Code(err) == codes.AlreadyExists {
			// The identity it replaces, or one recorded by a start that
			// stopped before writing it.
			if _, err := m.Revoke(ctx, &pb.RevokeRequest{Client: s3ClientName}, o...); err != nil {
				return err
			}
			_, err = m.CreateClient(ctx, &pb.CreateClientRequest{Client: rec}, o...)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record the gateway's identity: %w", err)
	}
	// Written only once recorded, so that no identity exists that the
	// masters cannot list or revoke.
	return is.Write(dir)
}

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
	if !c.opts.Insecure {
		if err := c.ensureS3Identity(ctx); err != nil {
			warn("%v", err)
			return
		}
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
