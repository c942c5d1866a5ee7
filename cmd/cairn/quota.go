package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/bench/workload"
	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// quotaSettle is how long 'cairn quota set' waits after creating a quota
// before recounting the directory: every meta node learns of a quota with
// its next heartbeat (1 s by default), and charges only from then on.
const quotaSettle = 2500 * time.Millisecond

func newQuotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Limit the bytes and inodes below directories",
		Long: `A directory quota limits the bytes (apparent sizes of files and symbolic links)
and the inodes (files, directories and everything else, the directory itself
not included) below one directory of a volume. Creating or growing anything
below a directory whose quota is full fails with EDQUOT ("Disk quota
exceeded"). Quotas nest: a file counts toward every quota above it. df of a
mount made at a quota's directory (cairn mount --subdir) shows the quota.

Quotas are soft, as in CephFS and JuiceFS: usage reaches the meta nodes with
their heartbeats, so writers on several partitions can pass a limit by about
what they write in a second. A directory cannot be renamed between
directories under different quotas (EXDEV; mv copies instead); a file can,
and its charge moves with it.`,
		Args: noArgs,
	}
	cmd.AddCommand(newQuotaSetCmd(), newQuotaListCmd(), newQuotaRmCmd(), newQuotaCheckCmd())
	return cmd
}

// quotaFlags are the flags of the quota commands: the cluster, and the
// volume opened through the SDK to resolve paths and recount.
type quotaFlags struct{ fsFlags }

func (f *quotaFlags) add(cmd *cobra.Command) {
	f.clusterFlags.add(cmd)
}

// openAt opens volume and resolves path to a directory.
func (f *quotaFlags) openAt(cmd *cobra.Command, volume, path string) (*client.Volume, *client.Attr, error) {
	f.volume = volume
	v, err := f.open(cmd)
	if err != nil {
		return nil, nil, plainError(err)
	}
	ctx, cancel := f.context()
	defer cancel()
	a, err := v.StatPath(ctx, path, client.Cred{})
	if err != nil {
		v.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if !a.IsDir() {
		v.Close()
		return nil, nil, fmt.Errorf("%s is not a directory", path)
	}
	return v, a, nil
}

func newQuotaSetCmd() *cobra.Command {
	var (
		f              quotaFlags
		bytes, inodes  string
		noRecount      bool
		recountTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "set VOLUME PATH",
		Short: "Set (or change) the quota of a directory",
		Long: `Set the limits of the quota on directory PATH of VOLUME, creating the quota if
the directory has none. A limit of 0 is no limit. A new quota starts from a
recount of what the directory holds (as 'cairn quota check --repair' does),
unless --no-recount says it is empty.`,
		Example: "  cairn quota set default /projects/a --bytes 10GiB --inodes 100000\n  cairn quota set default /scratch --bytes 0   # remove the byte limit",
		Args:    exactArgs(2, "VOLUME and PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("bytes") && !cmd.Flags().Changed("inodes") {
				return usagef(cmd, "give --bytes, --inodes or both")
			}
			maxBytes, err := parseLimit(bytes, true)
			if err != nil {
				return usagef(cmd, "--bytes %q: %v", bytes, err)
			}
			maxInodes, err := parseLimit(inodes, false)
			if err != nil {
				return usagef(cmd, "--inodes %q: %v", inodes, err)
			}
			v, a, err := f.openAt(cmd, args[0], args[1])
			if err != nil {
				return err
			}
			defer v.Close()
			ctx, cancel := f.context()
			defer cancel()
			// Limits left out keep their value on an existing quota.
			old, err := v.QuotaOf(ctx, a.Ino)
			if err != nil {
				return plainError(err)
			}
			if old != nil {
				if !cmd.Flags().Changed("bytes") {
					maxBytes = old.Quota.MaxBytes
				}
				if !cmd.Flags().Changed("inodes") {
					maxInodes = old.Quota.MaxInodes
				}
			}
			q, err := v.SetQuota(ctx, a.Ino, args[1], maxBytes, maxInodes)
			if err != nil {
				return plainError(err)
			}
			fresh := time.Since(time.UnixMilli(q.SetUnixMs)) < time.Minute && q.BaseBytes == 0 && q.BaseInodes == 0
			fmt.Fprintf(cmd.OutOrStdout(), "quota %d on %s (inode %d): %s, %s\n", q.Id, q.Path, q.Ino, limitText(q.MaxBytes, true), limitText(q.MaxInodes, false))
			if !fresh || noRecount {
				return nil
			}
			time.Sleep(quotaSettle)
			rctx, rcancel := context.WithTimeout(context.Background(), recountTimeout)
			defer rcancel()
			r, err := recountQuota(rctx, cmd, v, q, true)
			if err != nil {
				return fmt.Errorf("recount %s: %w (run 'cairn quota check --repair')", q.Path, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "holds %s in %d inodes\n", humanBytes(uint64(max(r.Found.Bytes, 0))), r.Found.Inodes)
			return nil
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&bytes, "bytes", "0", "limit on bytes below the directory (e.g. 10GiB; 0: none)")
	fl.StringVar(&inodes, "inodes", "0", "limit on inodes below the directory (0: none)")
	fl.BoolVar(&noRecount, "no-recount", false, "the directory is new and empty: skip the recount")
	fl.DurationVar(&recountTimeout, "recount-timeout", time.Hour, "how long the recount of a directory with content may take")
	return cmd
}

func newQuotaListCmd() *cobra.Command {
	var (
		f      quotaFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list VOLUME",
		Short: "List a volume's quotas with their usage",
		Args:  exactArgs(1, "VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMaster(cmd, &f.clusterFlags, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.GetVolume(ctx, &pb.VolumeRequest{Name: args[0]}, o...)
				if err != nil {
					return err
				}
				if asJSON {
					return printQuotasJSON(cmd.OutOrStdout(), resp.Quotas)
				}
				printQuotas(cmd.OutOrStdout(), resp.Quotas)
				return nil
			})
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

type quotaJSON struct {
	ID         uint64 `json:"id"`
	Path       string `json:"path"`
	Ino        uint64 `json:"ino"`
	MaxBytes   uint64 `json:"max_bytes"`
	MaxInodes  uint64 `json:"max_inodes"`
	UsedBytes  int64  `json:"used_bytes"`
	UsedInodes int64  `json:"used_inodes"`
	UsedKnown  bool   `json:"used_known"`
}

func printQuotasJSON(w io.Writer, qs []*pb.QuotaState) error {
	out := make([]quotaJSON, 0, len(qs))
	for _, q := range qs {
		out = append(out, quotaJSON{ID: q.Quota.Id, Path: q.Quota.Path, Ino: q.Quota.Ino, MaxBytes: q.Quota.MaxBytes, MaxInodes: q.Quota.MaxInodes,
			UsedBytes: q.UsedBytes, UsedInodes: q.UsedInodes, UsedKnown: q.UsedKnown})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func printQuotas(w io.Writer, qs []*pb.QuotaState) {
	if len(qs) == 0 {
		fmt.Fprintln(w, "no quotas")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tINODE\tBYTES USED\tBYTE LIMIT\tINODES USED\tINODE LIMIT")
	for _, q := range qs {
		used, inodes := humanBytes(uint64(max(q.UsedBytes, 0))), fmt.Sprint(q.UsedInodes)
		if !q.UsedKnown {
			used, inodes = used+"?", inodes+"?"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", q.Quota.Path, q.Quota.Ino, used, limitText(q.Quota.MaxBytes, true), inodes, limitText(q.Quota.MaxInodes, false))
	}
	tw.Flush()
}

func newQuotaRmCmd() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "rm VOLUME PATH",
		Short: "Remove the quota of a directory",
		Args:  exactArgs(2, "VOLUME and PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, a, err := f.openAt(cmd, args[0], args[1])
			if err != nil {
				return err
			}
			defer v.Close()
			ctx, cancel := f.context()
			defer cancel()
			if err := v.RemoveQuota(ctx, a.Ino); err != nil {
				return plainError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "quota on %s removed\n", args[1])
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newQuotaCheckCmd() *cobra.Command {
	var (
		f       quotaFlags
		repair  bool
		timeout time.Duration
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "check VOLUME [PATH]",
		Short: "Recount quotas and repair drift",
		Long: `Walks the directory of every quota of VOLUME (or of the one on PATH) and compares
what it holds with the quota's usage. A crash between the steps of an operation
across meta partitions, a walk that could not reach a directory, or changes
made while a quota was being set leave usage that drifted; --repair corrects
it. Run it while the directories are quiet: changes during the walk may be
counted or not. Exits 0 when usage matches (or was repaired), 1 otherwise.`,
		Example: "  cairn quota check default\n  cairn quota check default /projects/a --repair",
		Args:    rangeArgs(1, 2, "VOLUME [PATH]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := "/"
			if len(args) == 2 {
				root = args[1]
			}
			v, a, err := f.openAt(cmd, args[0], root)
			if err != nil {
				return err
			}
			defer v.Close()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			qs, err := v.Quotas(ctx)
			if err != nil {
				return err
			}
			var results []quotaCheck
			drift := false
			for _, q := range qs {
				if len(args) == 2 && q.Quota.Ino != a.Ino {
					continue
				}
				r, err := recountQuota(ctx, cmd, v, q.Quota, repair)
				if err != nil {
					return fmt.Errorf("recount %s: %w", q.Quota.Path, err)
				}
				drift = drift || (r.Drift && !r.Repaired)
				results = append(results, r)
			}
			if len(args) == 2 && len(results) == 0 {
				return fmt.Errorf("%s has no quota", root)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			} else {
				printChecks(cmd.OutOrStdout(), results)
			}
			if drift {
				return errors.New("usage drifted; run with --repair")
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&repair, "repair", false, "correct the usage of quotas that drifted")
	cmd.Flags().DurationVar(&timeout, "walk-timeout", time.Hour, "how long the walks may take")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// quotaCheck is one quota's recount.
type quotaCheck struct {
	Path     string       `json:"path"`
	ID       uint64       `json:"id"`
	Found    client.Usage `json:"found"`
	Counted  client.Usage `json:"counted"`
	Drift    bool         `json:"drift"`
	Repaired bool         `json:"repaired"`
}

func printChecks(w io.Writer, rs []quotaCheck) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tBYTES FOUND\tBYTES COUNTED\tINODES FOUND\tINODES COUNTED\tSTATE")
	for _, r := range rs {
		state := "ok"
		switch {
		case r.Repaired:
			state = "repaired"
		case r.Drift:
			state = "drifted"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", r.Path, r.Found.Bytes, r.Counted.Bytes, r.Found.Inodes, r.Counted.Inodes, state)
	}
	tw.Flush()
}

// recountQuota walks q's directory, compares with q's usage and, with
// repair, rebases the quota so that its usage is what the walk found.
// The usage is read after the walk, once the partitions have reported
// what the walk saw (a heartbeat later).
func recountQuota(ctx context.Context, cmd *cobra.Command, v *client.Volume, q *pb.Quota, repair bool) (quotaCheck, error) {
	r := quotaCheck{Path: q.Path, ID: q.Id}
	start, last := time.Now(), time.Now()
	found, err := v.DirUsage(ctx, q.Ino, func(n int64) {
		if now := time.Now(); now.Sub(last) >= 2*time.Second {
			last = now
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d inodes counted (%s)\n", q.Path, n, now.Sub(start).Round(time.Second))
		}
	})
	if err != nil {
		return r, err
	}
	r.Found = found
	time.Sleep(quotaSettle)
	qs, err := v.Quotas(ctx)
	if err != nil {
		return r, err
	}
	var st *pb.QuotaState
	for _, s := range qs {
		if s.Quota.Id == q.Id {
			st = s
		}
	}
	if st == nil {
		return r, fmt.Errorf("quota %d was removed meanwhile", q.Id)
	}
	if !st.UsedKnown {
		return r, errors.New("not every meta partition has reported yet; try again shortly")
	}
	r.Counted = client.Usage{Bytes: st.UsedBytes, Inodes: st.UsedInodes}
	r.Drift = r.Counted != found
	if !r.Drift || !repair {
		return r, nil
	}
	if err := v.RebaseQuota(ctx, st, found); err != nil {
		return r, plainError(err)
	}
	r.Repaired = true
	return r, nil
}

// parseLimit reads a limit: a size with a unit for bytes, a count for
// inodes; 0 is no limit.
func parseLimit(s string, size bool) (uint64, error) {
	if size {
		n, err := workload.ParseSize(s)
		if err != nil {
			return 0, err
		}
		return uint64(n), nil // ParseSize refuses negative sizes
	}
	var n uint64
	if _, err := fmt.Sscan(s, &n); err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("want a count")
	}
	return n, nil
}

func limitText(n uint64, size bool) string {
	switch {
	case n == 0 && size:
		return "no byte limit"
	case n == 0:
		return "no inode limit"
	case size:
		return humanBytes(n)
	default:
		return fmt.Sprintf("%d inodes", n)
	}
}
