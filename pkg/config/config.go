// Package config fills a command's flags from, in increasing precedence, a YAML
// config file, CAIRN_* environment variables, and the command line. Commands keep
// reading their flag variables; after Apply those hold the merged values.
//
// A flag named data-dir is the key "data-dir" in the file and CAIRN_DATA_DIR in the
// environment. Keys in the file that no flag of the command knows are an error, so
// that a typo is reported instead of silently ignored.
package config

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// EnvPrefix starts every environment variable Cairn reads.
const EnvPrefix = "CAIRN_"

// EnvName is the environment variable that sets flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply merges file (may be empty) and environ (os.Environ() form) into fs for
// every flag the user did not set on the command line. The config flag itself
// is never read from the file.
func Apply(fs *pflag.FlagSet, path string, environ []string) error {
	k := koanf.New("\x00") // keys are flag names, which may contain dots
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		var unknown []string
		for _, key := range k.Keys() {
			if fs.Lookup(key) == nil {
				unknown = append(unknown, key)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("config file %s: unknown keys %s", path, strings.Join(unknown, ", "))
		}
	}
	byEnv := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { byEnv[EnvName(f.Name)] = f.Name })
	err := k.Load(env.Provider("\x00", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(key, v string) (string, any) {
			return byEnv[key], v // "" drops variables that name no flag
		},
	}), nil)
	if err != nil {
		return fmt.Errorf("environment: %w", err)
	}
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if firstErr != nil || f.Changed || f.Name == "config" || !k.Exists(f.Name) {
			return
		}
		val := k.String(f.Name)
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			items := k.Strings(f.Name)
			if s, isString := k.Get(f.Name).(string); isString {
				items = strings.Split(s, ",") // environment lists are comma-separated
			}
			if err := sv.Replace(items); err != nil {
				firstErr = fmt.Errorf("%s: %w", f.Name, err)
			}
			return
		}
		if err := fs.Set(f.Name, val); err != nil {
			firstErr = fmt.Errorf("invalid value %q for %s (from config file or %s): %w", val, f.Name, EnvName(f.Name), err)
		}
	})
	return firstErr
}
