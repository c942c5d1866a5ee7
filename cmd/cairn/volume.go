package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/bench/workload"
	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

func newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Create, list, inspect and delete volumes",
		Long: `A volume is a named file system made of meta partitions (the namespace) and
data partitions (file contents), each replicated on several nodes chosen by the
master from the least-utilized ones.`,
		Args: noArgs,
	}
	cmd.AddCommand(newVolumeCreateCmd(), newVolumeListCmd(), newVolumeInfoCmd(), newVolumeDeleteCmd())
	return cmd
}

func newVolumeCreateCmd() *cobra.Command {
	var (
		cf                     clusterFlags
		metas, datas, replicas uint32
		capacity               uint64
		layout                 string
		chunkAlg               string
		chunkSizes             string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume",
		Long: `Create a volume: 1-63 letters, digits, '.', '_' or '-', starting with a letter
or digit. Its partitions are placed at once; the command fails without changing
anything if the name exists or too few nodes are alive for the replica count.`,
		Example: "  cairn volume create photos\n  cairn volume create scratch --replicas 1 --data-partitions 4\n  cairn volume create vms --layout cdc --chunk-sizes 16KiB,64KiB,256KiB",
		Args:    exactArgs(1, "a volume name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clustermap.ValidateVolumeName(args[0]); err != nil {
				return usageError{err, cmd}
			}
			if replicas > 7 {
				return usagef(cmd, "--replicas %d: at most 7", replicas)
			}
			l, err := clustermap.ParseLayout(layout)
			if err != nil {
				return usagef(cmd, "--layout: %v", err)
			}
			chunking, err := chunkingFlags(chunkAlg, chunkSizes)
			if err != nil {
				return usageError{err, cmd}
			}
			if err := clustermap.ValidateChunkLayout(uint32(l), chunking); err != nil {
				return usageError{err, cmd}
			}
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.CreateVolume(ctx, &pb.CreateVolumeRequest{
					Name: args[0], MetaPartitions: metas, DataPartitions: datas, Replicas: int32(replicas), CapacityBytes: capacity,
					DefaultLayout: uint32(l), Chunking: chunking,
				}, o...)
				if err != nil {
					return err
				}
				v := resp.Volume
				fmt.Fprintf(cmd.OutOrStdout(), "created volume %q (id %d): %d meta and %d data partitions, %d replicas each, %s layout\n",
					v.Name, v.Id, len(v.MetaPartitions), len(v.DataPartitions), v.Replicas, clustermap.LayoutName(metapb.FileLayout(v.DefaultLayout)))
				return nil
			})
		},
	}
	cf.add(cmd)
	f := cmd.Flags()
	f.Uint32Var(&metas, "meta-partitions", 0, "initial meta partitions (default 3)")
	f.Uint32Var(&datas, "data-partitions", 0, "initial data partitions (default 10)")
	f.Uint32Var(&replicas, "replicas", 0, "replicas of each partition (default 3)")
	f.Uint64Var(&capacity, "capacity", 0, "capacity in bytes (0: unlimited)")
	f.StringVar(&layout, "layout", "extent", "layout of new files: extent, or cdc (content-defined chunks with dedup); a directory's user.cairn.layout attribute overrides it")
	f.StringVar(&chunkAlg, "chunk-algorithm", "fastcdc1", "how cdc files are cut: fastcdc1 or rabin1 (fixed at creation)")
	f.StringVar(&chunkSizes, "chunk-sizes", "", "MIN,AVG,MAX chunk sizes of cdc files, AVG a power of two, MAX at most 1MiB (default 64KiB,256KiB,1MiB)")
	return cmd
}

// chunkingFlags reads --chunk-algorithm and --chunk-sizes into a volume's
// chunking; no sizes means chunker.Default's with the chosen algorithm.
func chunkingFlags(alg, sizes string) (*pb.ChunkLayout, error) {
	cfg := chunker.Default()
	switch alg {
	case chunker.FastCDC1.String():
		cfg.Algorithm = chunker.FastCDC1
	case chunker.Rabin1.String():
		cfg.Algorithm = chunker.Rabin1
	default:
		return nil, fmt.Errorf("--chunk-algorithm %q: want fastcdc1 or rabin1", alg)
	}
	if sizes != "" {
		parts := strings.Split(sizes, ",")
		if len(parts) != 3 {
			return nil, fmt.Errorf("--chunk-sizes %q: want MIN,AVG,MAX (e.g. 64KiB,256KiB,1MiB)", sizes)
		}
		var n [3]int
		for i, p := range parts {
			v, err := workload.ParseSize(p)
			if err != nil || v > math.MaxInt32 {
				return nil, fmt.Errorf("--chunk-sizes %q: bad size %q", sizes, p)
			}
			n[i] = int(v)
		}
		cfg.MinSize, cfg.AvgSize, cfg.MaxSize = n[0], n[1], n[2]
	}
	return clustermap.ChunkLayoutOf(cfg), nil
}

func newVolumeListCmd() *cobra.Command {
	var (
		cf     clusterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List volumes",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.ListVolumes(ctx, &pb.ListVolumesRequest{}, o...)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, resp.Volumes)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tID\tMETA PARTITIONS\tDATA PARTITIONS\tREPLICAS\tCREATED")
				for _, v := range resp.Volumes {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", v.Name, v.Id, len(v.MetaPartitions), len(v.DataPartitions), v.Replicas,
						time.UnixMilli(v.CreatedUnixMs).Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func newVolumeInfoCmd() *cobra.Command {
	var (
		cf     clusterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "info NAME",
		Short: "Show a volume and its partitions",
		Args:  exactArgs(1, "a volume name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.GetVolume(ctx, &pb.VolumeRequest{Name: args[0]}, o...)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, map[string]any{"volume": resp.Volume, "partitions": resp.Partitions, "epoch": resp.Epoch})
				}
				v := resp.Volume
				out := cmd.OutOrStdout()
				capacity := "unlimited"
				if v.CapacityBytes > 0 {
					capacity = humanBytes(v.CapacityBytes)
				}
				fmt.Fprintf(out, "volume %s (id %d), created %s\ncapacity %s, %d replicas, %d hash slots\nlayout of new files %s; cdc chunks %v\n\n",
					v.Name, v.Id, time.UnixMilli(v.CreatedUnixMs).Format(time.RFC3339), capacity, v.Replicas, len(v.SlotOwners),
					clustermap.LayoutName(metapb.FileLayout(v.DefaultLayout)), clustermap.ChunkConfig(v.Chunking))
				slots := map[uint64]int{}
				for _, o := range v.SlotOwners {
					slots[o]++
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "PARTITION\tKIND\tREPLICAS\tINODES\tSLOTS")
				for _, p := range resp.Partitions {
					kind, inodes, nslots := "data", "-", "-"
					if p.Kind == pb.PartitionKind_PARTITION_KIND_META {
						kind, nslots = "meta", fmt.Sprint(slots[p.Id])
						inodes = fmt.Sprintf("%d-", p.InodeStart)
						if p.InodeEnd != 0 {
							inodes += fmt.Sprint(p.InodeEnd)
						}
					}
					fmt.Fprintf(tw, "%d\t%s\t%v\t%s\t%s\n", p.Id, kind, p.Replicas, inodes, nslots)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				printRouting(out, v)
				return nil
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func newVolumeDeleteCmd() *cobra.Command {
	var (
		cf  clusterFlags
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "delete NAME --yes",
		Short: "Delete a volume and everything in it",
		Long:  "Delete a volume and its partitions. This cannot be undone, so --yes is required.",
		Args:  exactArgs(1, "a volume name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return usagef(cmd, "deleting volume %q destroys its files; add --yes to confirm", args[0])
			}
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				if _, err := m.DeleteVolume(ctx, &pb.VolumeRequest{Name: args[0]}, o...); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted volume %q\n", args[0])
				return nil
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	return cmd
}

// maxShownExceptions bounds the exception entries volume info lists.
const maxShownExceptions = 20

// printRouting shows a volume's live routing and any change in progress.
func printRouting(out io.Writer, v *pb.Volume) {
	fmt.Fprintf(out, "\nrouting version %d, %d exception entries\n", v.RoutingVersion, len(v.Exceptions))
	printExceptions(out, v.Exceptions)
	m := v.Migration
	if m == nil {
		return
	}
	phase := strings.ToLower(strings.TrimPrefix(m.Phase.String(), "MIGRATION_PHASE_"))
	fmt.Fprintf(out, "\nrouting change to version %d in progress: phase %s, reason %s, started %s",
		m.RoutingVersion, phase, m.Reason, time.UnixMilli(m.StartedUnixMs).Format(time.RFC3339))
	if m.MovedDentries > 0 {
		fmt.Fprintf(out, ", %d dentries copied", m.MovedDentries)
	}
	fmt.Fprintln(out)
	share := map[uint64]int{}
	for _, o := range m.SlotOwners {
		share[o]++
	}
	fmt.Fprint(out, "target slots:")
	for _, id := range v.MetaPartitions {
		fmt.Fprintf(out, " %d:%d", id, share[id])
	}
	fmt.Fprintf(out, "\ntarget exception entries: %d\n", len(m.Exceptions))
	printExceptions(out, m.Exceptions)
}

func printExceptions(out io.Writer, entries []*pb.ExceptionEntry) {
	for i, e := range entries {
		if i == maxShownExceptions {
			fmt.Fprintf(out, "  ... and %d more\n", len(entries)-i)
			return
		}
		switch hybridindex.Kind(e.Kind) {
		case hybridindex.Override:
			fmt.Fprintf(out, "  %q: override to meta partition %d\n", e.Name, e.Mp)
		default:
			fmt.Fprintf(out, "  %q: %v\n", e.Name, hybridindex.Kind(e.Kind))
		}
	}
}

// withMaster runs call against the master leader and turns gRPC errors into the
// server's plain message.
func withMaster(cmd *cobra.Command, cf *clusterFlags, call func(context.Context, pb.MasterClient, ...grpc.CallOption) error) error {
	c, err := cf.client(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := cf.context()
	defer cancel()
	return plainError(c.Do(ctx, call))
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
