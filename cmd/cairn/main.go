// Command cairn is the single binary of the Cairn distributed file system: every
// server role, the local cluster launcher and the admin tools are subcommands.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/config"
)

// Exit codes: usage errors (bad flags, arguments, config) exit 2; everything that
// went wrong at run time exits 1.
const (
	exitRuntime = 1
	exitUsage   = 2
)

// usageError marks an error as the user's invocation being wrong.
type usageError struct {
	err error
	cmd *cobra.Command
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(cmd *cobra.Command, format string, a ...any) error {
	return usageError{fmt.Errorf(format, a...), cmd}
}

func main() {
	if isMountHelper(os.Args[0]) {
		os.Exit(runMountHelper(os.Args[1:]))
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		if ue.cmd != nil {
			cmd = ue.cmd
		}
		fmt.Fprintf(os.Stderr, "cairn: error: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintf(os.Stderr, "cairn: error: %v\n", err)
	return exitRuntime
}

func newRootCmd() *cobra.Command {
	var configPath string
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn, a distributed POSIX file system",
		Long: `Cairn is a distributed POSIX file system: Raft-replicated masters keep the
cluster map, meta nodes keep the namespace and data nodes keep file contents.

Start a whole local cluster with 'cairn up'; look at it with 'cairn status'.

Every flag can also come from the environment (CAIRN_<FLAG>, e.g. CAIRN_DATA_DIR)
or from a YAML file given with --config (keys are flag names); the command line
wins over the environment, which wins over the file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			path := configPath
			if path == "" {
				path = os.Getenv(config.EnvName("config"))
			}
			if err := config.Apply(cmd.Flags(), path, os.Environ()); err != nil {
				return usageError{err, cmd}
			}
			return nil
		},
	}
	root.PersistentFlags().StringVar(&configPath, "config", "", "YAML config file whose keys are flag names")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err, c} })
	root.AddCommand(newMasterCmd(), newNodeCmd("meta"), newNodeCmd("data"), newUpCmd(), newStatusCmd(), newVolumeCmd(), newBenchCmd(), newMountCmd(), newFSCmd(), newFsckCmd(), newGCCmd(), newNodeAdminCmd(), newCertCmd(), newClientCmd(), newQuotaCmd(), newCSICmd(), newS3Cmd(), newLabCmd())
	return root
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef(cmd, "unexpected argument %q", args[0])
	}
	return nil
}

// exactArgs is cobra.ExactArgs with a usage error naming what is expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef(cmd, "expected %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// rangeArgs is cobra.RangeArgs with a usage error naming what is expected.
func rangeArgs(lo, hi int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usagef(cmd, "expected %s, got %d arguments", what, len(args))
		}
		return nil
	}
}
