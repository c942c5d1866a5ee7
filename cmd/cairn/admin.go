package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/pki"
)

// clusterFlags are how every admin command finds the cluster: --master, or the
// cluster.json of a `cairn up` data dir; and its TLS identity (tlsFlags).
type clusterFlags struct {
	masters []string
	dataDir string
	timeout time.Duration
	tls     tlsFlags

	id      *pki.Identity // tlsConfig's identity (nil: --insecure), once loaded
	confErr error
	loaded  bool
}

func (c *clusterFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&c.masters, "master", nil, "master addresses, comma-separated (default: from --data-dir)")
	f.StringVar(&c.dataDir, "data-dir", "./cairn-data", "data dir of a 'cairn up' cluster, used when --master is not given")
	f.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to keep trying to reach the master leader")
	c.tls.add(cmd)
}

// addrs returns the masters' addresses: --master, or those of the 'cairn
// up' cluster in --data-dir.
func (c *clusterFlags) addrs(cmd *cobra.Command) ([]string, error) {
	if len(c.masters) > 0 {
		return c.masters, nil
	}
	l, err := localcluster.LoadLayout(c.dataDir)
	if errors.Is(err, localcluster.ErrNoCluster) {
		return nil, usagef(cmd, "no cluster found: pass --master ADDR, or --data-dir of a 'cairn up' cluster (%v)", err)
	}
	if err != nil {
		return nil, err
	}
	return l.MasterAddrs(), nil
}

// tlsConfig is the client TLS configuration to reach the cluster with;
// without --tls-dir, a cluster found through --data-dir lends its admin
// identity. The identity is read once per command.
func (c *clusterFlags) tlsConfig(cmd *cobra.Command) (*tls.Config, error) {
	if !c.loaded {
		fallback := ""
		if len(c.masters) == 0 {
			fallback = localcluster.TLSDir(c.dataDir, localcluster.AdminIdentity)
		}
		c.id, c.confErr = c.tls.identity(cmd, fallback)
		c.loaded = true
	}
	if c.confErr != nil || c.id == nil {
		return nil, c.confErr
	}
	return c.id.ClientConfig(), nil
}

// caps are the capabilities of the command's identity (none with
// --insecure, or for an admin).
func (c *clusterFlags) caps(cmd *cobra.Command) (capability.Caps, error) {
	if _, err := c.tlsConfig(cmd); err != nil || c.id == nil {
		return capability.Caps{}, err
	}
	return capability.FromCert(c.id.Certificate())
}

// endpoint returns the masters' addresses and the TLS configuration to
// reach them with.
func (c *clusterFlags) endpoint(cmd *cobra.Command) ([]string, *tls.Config, error) {
	addrs, err := c.addrs(cmd)
	if err != nil {
		return nil, nil, err
	}
	conf, err := c.tlsConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	return addrs, conf, nil
}

func (c *clusterFlags) client(cmd *cobra.Command) (*masterclient.Client, error) {
	addrs, conf, err := c.endpoint(cmd)
	if err != nil {
		return nil, err
	}
	return masterclient.New(addrs, conf, nil)
}

func (c *clusterFlags) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// plainError drops the gRPC "rpc error: code = X desc =" wrapping from errors the
// master sent on purpose, so the user reads the master's sentence.
func plainError(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return errors.New(s.Message())
	}
	return err
}
