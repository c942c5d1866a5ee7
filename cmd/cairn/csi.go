package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/csi"
)

func newCSICmd() *cobra.Command {
	var (
		cf       clusterFlags
		endpoint string
		nodeID   string
		logDir   string
	)
	cmd := &cobra.Command{
		Use:   "csi",
		Short: "Serve the Kubernetes CSI driver (identity, controller and node services)",
		Long: `Serve Cairn's Container Storage Interface driver (` + csi.PluginName + `) on --endpoint.
Kubernetes runs it twice: as the controller (with the external provisioner and
resizer sidecars; it needs an admin identity, since it sets quotas and may
create volumes) and as the node plugin on every node (with the node registrar;
it mounts volumes for pods by starting 'cairn mount' processes, so it needs
/dev/fuse and privileges). deploy/helm/cairn installs both.

StorageClass parameters:
  kind=subdir     (default) a directory of a Cairn volume with a directory
                  quota of the requested size; volume=NAME (default "default"),
                  parent=/DIR (default "/csi")
  kind=volume     a whole Cairn volume with the requested capacity;
                  replicas=N (default: the master's)

Every access mode is supported, ReadWriteMany included; raw block volumes are
not. Volumes of kind subdir can be expanded online.`,
		Example: "  cairn csi --endpoint unix:///csi/csi.sock --master cairn-master-0:17000 --tls-dir /etc/cairn/tls --node-id $NODE_NAME",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoint == "" {
				return usagef(cmd, "--endpoint is required (unix:///path/csi.sock or tcp://host:port)")
			}
			addrs, conf, err := cf.endpoint(cmd)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			mountArgs := []string{"--master", strings.Join(addrs, ",")}
			if cf.id == nil {
				mountArgs = append(mountArgs, "--insecure")
			} else {
				mountArgs = append(mountArgs, "--tls-dir", cf.id.Dir())
			}
			d, err := csi.New(csi.Config{
				Endpoint: endpoint, NodeID: nodeID, Masters: addrs, TLS: conf, Version: buildVersion(),
				Mounter: &csi.ProcessMounter{Binary: exe, Args: mountArgs, LogDir: logDir},
				Logger:  slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
			})
			if err != nil {
				return err
			}
			defer d.Close()
			ln, err := csi.Listen(endpoint)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := d.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	cf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&endpoint, "endpoint", "", "where to serve CSI: unix:///path/csi.sock or tcp://host:port")
	f.StringVar(&nodeID, "node-id", "", "this node's name (Kubernetes: the node name; default the host name)")
	f.StringVar(&logDir, "mount-log-dir", "", "directory for the logs of the mounts the node plugin starts (default the temp dir)")
	return cmd
}

// buildVersion is the main module's version as the Go build recorded it
// (a VCS revision for a build from a checkout).
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return "dev"
}
