package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
)

// clusterFlags are how every admin command finds the cluster: --master, or the
// cluster.json of a `cairn up` data dir.
type clusterFlags struct {
	masters []string
	dataDir string
	timeout time.Duration
}

func (c *clusterFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&c.masters, "master", nil, "master addresses, comma-separated (default: from --data-dir)")
	f.StringVar(&c.dataDir, "data-dir", "./cairn-data", "data dir of a 'cairn up' cluster, used when --master is not given")
	f.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to keep trying to reach the master leader")
}

func (c *clusterFlags) client(cmd *cobra.Command) (*masterclient.Client, error) {
	addrs := c.masters
	if len(addrs) == 0 {
		l, err := localcluster.LoadLayout(c.dataDir)
		if errors.Is(err, localcluster.ErrNoCluster) {
			return nil, usagef(cmd, "no cluster found: pass --master ADDR, or --data-dir of a 'cairn up' cluster (%v)", err)
		}
		if err != nil {
			return nil, err
		}
		addrs = l.MasterAddrs()
	}
	return masterclient.New(addrs)
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
