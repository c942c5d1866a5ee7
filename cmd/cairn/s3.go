package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/s3gw"
)

func newS3Cmd() *cobra.Command {
	var (
		cf        clusterFlags
		listen    []string
		volume    string
		mountDir  string
		accessKey string
		secretKey string
		region    string
		buckets   string
	)
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "Serve a volume, or every volume, over S3",
		Long: `Serve Cairn over S3 on --listen. With --buckets dirs (the default) the buckets
are the top-level directories of one volume (--volume); with --buckets volumes
every volume is a bucket: creating a bucket creates a volume and deleting an
empty bucket deletes its volume (both need an admin identity). Objects are
files, so the same bytes are reachable through S3, the mount and the SDK.

Requests are signed with AWS Signature V4 by the one account
--access-key/--secret-key (default: the AWS SDKs' own variables
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Object metadata (ETag, user
metadata, content type) is kept in the files' extended attributes.

The gateway mounts the volume (or each volume it serves) with FUSE under
--mount-dir for its storage, so it needs /dev/fuse (as root, or fusermount3 for
other users).`,
		Example: "  AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s cairn s3 --data-dir ./cairn-data --listen 127.0.0.1:9000",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if buckets != "dirs" && buckets != "volumes" {
				return usagef(cmd, "--buckets %q: want dirs or volumes", buckets)
			}
			if buckets == "volumes" && cmd.Flags().Changed("volume") {
				return usagef(cmd, "--volume names the volume whose directories are the buckets: not with --buckets volumes")
			}
			if accessKey == "" {
				accessKey = os.Getenv("AWS_ACCESS_KEY_ID")
			}
			if secretKey == "" {
				secretKey = os.Getenv("AWS_SECRET_ACCESS_KEY")
			}
			if accessKey == "" || secretKey == "" {
				return usagef(cmd, "no credentials: give --access-key and --secret-key, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
			}
			addrs, conf, err := cf.endpoint(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var store s3gw.Buckets = &s3gw.VolumeBuckets{Masters: addrs, TLS: conf, Owner: accessKey}
			if buckets == "dirs" {
				octx, cancel := cf.context()
				v, err := client.Open(octx, addrs, volume, &client.Options{TLS: conf})
				cancel()
				if err != nil {
					return plainError(err)
				}
				defer v.Close()
				store = &s3gw.DirBuckets{Volume: v}
			}
			if mountDir == "" {
				if mountDir, err = os.MkdirTemp("", "cairn-s3-"); err != nil {
					return err
				}
				defer os.Remove(mountDir)
			}
			err = s3gw.Run(ctx, s3gw.Config{
				Buckets: store, MountDir: mountDir, Listen: listen,
				AccessKey: accessKey, SecretKey: secretKey, Region: region,
				Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
			})
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("s3 gateway: %w", err)
			}
			return nil
		},
	}
	cf.add(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&listen, "listen", []string{"127.0.0.1:9000"}, "S3 endpoint addresses (host:port), comma-separated")
	f.StringVar(&buckets, "buckets", "dirs", "what a bucket is: dirs (a top-level directory of --volume) or volumes (a volume)")
	f.StringVar(&volume, "volume", "default", "with --buckets dirs, the volume to serve")
	f.StringVar(&mountDir, "mount-dir", "", "empty directory under which the gateway mounts volumes for its storage (default: a new temporary one)")
	f.StringVar(&accessKey, "access-key", "", "the account's access key id (default $AWS_ACCESS_KEY_ID)")
	f.StringVar(&secretKey, "secret-key", "", "the account's secret key (default $AWS_SECRET_ACCESS_KEY)")
	f.StringVar(&region, "region", "us-east-1", "the region clients sign for")
	return cmd
}
