package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/chunkgc"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/fsck"
)

// fsckShown bounds the findings printed without --json.
const fsckShown = 50

// fsckReport is the --json output.
type fsckReport struct {
	Volume     string            `json:"volume"`
	Partitions int               `json:"partitions"`
	Inodes     int               `json:"inodes"`
	Dentries   int               `json:"dentries"`
	Counts     map[fsck.Kind]int `json:"counts"`
	Findings   []fsck.Finding    `json:"findings"`
	Repairs    []fsckRepair      `json:"repairs,omitempty"`
	Skipped    []fsck.Skip       `json:"skipped,omitempty"`
	// Chunks is the recount of a chunked volume's references (cairn gc
	// --dry-run); nil for a volume without a chunk index.
	Chunks *chunkgc.Report `json:"chunks,omitempty"`
	Clean  bool            `json:"clean"` // nothing found, or everything repaired
}

type fsckRepair struct {
	Finding     int    `json:"finding"`
	Kind        string `json:"kind"`
	Partition   uint64 `json:"partition"`
	Description string `json:"description"`
	Applied     bool   `json:"applied"`
	Reason      string `json:"reason,omitempty"`
}

func newFsckCmd() *cobra.Command {
	var (
		cf     clusterFlags
		repair bool
		grace  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "fsck VOLUME",
		Short: "Check a volume's metadata and repair what crashed operations left",
		Long: `Scans every meta partition of VOLUME (all inodes and names) and reports
inconsistencies: orphan inodes, link counts that disagree with the names,
names of missing inodes, directories with several names, a stale parent
pointer, cycles or unreachable directories, names on the wrong partition and
inodes outside their partition's range.

With --repair, the findings that are safe to fix are fixed (orphans evicted,
link counts and parent pointers corrected, names of missing inodes deleted),
except those whose records changed within --grace: an operation may still be
between its steps. Run it on a live volume; results under heavy concurrent
change may include transient findings, which --repair re-checks before
changing anything.

Exits 0 when the volume is clean (or everything found was repaired), 1 when
problems remain, 2 on usage errors.`,
		Args: exactArgs(1, "VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if grace < 0 {
				return usagef(cmd, "--grace must not be negative")
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, err := readClusterMap(ctx, cmd, &cf)
			if err != nil {
				return err
			}
			layout, err := fsck.LayoutFromMap(m, args[0])
			if err != nil {
				return err
			}
			conf, err := cf.tlsConfig(cmd)
			if err != nil {
				return err
			}
			remote := fsck.NewRemote(m, cf.timeout, conf, nil)
			defer remote.Close()

			start := time.Now()
			snap, err := fsck.Collect(ctx, remote, layout, fsckProgress(cmd.ErrOrStderr(), start))
			if err != nil {
				return err
			}
			rep := fsckReport{Volume: layout.Volume, Partitions: len(snap.Partitions)}
			for _, p := range snap.Partitions {
				rep.Inodes += len(p.Inodes)
				rep.Dentries += len(p.Dentries)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "scanned %d inodes and %d names on %d meta partitions in %s\n",
				rep.Inodes, rep.Dentries, rep.Partitions, time.Since(start).Round(time.Millisecond))
			rep.Findings = fsck.Check(snap)
			rep.Counts = fsck.Count(rep.Findings)
			fixed := 0
			if repair && len(rep.Findings) > 0 {
				plan := fsck.PlanRepair(rep.Findings, fsck.PlanOptions{Now: time.Now(), Grace: grace})
				rep.Skipped = plan.Skipped
				for i, oc := range fsck.Apply(ctx, remote, plan, fsck.ApplyOptions{}) {
					a := plan.Actions[i]
					rep.Repairs = append(rep.Repairs, fsckRepair{Finding: a.Finding, Kind: string(a.Kind), Partition: a.Partition,
						Description: a.Description, Applied: oc.Applied, Reason: oc.Reason})
					if oc.Applied {
						fixed++
					}
				}
			}
			rep.Clean = fixed == len(rep.Findings)
			if vol := volumeByName(m, layout.Volume); len(vol.GetChunkIndexPartitions()) > 0 {
				// Chunk references, report only: cairn gc corrects leaks.
				in, err := chunkgc.Collect(ctx, remote, vol, chunkgc.DefaultQuiet, nil)
				if err != nil {
					return err
				}
				rep.Chunks = chunkgc.Recount(in)
				if rep.Chunks.Serious() {
					rep.Clean = false
				}
			}
			if asJSON {
				if rep.Findings == nil {
					rep.Findings = []fsck.Finding{}
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printFsck(cmd.OutOrStdout(), &rep, repair)
			}
			if rep.Clean {
				return nil
			}
			left := len(rep.Findings) - fixed
			if repair {
				return fmt.Errorf("volume %s: %d of %d problems not repaired", layout.Volume, left, len(rep.Findings))
			}
			return fmt.Errorf("volume %s: %d problems found (--repair fixes the safe ones)", layout.Volume, left)
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&repair, "repair", false, "repair what is safe to repair")
	cmd.Flags().DurationVar(&grace, "grace", fsck.DefaultGrace, "leave records changed more recently than this alone")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report (all findings) as JSON")
	return cmd
}

// volumeByName returns m's volume called name, or nil.
func volumeByName(m *pb.ClusterMap, name string) *pb.Volume {
	for _, v := range m.GetVolumes() {
		if v.GetName() == name {
			return v
		}
	}
	return nil
}

// printFsckChunks summarizes a chunk reference recount.
func printFsckChunks(w io.Writer, r *chunkgc.Report) {
	if r == nil {
		return
	}
	counts := map[chunkgc.Kind]int{}
	for _, f := range r.Findings {
		counts[f.Kind]++
	}
	fmt.Fprintf(w, "chunks: %d index entries, %d names in layouts, dedup ratio %.2f\n", r.Entries, r.LayoutChunks, r.DedupRatio())
	if n := counts[chunkgc.Leaked]; n > 0 {
		fmt.Fprintf(w, "chunks: %d entries with leaked references (%s); cairn gc releases them\n", n, humanBytes(r.LeakedBytes))
	}
	for _, k := range []chunkgc.Kind{chunkgc.Missing, chunkgc.Dangling} {
		if n := counts[k]; n > 0 {
			fmt.Fprintf(w, "chunks: %d %s (cairn gc VOLUME --dry-run --json lists them)\n", n, k)
		}
	}
}

// readClusterMap reads the cluster map from the masters cf names.
func readClusterMap(ctx context.Context, cmd *cobra.Command, cf *clusterFlags) (*pb.ClusterMap, error) {
	mc, err := cf.client(cmd)
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	var resp *pb.GetMapResponse
	err = mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the cluster map: %w", plainError(err))
	}
	return resp.GetMap(), nil
}

// fsckProgress prints a progress line to w at most every 2 s, so a long scan
// shows it is alive and a short one prints nothing.
func fsckProgress(w io.Writer, start time.Time) func(fsck.Progress) {
	last := start
	return func(p fsck.Progress) {
		if now := time.Now(); now.Sub(last) >= 2*time.Second {
			last = now
			fmt.Fprintf(w, "scanning: meta partition %d: %d %s read (%s)\n", p.Partition, p.Records, p.Kind, now.Sub(start).Round(time.Second))
		}
	}
}

func printFsck(w io.Writer, rep *fsckReport, repair bool) {
	fmt.Fprintf(w, "volume %s: %d meta partitions, %d inodes, %d names\n", rep.Volume, rep.Partitions, rep.Inodes, rep.Dentries)
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "clean: no problems found")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCOUNT")
	for _, k := range fsck.Kinds {
		if n := rep.Counts[k]; n > 0 {
			fmt.Fprintf(tw, "%s\t%d\n", k, n)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	shown := min(len(rep.Findings), fsckShown)
	if shown < len(rep.Findings) {
		fmt.Fprintf(w, "first %d of %d findings (--json lists all):\n", shown, len(rep.Findings))
	}
	for _, f := range rep.Findings[:shown] {
		fmt.Fprintf(w, "%-20s partition %d: %s\n", f.Kind, f.Partition, f.Explanation)
	}
	printFsckChunks(w, rep.Chunks)
	if !repair {
		return
	}
	fmt.Fprintln(w)
	for _, r := range rep.Repairs {
		if r.Applied {
			fmt.Fprintf(w, "repaired: %s (partition %d)\n", r.Description, r.Partition)
		} else {
			fmt.Fprintf(w, "not repaired: %s (partition %d): %s\n", r.Description, r.Partition, r.Reason)
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "left alone: %s: %s\n", rep.Findings[s.Finding].Explanation, s.Reason)
	}
}
