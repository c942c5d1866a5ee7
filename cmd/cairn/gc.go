package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/chunkgc"
	"github.com/cairnfs/cairn/pkg/fsck"
)

// gcReport is the --json output of cairn gc.
type gcReport struct {
	Volume     string          `json:"volume"`
	DryRun     bool            `json:"dry_run"`
	DedupRatio float64         `json:"dedup_ratio"`
	Fixed      int             `json:"fixed"`
	Report     *chunkgc.Report `json:"report"`
}

func newGCCmd() *cobra.Command {
	var (
		cf     clusterFlags
		dryRun bool
		quiet  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "gc VOLUME",
		Short: "Recount a volume's chunk references and release leaked ones",
		Long: `Reads VOLUME's chunk index and every chunked file's layout, and compares each
chunk's reference count with the times layouts name it. A writer that crashed
between taking references and committing its layout leaves counts too high
(leaked references): gc lowers them, so that the meta partitions' collector
reclaims chunks nothing uses. An entry changed within --quiet is left alone (a
writer may be committing), as is everything while chunk drops are pending.
Counts too low and layouts naming chunks the index lacks are reported, never
changed: they would be bugs.

With --dry-run nothing is changed. Exits 0 when no serious problem was found,
1 otherwise, 2 on usage errors.`,
		Example: "  cairn gc default --dry-run\n  cairn gc default",
		Args:    exactArgs(1, "VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if quiet < 0 {
				return usagef(cmd, "--quiet must not be negative")
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, err := readClusterMap(ctx, cmd, &cf)
			if err != nil {
				return err
			}
			vol := volumeByName(m, args[0])
			if vol == nil {
				return fmt.Errorf("volume %q does not exist", args[0])
			}
			if len(vol.GetChunkIndexPartitions()) == 0 {
				return fmt.Errorf("volume %q has no chunk index (it was created before chunked files existed)", args[0])
			}
			conf, err := cf.tlsConfig(cmd)
			if err != nil {
				return err
			}
			remote := fsck.NewRemote(m, cf.timeout, conf, nil)
			defer remote.Close()
			start := time.Now()
			last := start
			in, err := chunkgc.Collect(ctx, remote, vol, quiet, func(kind string, n int) {
				if now := time.Now(); now.Sub(last) >= 2*time.Second {
					last = now
					fmt.Fprintf(cmd.ErrOrStderr(), "scanning: %d %s read (%s)\n", n, kind, now.Sub(start).Round(time.Second))
				}
			})
			if err != nil {
				return err
			}
			rep := chunkgc.Recount(in)
			out := gcReport{Volume: vol.GetName(), DryRun: dryRun, DedupRatio: rep.DedupRatio(), Report: rep}
			if !dryRun {
				if out.Fixed, err = chunkgc.Apply(ctx, remote, rep, fsck.RandomID); err != nil {
					return err
				}
			}
			if asJSON {
				if rep.Findings == nil {
					rep.Findings = []chunkgc.Finding{}
				}
				if err := printJSON(cmd, out); err != nil {
					return err
				}
			} else {
				printGC(cmd.OutOrStdout(), &out)
			}
			if rep.Serious() {
				return fmt.Errorf("volume %s: chunk references disagree with layouts in ways gc does not repair (see above)", vol.GetName())
			}
			return nil
		},
	}
	cf.add(cmd)
	f := cmd.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "report only; change nothing")
	f.DurationVar(&quiet, "quiet", chunkgc.DefaultQuiet, "leave entries changed within this long alone (a writer may be committing)")
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printGC(w io.Writer, out *gcReport) {
	r := out.Report
	fmt.Fprintf(w, "volume %s: %d chunk index entries (%d without references, %d being reclaimed)\n", out.Volume, r.Entries, r.ZeroRef, r.Dead)
	fmt.Fprintf(w, "stored %s for %s named by layouts: dedup ratio %.2f\n", humanBytes(r.StoredBytes), humanBytes(r.LogicalBytes), out.DedupRatio)
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "clean: every count matches the layouts")
		return
	}
	fmt.Fprintf(w, "%d leaked references holding %s\n", r.LeakedRefs, humanBytes(r.LeakedBytes))
	if r.DropsPending {
		fmt.Fprintln(w, "chunk drops were pending: no leak fixed this time; run again when writes are quiet")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tFINGERPRINT\tSHARD\tINDEX REFS\tLAYOUT REFS\tNOTE")
	for _, f := range r.Findings[:min(len(r.Findings), fsckShown)] {
		note := f.Reason
		if f.Fixable {
			note = "fixed"
			if out.DryRun {
				note = "would fix"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", f.Kind, f.Fingerprint, f.Partition, f.IndexRefs, f.LayoutRefs, note)
	}
	tw.Flush()
	if n := len(r.Findings) - fsckShown; n > 0 {
		fmt.Fprintf(w, "... and %d more (--json lists all)\n", n)
	}
	if !out.DryRun {
		fmt.Fprintf(w, "%d entries corrected\n", out.Fixed)
	}
}
