package main

import (
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/config"
)

// TestDeployConfigs: the example configurations under deploy/systemd name
// only flags their role has (config.Apply refuses unknown keys) and parse.
func TestDeployConfigs(t *testing.T) {
	for file, cmd := range map[string]*cobra.Command{
		"master.yaml": newMasterCmd(),
		"meta.yaml":   newNodeCmd("meta"),
		"data.yaml":   newNodeCmd("data"),
	} {
		if err := config.Apply(cmd.Flags(), filepath.Join("..", "..", "deploy", "systemd", file), nil); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
